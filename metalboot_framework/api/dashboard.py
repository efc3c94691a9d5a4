"""GET /dashboard: a read-only web page over the REST API.

Static HTML, vanilla JavaScript and CSS shipped in ``api/dashboard/`` (no build
step). The page itself holds no data and needs no token; its script calls the
REST API with a bearer token:

- ``/dashboard?token=<reader token>`` stores the token in the tab's
  ``sessionStorage`` and removes it from the address bar (and from history);
- otherwise the page asks for a token once per tab and keeps it in
  ``sessionStorage`` (gone when the tab closes; "forget token" drops it).

A reader token is enough: the page only reads. The answers carry a strict
Content-Security-Policy (scripts and styles only from this server, no inline
script) and ``Referrer-Policy: no-referrer``, so a token in the URL does not
leak through a Referer header.
"""

import os

from flask import Blueprint, send_from_directory

STATIC = os.path.join(os.path.dirname(os.path.abspath(__file__)), "dashboard")

bp = Blueprint("dashboard", __name__, static_folder=STATIC,
               static_url_path="/dashboard/static")

CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")


@bp.get("/dashboard")
@bp.get("/dashboard/")
def index():
    """The dashboard page."""
    return send_from_directory(STATIC, "index.html", mimetype="text/html", max_age=0)


@bp.after_request
def _headers(response):
    response.headers["Content-Security-Policy"] = CSP
    response.headers["Referrer-Policy"] = "no-referrer"
    response.headers["X-Content-Type-Options"] = "nosniff"
    response.headers["X-Frame-Options"] = "DENY"
    return response
