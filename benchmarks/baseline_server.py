"""The baseline for API latency: a bare WSGI app on the same server (waitress).

It answers GET /v1/machines?limit=N&marker=M from a list of machine dicts held
in memory, with the same JSON shape as metalboot, and POST /v1/machines by
parsing the body and keeping it. What it costs is the floor of HTTP + JSON on
this machine; metalboot's figures are read against it.
"""

import json
import sys
import urllib.parse

import waitress

MACHINES = []


def app(environ, start_response):
    method = environ["REQUEST_METHOD"]
    if method == "POST":
        length = int(environ.get("CONTENT_LENGTH") or 0)
        items = json.loads(environ["wsgi.input"].read(length))
        MACHINES.extend(dict(item, state="ready", lock=None, migration=None) for item in items)
        MACHINES.sort(key=lambda m: m["id"])
        body = json.dumps({"machines": items, "count": len(items)}).encode()
        start_response("201 Created", [("Content-Type", "application/json")])
        return [body]
    query = urllib.parse.parse_qs(environ.get("QUERY_STRING", ""))
    limit = int(query.get("limit", ["100"])[0])
    marker = query.get("marker", [None])[0]
    start = 0
    if marker:
        import bisect
        start = bisect.bisect_right([m["id"] for m in MACHINES], marker)
    page = MACHINES[start:start + limit]
    nxt = page[-1]["id"] if start + limit < len(MACHINES) else None
    body = json.dumps({"machines": page, "next_marker": nxt}).encode()
    start_response("200 OK", [("Content-Type", "application/json")])
    return [body]


if __name__ == "__main__":
    waitress.serve(app, host="127.0.0.1", port=int(sys.argv[1]), threads=16, _quiet=True)
