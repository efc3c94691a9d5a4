"""The boot agent's API client against an HTTP server on loopback: partition
artifacts kept only when their SHA-256 is the one the API sent (either
header), and a token file read again after a 401 (a rotated token)."""

import base64
import hashlib
import http.server
import threading

import pytest

from metalboot_framework.agent.client import ApiClient, ApiError, NotThere

BODY = b"an iso image" * 1000
GOOD = hashlib.sha256(BODY).hexdigest()


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.headers.get("Authorization") != "Bearer rotated":
            self.send_response(401)
            self.end_headers()
            return
        name = self.path.rsplit("/", 1)[1]
        headers = {"good.iso": {"X-Content-SHA256": GOOD},
                   "digest.iso": {"Digest": "sha-256=" + base64.b64encode(
                       bytes.fromhex(GOOD)).decode()},
                   "bad.iso": {"X-Content-SHA256": "0" * 64},
                   "none.iso": {}}.get(name)
        if headers is None:
            self.send_response(404)
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "application/x-iso9660-image")
        self.send_header("Content-Length", str(len(BODY)))
        for key, value in headers.items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(BODY)

    def log_message(self, *args):
        pass


@pytest.fixture
def client(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    token_file = tmp_path / "token"
    token_file.write_text("old\n")
    api = ApiClient(f"http://127.0.0.1:{server.server_address[1]}", str(token_file))
    assert api.token("p1") == "old"
    token_file.write_text("rotated\n")  # rotated while the agent runs
    yield api
    server.shutdown()
    server.server_close()


@pytest.mark.parametrize("name", ["good.iso", "digest.iso"])
def test_artifact_kept_when_its_digest_matches(client, tmp_path, name):
    path = tmp_path / name
    assert client.download("p1", "iface", name, str(path)) == "application/x-iso9660-image"
    assert path.read_bytes() == BODY
    assert client.token("p1") == "rotated"  # read again after the 401


@pytest.mark.parametrize("name, message", [("bad.iso", "SHA-256"),
                                           ("none.iso", "without a digest")])
def test_artifact_refused_without_its_digest(client, tmp_path, name, message):
    path = tmp_path / name
    with pytest.raises(ApiError, match=message):
        client.download("p1", "iface", name, str(path))
    assert list(tmp_path.iterdir()) == [tmp_path / "token"]  # nothing kept, no temporary


def test_a_token_per_partition(tmp_path):
    token_file = tmp_path / "token"
    token_file.write_text("# agents of rack row 1\np1 one\np2  two\n")
    api = ApiClient("http://127.0.0.1:9", str(token_file))
    assert (api.token("p1"), api.token("p2")) == ("one", "two")
    with pytest.raises(ApiError, match="no token for partition p3"):
        api.token("p3")
    token_file.write_text("p1 one\nfallback\n")
    assert api.token("p3", reread=True) == "fallback"


def test_missing_artifact(client, tmp_path):
    with pytest.raises(NotThere):
        client.download("p1", "iface", "nope.iso", str(tmp_path / "nope.iso"))
