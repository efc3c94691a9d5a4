// metalboot dashboard: read-only views over the REST API, no build step.
//
// Token: /dashboard?token=<reader token> stores it in sessionStorage and drops it
// from the address bar; otherwise the page asks once per tab. Every answer is put
// into the page with textContent / DOM nodes, never as HTML.
"use strict";

(function () {
  const KEY = "metalboot-token";
  const REFRESH_MS = 5000;
  const PAGE = 1000;           // machines per page (the API's max_page_size default)
  const MAX_PAGES = 10;        // at most 10,000 machines per migration are read
  const TABLE_ROWS = 500;      // machine rows shown per migration
  const FAILED = ["rolled_back", "rollback_failed", "invalid"];
  const ORDER = ["queued", "validating", "preparing", "activating", "awaiting_boot",
    "verifying", "rolling_back", "done", "valid", "rolled_back", "rollback_failed",
    "invalid", "skipped", "cancelled"];
  const SVGNS = "http://www.w3.org/2000/svg";

  let timer = null;
  const finishedCache = new Map();  // migration id -> machines of a finished migration

  class AuthError extends Error {}

  // -- helpers ------------------------------------------------------------------
  function $(id) { return document.getElementById(id); }

  function el(tag, attrs, ...children) {
    const node = document.createElement(tag);
    for (const [key, value] of Object.entries(attrs || {})) {
      if (value === null || value === undefined || value === false) continue;
      if (key === "class") node.className = value;
      else if (key === "dataset") Object.assign(node.dataset, value);
      else node.setAttribute(key, value === true ? "" : String(value));
    }
    for (const child of children.flat()) {
      if (child === null || child === undefined) continue;
      node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
    }
    return node;
  }

  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVGNS, tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
    if (text !== undefined) node.textContent = String(text);
    return node;
  }

  function clear(node) { while (node.firstChild) node.removeChild(node.firstChild); return node; }

  function stateOrder(a, b) {
    const ia = ORDER.indexOf(a), ib = ORDER.indexOf(b);
    return (ia < 0 ? 99 : ia) - (ib < 0 ? 99 : ib) || a.localeCompare(b);
  }

  function when(iso) {
    if (!iso) return "";
    return iso.replace("T", " ").replace(/\.\d+/, "").replace(/Z$/, "") + " UTC";
  }

  function short(id) { return id && id.length > 13 ? id.slice(0, 8) + "…" : id; }

  function chip(state, n) {
    return el("span", {class: "chip state-" + state, dataset: {state: state, count: n}},
      el("span", {class: "chip-state"}, state), " ", el("b", {class: "chip-count"}, String(n)));
  }

  // The state a person reads: "done · failed (3 of 3 failed)", coloured by the
  // result of a finished migration, not by its state alone.
  function stateBadge(m, id) {
    let text = m.state;
    if (m.result) {
      text += " · " + m.result.replace("_", " ");
      if (m.failed) text += " (" + m.failed + " of " + (m.failed + m.succeeded) + " failed)";
    }
    return el("span", {class: "badge mstate-" + m.state + (m.result ? " result-" + m.result : ""),
      id: id, dataset: {state: m.state, result: m.result || ""}}, text);
  }

  function progressBar(fraction, counts, total) {
    const bar = el("div", {class: "progress", role: "progressbar", "aria-valuemin": 0,
      "aria-valuemax": 100, "aria-valuenow": Math.round(fraction * 100)});
    // one segment per finished state, so failures show in red
    const segments = [["done", "ok"], ["valid", "ok"], ["skipped", "skip"], ["cancelled", "skip"],
      ["rolled_back", "fail"], ["rollback_failed", "fail"], ["invalid", "fail"]];
    for (const [state, kind] of segments) {
      const n = (counts || {})[state] || 0;
      if (!n || !total) continue;
      const seg = el("span", {class: "seg seg-" + kind, title: state + ": " + n});
      seg.style.width = (100 * n / total).toFixed(2) + "%";
      bar.appendChild(seg);
    }
    return el("div", {class: "progress-wrap"}, bar,
      el("span", {class: "progress-label"}, (fraction * 100).toFixed(0) + "%"));
  }

  function setStatus(text, error) {
    const node = $("status");
    node.textContent = text;
    node.className = "status" + (error ? " error" : "");
  }

  // -- token and API ---------------------------------------------------------------
  function takeTokenFromUrl() {
    const url = new URL(window.location.href);
    const given = url.searchParams.get("token");
    if (given) {
      sessionStorage.setItem(KEY, given);
      url.searchParams.delete("token");
      history.replaceState(null, "", url.pathname + url.search + url.hash);
    }
  }

  function token() { return sessionStorage.getItem(KEY); }

  async function api(path) {
    const response = await fetch(path, {
      headers: {Authorization: "Bearer " + token(), Accept: "application/json"},
      cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer"});
    if (response.status === 401) throw new AuthError("the token was refused");
    if (!response.ok) {
      let message = "HTTP " + response.status;
      try { message += ": " + (await response.json()).error.message; } catch (e) { /* not JSON */ }
      throw new Error(path.split("?")[0] + ": " + message);
    }
    return response.json();
  }

  async function allMachines(migrationId) {
    let out = [], marker = null, truncated = false;
    for (let page = 0; page < MAX_PAGES; page++) {
      const q = "limit=" + PAGE + (marker !== null ? "&marker=" + marker : "");
      const body = await api("/v1/migrations/" + encodeURIComponent(migrationId) + "/machines?" + q);
      out = out.concat(body.machines);
      marker = body.next_marker;
      if (marker === null || marker === undefined) return {machines: out, truncated: false};
      truncated = true;
    }
    return {machines: out, truncated: truncated};
  }

  async function failures(migrationId) {
    const out = [];
    for (const state of FAILED) {
      const body = await api("/v1/migrations/" + encodeURIComponent(migrationId) +
        "/machines?state=" + state + "&limit=100");
      out.push(...body.machines);
    }
    return out.sort((a, b) => a.position - b.position);
  }

  // -- views ------------------------------------------------------------------------
  function route() {
    const parts = (window.location.hash || "#/").slice(2).split("/").map(decodeURIComponent);
    if (parts[0] === "machines" && parts[1]) return {view: "machine", id: parts[1]};
    if (parts[0] === "migrations" && parts[1]) return {view: "migration", id: parts[1]};
    return {view: "overview"};
  }

  function renderMigrations(list) {
    const body = clear($("migrations").tBodies[0]);
    $("migrations-empty").hidden = list.length > 0;
    const totals = {};
    for (const m of list) {
      for (const [state, n] of Object.entries(m.counts)) totals[state] = (totals[state] || 0) + n;
      const counts = el("div", {class: "chips small"},
        Object.keys(m.counts).sort(stateOrder).map((s) => chip(s, m.counts[s])));
      body.appendChild(el("tr", {class: "migration-row", dataset: {migrationId: m.id}},
        el("td", {}, el("a", {href: "#/migrations/" + encodeURIComponent(m.id), title: m.id},
          el("code", {}, m.id))),
        el("td", {}, m.boot_interface),
        el("td", {}, stateBadge(m)),
        el("td", {}, progressBar(m.progress, m.counts, m.total),
          el("div", {class: "muted"}, m.total + " machine" + (m.total === 1 ? "" : "s"))),
        el("td", {}, counts),
        el("td", {class: "nowrap"}, when(m.created_at))));
    }
    const chips = clear($("totals"));
    const states = Object.keys(totals).sort(stateOrder);
    if (!states.length) chips.appendChild(el("span", {class: "muted"}, "none"));
    for (const s of states) chips.appendChild(chip(s, totals[s]));
  }

  function niceStep(raw) {
    if (raw <= 0) return 1;
    const power = Math.pow(10, Math.floor(Math.log10(raw)));
    for (const m of [1, 2, 2.5, 5, 10]) if (m * power >= raw) return m * power;
    return 10 * power;
  }

  function fmt(seconds) {
    if (seconds >= 100) return seconds.toFixed(0);
    if (seconds >= 10) return seconds.toFixed(1).replace(/\.0$/, "");
    return String(Math.round(seconds * 100) / 100);
  }

  // An SVG histogram of seconds_to_evidence.
  function histogram(values) {
    const W = 720, H = 240, left = 48, right = 16, top = 16, bottom = 44;
    const node = svg("svg", {id: "evidence-histogram", class: "histogram", role: "img",
      viewBox: "0 0 " + W + " " + H, width: W, height: H, "data-count": values.length,
      "aria-label": "histogram of seconds from reset to boot evidence, " + values.length +
        " machines"});
    const max = Math.max(...values);
    const step = niceStep(Math.max(max, 0.001) / 10);
    const bins = Math.max(1, Math.floor(max / step) + 1);
    const counts = new Array(bins).fill(0);
    for (const v of values) counts[Math.min(bins - 1, Math.floor(v / step))]++;
    const peak = Math.max(...counts);
    const plotW = W - left - right, plotH = H - top - bottom, barW = plotW / bins;
    // axes
    node.appendChild(svg("line", {class: "axis", x1: left, y1: top + plotH, x2: W - right,
      y2: top + plotH}));
    node.appendChild(svg("line", {class: "axis", x1: left, y1: top, x2: left, y2: top + plotH}));
    node.appendChild(svg("text", {class: "tick", x: left - 6, y: top + 4, "text-anchor": "end"},
      peak));
    node.appendChild(svg("text", {class: "tick", x: left - 6, y: top + plotH, "text-anchor": "end"},
      0));
    node.appendChild(svg("text", {class: "axis-label", x: left + plotW / 2, y: H - 6,
      "text-anchor": "middle"}, "seconds from reset (activation) to boot evidence"));
    node.appendChild(svg("text", {class: "axis-label", x: 12, y: top + plotH / 2,
      "text-anchor": "middle", transform: "rotate(-90 12 " + (top + plotH / 2) + ")"},
      "machines"));
    const labelEvery = Math.ceil(bins / 10);
    counts.forEach((n, i) => {
      const h = peak ? plotH * n / peak : 0;
      const x = left + i * barW;
      const bar = svg("rect", {class: "bar", x: x + 1, y: top + plotH - h,
        width: Math.max(1, barW - 2), height: h, "data-bin-start": step * i, "data-count": n});
      bar.appendChild(svg("title", {}, fmt(step * i) + "–" + fmt(step * (i + 1)) + " s: " + n +
        " machine" + (n === 1 ? "" : "s")));
      node.appendChild(bar);
      if (n) node.appendChild(svg("text", {class: "bar-count", x: x + barW / 2,
        y: top + plotH - h - 3, "text-anchor": "middle"}, n));
      if (i % labelEvery === 0) node.appendChild(svg("text", {class: "tick", x: x,
        y: top + plotH + 14, "text-anchor": "middle"}, fmt(step * i)));
    });
    node.appendChild(svg("text", {class: "tick", x: left + plotW, y: top + plotH + 14,
      "text-anchor": "middle"}, fmt(step * bins)));
    return node;
  }

  function renderChart(machines) {
    const values = machines.map((m) => m.seconds_to_evidence)
      .filter((v) => v !== null && v !== undefined);
    const box = clear($("evidence-chart"));
    box.dataset.count = values.length;
    if (!values.length) {
      box.appendChild(el("p", {class: "muted"}, "No boot evidence yet."));
      return;
    }
    const sorted = values.slice().sort((a, b) => a - b);
    const q = (p) => sorted[Math.min(sorted.length - 1, Math.floor(p * sorted.length))];
    box.appendChild(histogram(values));
    box.appendChild(el("p", {class: "muted", id: "evidence-stats"},
      values.length + " machines with evidence; median " + fmt(q(0.5)) + " s, p90 " +
      fmt(q(0.9)) + " s, max " + fmt(sorted[sorted.length - 1]) + " s"));
  }

  function machineLink(id) {
    return el("a", {href: "#/machines/" + encodeURIComponent(id), title: id}, el("code", {}, id));
  }

  async function renderMigration(id) {
    const m = await api("/v1/migrations/" + encodeURIComponent(id));
    let data = finishedCache.get(id);
    if (!data) {
      data = await allMachines(id);
      data.failures = await failures(id);
      if (m.finished_at) finishedCache.set(id, data);
    }
    $("detail-id").textContent = m.id;
    const summary = clear($("detail-summary"));
    summary.appendChild(el("div", {}, "to ", el("b", {}, m.boot_interface), " · ",
      stateBadge(m, "detail-state"), " · ",
      m.total + " machines · created " + when(m.created_at) +
      (m.finished_at ? " · finished " + when(m.finished_at) : "") +
      (m.estimated_completion ? " · estimated completion " + when(m.estimated_completion) : "")));
    summary.appendChild(progressBar(m.progress, m.counts, m.total));
    if (m.reason) summary.appendChild(el("div", {class: "reason"}, m.reason));
    const counts = clear($("detail-counts"));
    for (const s of Object.keys(m.counts).sort(stateOrder)) counts.appendChild(chip(s, m.counts[s]));

    renderChart(data.machines);

    const fbody = clear($("failures").tBodies[0]);
    $("failures-empty").hidden = data.failures.length > 0;
    for (const f of data.failures) {
      fbody.appendChild(el("tr", {class: "failure", dataset: {machineId: f.machine_id}},
        el("td", {}, machineLink(f.machine_id)), el("td", {}, f.state),
        el("td", {class: "reason"}, f.last_error || "")));
    }
    const mbody = clear($("detail-machines").tBodies[0]);
    for (const r of data.machines.slice(0, TABLE_ROWS)) {
      mbody.appendChild(el("tr", {class: FAILED.includes(r.state) ? "bad" : null},
        el("td", {}, r.position), el("td", {}, machineLink(r.machine_id)),
        el("td", {}, r.source_boot_interface), el("td", {}, r.state + (r.canary ? " (canary)" : "")),
        el("td", {}, r.evidence ? r.evidence.kind + " " + r.evidence.path : ""),
        el("td", {class: "num"}, r.seconds_to_evidence === null ? "" : fmt(r.seconds_to_evidence)),
        el("td", {class: "reason"}, r.last_error || "")));
    }
    if (data.machines.length > TABLE_ROWS || data.truncated) {
      mbody.appendChild(el("tr", {}, el("td", {colspan: 7, class: "muted"},
        "showing " + Math.min(TABLE_ROWS, data.machines.length) + " of " + m.total + " machines")));
    }
    $("migration-detail").hidden = false;
  }

  async function renderMachine(id) {
    const m = await api("/v1/machines/" + encodeURIComponent(id));
    const events = await api("/v1/machines/" + encodeURIComponent(id) + "/events?limit=1000");
    $("machine-id").textContent = m.id;
    const dl = clear($("machine-fields"));
    const add = (k, v) => { dl.appendChild(el("dt", {}, k)); dl.appendChild(el("dd", {}, v)); };
    add("boot interface", m.boot_interface);
    add("state", m.state);
    add("partition", m.partition);
    add("boot mode", m.boot_mode);
    add("BMC", m.bmc ? m.bmc.address + " (user " + (m.bmc.username || "-") + ")" : "none");
    add("NICs", m.nics.map((n) => n.mac).join(", "));
    if (m.migration) {
      add("migration", el("span", {}, el("a", {href: "#/migrations/" +
        encodeURIComponent(m.migration.id)}, el("code", {}, m.migration.id)),
        " (step " + m.migration.step + ", to " + m.migration.target_boot_interface + ")"));
    }
    add("lock", m.lock ? m.lock.holder + " since " + when(m.lock.since) : "none");
    add("drift", m.drift && m.drift.length ? m.drift.join("; ") : "none");
    add("updated", when(m.updated_at));
    const body = clear($("machine-events").tBodies[0]);
    for (const e of events.events) {
      body.appendChild(el("tr", {class: "event kind-" + e.kind.replace(/\W/g, "-")},
        el("td", {}, e.id), el("td", {class: "nowrap"}, when(e.created_at)),
        el("td", {}, e.kind),
        el("td", {}, e.migration_id ? el("a", {href: "#/migrations/" +
          encodeURIComponent(e.migration_id)}, short(e.migration_id)) : ""),
        el("td", {}, e.message)));
    }
    $("machine-detail").hidden = false;
  }

  async function refresh() {
    clearTimeout(timer);
    if (!token()) { showLogin(); return; }
    $("login").hidden = true;
    $("app").hidden = false;
    $("forget").hidden = false;
    const where = route();
    try {
      const list = (await api("/v1/migrations?limit=100")).migrations;
      renderMigrations(list);
      $("machine-detail").hidden = where.view !== "machine";
      $("migration-detail").hidden = where.view === "machine";
      if (where.view === "machine") {
        await renderMachine(where.id);
      } else {
        const id = where.view === "migration" ? where.id : (list[0] && list[0].id);
        if (id) await renderMigration(id); else $("migration-detail").hidden = true;
      }
      for (const row of document.querySelectorAll(".migration-row")) {
        row.classList.toggle("selected", row.dataset.migrationId === ($("detail-id").textContent));
      }
      setStatus("updated " + new Date().toLocaleTimeString());
      document.body.dataset.loaded = "1";
    } catch (err) {
      if (err instanceof AuthError) {
        sessionStorage.removeItem(KEY);
        showLogin("The token was refused; give another one.");
        return;
      }
      setStatus(String(err.message || err), true);
    }
    timer = setTimeout(() => { if (!document.hidden) refresh(); else timer = setTimeout(refresh, REFRESH_MS); },
      REFRESH_MS);
  }

  function showLogin(message) {
    $("app").hidden = true;
    $("forget").hidden = true;
    $("login").hidden = false;
    setStatus(message || "", Boolean(message));
    $("token-input").focus();
  }

  document.addEventListener("DOMContentLoaded", () => {
    takeTokenFromUrl();
    $("login-form").addEventListener("submit", (event) => {
      event.preventDefault();
      const value = $("token-input").value.trim();
      if (!value) return;
      sessionStorage.setItem(KEY, value);
      $("token-input").value = "";
      refresh();
    });
    $("forget").addEventListener("click", () => {
      sessionStorage.removeItem(KEY);
      finishedCache.clear();
      showLogin();
    });
    window.addEventListener("hashchange", refresh);
    refresh();
  });
})();
