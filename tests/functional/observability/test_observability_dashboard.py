"""The dashboard in headless Chromium against a real server after a migration."""

import html
import re
import statistics

import pytest
import requests

from tests.conftest import READER


def test_dashboard_files_are_served(observed):
    url = observed.server.url
    page = requests.get(url + "/dashboard", timeout=10)
    assert page.status_code == 200 and page.headers["Content-Type"].startswith("text/html")
    assert "script-src 'self'" in page.headers["Content-Security-Policy"]
    assert page.headers["Referrer-Policy"] == "no-referrer"
    assert requests.get(url + "/dashboard/", timeout=10).status_code == 200
    for name, kind in (("dashboard.js", "javascript"), ("dashboard.css", "text/css")):
        r = requests.get(f"{url}/dashboard/static/{name}", timeout=10)
        assert r.status_code == 200 and kind in r.headers["Content-Type"], name
    # the page holds no data: without a token it asks for one
    assert 'id="login"' in page.text and "/v1/" not in page.text


@pytest.mark.functional
def test_login_form_says_where_to_get_a_token(observed, chromium):
    """Without a token the page shows the login form, and the form tells a person
    where a token comes from and that a link can carry one."""
    dom = chromium(f"{observed.server.url}/dashboard", "--dump-dom")
    login = re.search(r'<section id="login"([^>]*)>(.*?)</section>', dom, re.S)
    assert login and "hidden" not in login.group(1), dom[-2000:]
    text = " ".join(html.unescape(re.sub(r"<[^>]+>", " ", login.group(2))).split())
    assert "~/.local/state/metalboot/admin-token" in text
    assert "[api] reader_tokens" in text
    assert "/dashboard?token=<token>" in text


def pixel_stats(read_png, path):
    width, height, channels, rows = read_png(path)
    grey = []
    for row in rows[::4]:  # every 4th row and column is plenty
        for x in range(0, width, 4):
            px = row[x * channels:x * channels + min(3, channels)]
            grey.append(sum(px) / len(px))
    return width, height, statistics.pvariance(grey), len(set(int(g) for g in grey))


@pytest.mark.functional
def test_dashboard_in_headless_chromium(observed, chromium, read_png, tmp_path):
    server, finished = observed.server, observed.finished
    failed = observed.ids[5]
    base = f"{server.url}/dashboard?token={READER}"

    # the overview opens on the newest migration (the live one); the finished one
    # is in the list, with its counts
    dom = chromium(base, "--dump-dom")
    assert 'data-loaded="1"' in dom, dom[-2000:]
    assert finished["id"] in dom and observed.live["id"] in dom
    assert 'data-state="done" data-count="5"' in dom
    assert 'data-state="rolled_back" data-count="1"' in dom
    assert 'data-state="awaiting_boot" data-count="1"' in dom
    assert READER not in dom  # the token left the address bar and the page
    # a done migration with a rolled-back machine does not read as plain "done"
    badge = re.search(r'<span class="badge mstate-done result-partially_failed" '
                      r'data-state="done" data-result="partially_failed">([^<]*)</span>', dom)
    assert badge and badge.group(1) == "done · partially failed (1 of 6 failed)", dom[-3000:]
    assert re.search(r'<span class="badge mstate-running" data-state="running" '
                     r'data-result="">running</span>', dom)

    # the finished migration: counts, the evidence histogram, the failure with its reason
    url = f"{base}#/migrations/{finished['id']}"
    dom = chromium(url, "--dump-dom")
    detail = dom[dom.index('id="migration-detail"'):]
    assert f'<code id="detail-id">{finished["id"]}</code>' in detail
    assert 'id="detail-state" data-state="done" data-result="partially_failed">' \
        'done · partially failed (1 of 6 failed)</span>' in detail
    assert 'id="evidence-histogram"' in detail and 'data-count="5"' in detail
    bars = re.findall(r'<rect class="bar"[^>]*data-count="(\d+)"', detail)
    assert bars and sum(int(n) for n in bars) == 5
    assert "5 machines with evidence" in detail
    failures = detail[detail.index('id="failures"'):detail.index('id="failures-empty"')]
    assert failed in failures
    assert html.escape("no boot evidence through fake-alt within 2 s") in failures
    assert "100%" in detail

    shot = tmp_path / "migration.png"
    chromium(url, f"--screenshot={shot}", "--window-size=1280,1500")
    assert shot.exists() and shot.stat().st_size > 20_000
    width, height, variance, levels = pixel_stats(read_png, shot)
    assert (width, height) == (1280, 1500)
    assert variance > 100 and levels > 20, (variance, levels)

    # drill-down: one machine and its events
    dom = chromium(f"{base}#/machines/{failed}", "--dump-dom")
    machine = dom[dom.index('id="machine-detail"'):]
    assert f'<code id="machine-id">{failed}</code>' in machine
    assert "migration.step" in machine and "rolling_back -&gt; rolled_back" in machine
    assert "awaiting_boot" in machine  # in the live migration now
    shot = tmp_path / "machine.png"
    chromium(f"{base}#/machines/{failed}", f"--screenshot={shot}", "--window-size=1280,1200")
    assert pixel_stats(read_png, shot)[2] > 100
