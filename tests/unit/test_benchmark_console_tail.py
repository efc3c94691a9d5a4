"""The migration benchmark's simulated machines (benchmarks.migration.ConsoleTail)
must not lose a boot to a kept-alive connection that the server closed while
it was idle, as granian does after 30 s: such a fetch is sent again on a new
connection, as every HTTP client does, and a fetch that fails for good is
counted and named."""

import asyncio
import threading
import time

from benchmarks.migration import ConsoleTail


class OneRequestPerConnection:
    """An HTTP server on loopback that answers one request per connection and
    then closes it without saying so (no ``Connection: close``), like a server
    whose idle timeout fell between two requests."""

    def __init__(self, status=200):
        self.status = status
        self.requests = 0
        self.port = None
        self._ready = threading.Event()
        self._loop = asyncio.new_event_loop()
        threading.Thread(target=self._run, daemon=True).start()
        self._ready.wait(5)

    def _run(self):
        asyncio.set_event_loop(self._loop)
        server = self._loop.run_until_complete(
            asyncio.start_server(self._serve, "127.0.0.1", 0))
        self.port = server.sockets[0].getsockname()[1]
        self._ready.set()
        self._loop.run_forever()

    async def _serve(self, reader, writer):
        await reader.readuntil(b"\r\n\r\n")
        self.requests += 1
        writer.write(f"HTTP/1.1 {self.status} X\r\nContent-Length: 2\r\n\r\nok".encode())
        await writer.drain()
        await asyncio.sleep(0.05)  # the client keeps the connection meanwhile
        writer.close()

    def stop(self):
        self._loop.call_soon_threadsafe(self._loop.stop)


def _boot(tmp_path, server, machines):
    console = tmp_path / "console.log"
    console.write_text("")
    tail = ConsoleTail(str(console), workers=1)
    try:
        for n in range(machines):
            with open(console, "a") as f:
                f.write(f"m{n} http://127.0.0.1:{server.port}/boot/m{n}/boot.ipxe\n")
            deadline = time.monotonic() + 5
            while tail.booted + tail.failed <= n and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)  # the server has closed the idle connection by now
    finally:
        tail.stop()
        server.stop()
    return tail


def test_a_closed_idle_connection_is_replaced_and_the_boot_not_lost(tmp_path):
    server = OneRequestPerConnection()
    tail = _boot(tmp_path, server, 3)
    assert (tail.booted, tail.failed, tail.failures) == (3, 0, [])
    assert server.requests == 3


def test_a_failed_boot_is_counted_and_named(tmp_path):
    server = OneRequestPerConnection(status=404)
    tail = _boot(tmp_path, server, 2)
    assert (tail.booted, tail.failed) == (0, 2)
    assert [status for _, status in tail.failures] == [404, 404]
    assert tail.failures[0][0].endswith("/boot/m0/boot.ipxe")
