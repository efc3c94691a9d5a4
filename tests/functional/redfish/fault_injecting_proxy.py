"""A fault-injecting HTTP proxy put in front of a sushy-emulator (test helper).

Forwards every request to ``upstream`` unchanged, except that it can
- answer HTTP 500 to the first ``fail_first`` requests, and then to every
  ``fail_every``-th request (a share of calls),
- delay the answer to the first ``slow_first`` requests (or to all, with
  ``slow_first=-1``) by ``delay`` seconds (a slow BMC),
and counts what it did. Bounded: it serves only 127.0.0.1 and stops with the test.
"""

import http.client
import http.server
import threading
import time


class FaultInjectingProxy:
    def __init__(self, upstream_port, fail_first=0, fail_every=0, slow_first=0, delay=0.0):
        self.upstream_port = upstream_port
        self.fail_first = fail_first
        self.fail_every = fail_every
        self.slow_first = slow_first
        self.delay = delay
        self.requests = 0
        self.failed = 0
        self.delayed = 0
        self.log = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def end_headers(self):
                # one request per connection: no reuse of a socket being closed
                self.send_header("Connection", "close")
                self.close_connection = True
                super().end_headers()

            def _handle(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else None
                with proxy._lock:
                    proxy.requests += 1
                    n = proxy.requests
                    fail = n <= proxy.fail_first or (
                        proxy.fail_every and n > proxy.fail_first
                        and (n - proxy.fail_first) % proxy.fail_every == 0)
                    slow = proxy.slow_first == -1 or n <= proxy.slow_first
                    proxy.log.append((self.command, self.path, "500" if fail else "ok"))
                if slow and proxy.delay:
                    with proxy._lock:
                        proxy.delayed += 1
                    time.sleep(proxy.delay)
                if fail:
                    with proxy._lock:
                        proxy.failed += 1
                    payload = (b'{"error": {"code": "Base.1.0.InternalError", '
                               b'"message": "injected fault"}}')
                    self.send_response(500)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                conn = http.client.HTTPConnection("127.0.0.1", proxy.upstream_port, timeout=30)
                headers = {k: v for k, v in self.headers.items()
                           if k.lower() not in ("host", "connection")}
                try:
                    conn.request(self.command, self.path, body=body, headers=headers)
                    resp = conn.getresponse()
                    data = resp.read()
                    self.send_response(resp.status)
                    for k, v in resp.getheaders():
                        if k.lower() not in ("transfer-encoding", "connection",
                                             "content-length", "server", "date"):
                            self.send_header(k, v)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    conn.close()

            do_GET = do_POST = do_PATCH = do_DELETE = do_PUT = _handle

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True,
                                        kwargs={"poll_interval": 0.02},
                                        name="fault-injecting-proxy")

    def start(self):
        self._thread.start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
