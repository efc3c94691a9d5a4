"""Bearer tokens: 401 without a known token, 403 for a reader on a change."""

import pytest

from tests.conftest import machine_body

MUTATIONS = [
    ("post", "/v1/partitions", {"id": "p9"}),
    ("patch", "/v1/partitions/p1", {"description": "x"}),
    ("delete", "/v1/partitions/p1", None),
    ("post", "/v1/machines", machine_body(1)),
    ("patch", "/v1/machines/00000000-0000-4000-8000-000000000001", {"boot_mode": "bios"}),
    ("delete", "/v1/machines/00000000-0000-4000-8000-000000000001", None),
    ("post", "/v1/machines/00000000-0000-4000-8000-000000000001/validate", {}),
]
READS = ["/v1/partitions", "/v1/partitions/p1", "/v1/machines", "/v1/boot-interfaces",
         "/v1/machines/00000000-0000-4000-8000-000000000001",
         "/v1/machines/00000000-0000-4000-8000-000000000001/events"]


@pytest.fixture
def seeded(api, partition):
    assert api.post("/v1/machines", json=machine_body(1)).status_code == 201


@pytest.mark.parametrize("method, url, body", MUTATIONS)
def test_mutations_need_admin(app, seeded, method, url, body):
    client = app.test_client()
    kwargs = {"json": body} if body is not None else {}
    r = getattr(client, method)(url, **kwargs)
    assert r.status_code == 401
    assert r.headers["WWW-Authenticate"].startswith("Bearer")
    assert r.json["error"]["code"] == 401
    r = getattr(client, method)(url, headers={"Authorization": "Bearer wrong"}, **kwargs)
    assert r.status_code == 401
    r = getattr(client, method)(url, headers={"Authorization": "Basic abc"}, **kwargs)
    assert r.status_code == 401
    r = getattr(client, method)(url, headers={"Authorization": "Bearer reader-token-for-tests"},
                                **kwargs)
    assert r.status_code == 403
    assert "admin" in r.json["error"]["message"]


@pytest.mark.parametrize("url", READS)
def test_reads_need_a_token_and_a_reader_suffices(app, reader_api, seeded, url):
    assert app.test_client().get(url).status_code == 401
    assert reader_api.get(url).status_code == 200


def test_nothing_changed_by_refused_requests(app, api, seeded):
    client = app.test_client()
    client.delete("/v1/machines/00000000-0000-4000-8000-000000000001",
                  headers={"Authorization": "Bearer reader-token-for-tests"})
    assert api.get("/v1/machines/00000000-0000-4000-8000-000000000001").status_code == 200


def test_root_and_openapi_are_public(app):
    client = app.test_client()
    assert client.get("/v1").status_code == 200
    assert client.get("/v1/openapi.json").status_code == 200


def test_generated_admin_token_when_none_configured(conf, tmp_path):
    from metalboot_framework.api import create_app
    from metalboot_framework.services import Services
    conf.set_override("admin_tokens", [], group="api")
    conf.set_override("reader_tokens", [], group="api")
    services = Services.from_conf(conf)
    client = create_app(services).test_client()
    token_file = tmp_path / "state" / "admin-token"
    token = token_file.read_text().strip()
    assert len(token) >= 32
    assert oct(token_file.stat().st_mode & 0o777) == "0o600"
    assert client.get("/v1/machines").status_code == 401
    assert client.get("/v1/machines", headers={"Authorization": f"Bearer {token}"}) \
        .status_code == 200
    # a second start reuses it
    assert create_app(services).config["METALBOOT_TOKENS"][0] == [token]


def test_server_root_names_the_dashboard_and_the_api(app):
    """A person opening the server's address is led to the dashboard and /v1,
    without a token."""
    r = app.test_client().get("/")
    assert r.status_code == 200
    assert r.mimetype == "text/html"
    assert 'href="/dashboard"' in r.text and 'href="/v1"' in r.text
    assert r.headers["Content-Security-Policy"] == "default-src 'none'"


BAD_REPORT_BODIES = [
    {"data": "not json", "content_type": "text/plain"},
    {"data": "{not json", "content_type": "application/json"},
    {"json": ["a list"]},
    {"json": {"bogus": 1}},
    {"json": {"boot_interface": "", "message": 7}},
    {"json": {"boot_interface": "fake", "token": 5}},
    {"json": {"boot_interface": "nope"}},
]


@pytest.mark.parametrize("case", BAD_REPORT_BODIES)
def test_boot_report_checks_the_token_before_the_body(app, services, seeded, case):
    """Without the machine's token a boot report is 401 (403 with an API token),
    whatever its body holds: nothing is said about the body's fields."""
    client = app.test_client()
    url = "/v1/machines/00000000-0000-4000-8000-000000000001/boot-report"
    for headers, status in (({}, 401), ({"Authorization": "Bearer wrong"}, 401),
                            ({"Authorization": "Bearer reader-token-for-tests"}, 403),
                            ({"Authorization": "Bearer admin-token-for-tests"}, 403)):
        r = client.post(url, headers=headers, **case)
        assert (r.status_code, r.json["error"]["fields"]) == (status, {}), (headers, r.json)
    # with the machine's token, the body is checked
    token = services.tokens.machine_token("00000000-0000-4000-8000-000000000001", 1, "fake")
    r = client.post(url, headers={"Authorization": f"Bearer {token}"}, **case)
    assert r.status_code in (400, 415, 422), r.json


def test_boot_report_token_in_the_body_comes_first(app, services, seeded):
    client = app.test_client()
    url = "/v1/machines/00000000-0000-4000-8000-000000000001/boot-report"
    r = client.post(url, json={"token": "wrong", "bogus": 1})
    assert r.status_code == 401
    token = services.tokens.machine_token("00000000-0000-4000-8000-000000000001", 1, "fake")
    r = client.post(url, json={"token": token, "boot_interface": "fake", "bogus": 1})
    assert (r.status_code, list(r.json["error"]["fields"])) == (422, ["bogus"])
    r = client.post(url, json={"token": token, "boot_interface": "fake"})
    assert r.status_code == 201
