"""metalboot-boot-server as a process: granian's embedded HTTP server on the
process's asyncio event loop, serving :class:`~.app.BootServer` until SIGTERM
or SIGINT, in one process or several sharing the port."""

import asyncio
import gc
import logging
import os
import signal
import socket
import sys

from granian.constants import HTTPModes, Interfaces, TaskImpl
from granian.log import LogLevels
from granian.server.embed import Server as EmbeddedServer

from metalboot_framework.boot_server.app import BootServer
from metalboot_framework.cmd import common
from metalboot_framework.conf import CONF

LOG = logging.getLogger(__name__)


class _HTTPServer(EmbeddedServer):
    """granian's embedded server on our event loop; :attr:`started` is set once
    its worker serves (or its start failed: :attr:`failure`)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.started = asyncio.Event()
        self.failure = None

    def startup(self, spawn_target, target_loader):
        try:
            super().startup(spawn_target, target_loader)
        except BaseException as exc:
            self.failure = exc
            raise
        finally:
            self.started.set()


def _listen_address(host, port):
    """``host`` (an address or a name) as the IP address granian listens on;
    fails unless nothing listens on that address and port yet: granian's
    sockets share a port with SO_REUSEPORT, so a second boot server would
    split the traffic with the first instead of failing."""
    try:
        family, kind, proto, _, sockaddr = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
    except OSError as exc:
        common.fail(f"cannot listen on {host}:{port}: {exc.strerror}")
    with socket.socket(family, kind, proto) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(sockaddr)
        except OSError as exc:
            common.fail(f"cannot listen on {host}:{port}: {exc.strerror}")
    return sockaddr[0]


async def serve(services, opts, max_body_size, address=None, server=None, port=None,
                name="metalboot-boot-server", serves=None, listen=None):
    """Serve until SIGTERM or SIGINT; then finish the requests in progress and
    commit their evidence. ``address``: ``opts.host_ip`` resolved (granian
    takes an IP address only). ``server``: the :class:`BootServer` to serve
    (default: on the database), on ``port`` (default ``opts.port``); ``name``,
    ``serves`` (what it serves to whom) and ``listen`` (host:port as
    configured) for the log."""
    address = address or opts.host_ip
    port = port or opts.port
    server = server or BootServer(services, opts, max_body_size)
    await server.start()
    http = _HTTPServer(server, address=address, port=port,
                       interface=Interfaces.RSGI, websockets=False, backlog=opts.backlog,
                       http=HTTPModes.http1, task_impl=TaskImpl(opts.task_impl),
                       # granian's errors (not its notices) through our handlers;
                       # incremental: the handlers in place are left alone
                       log_level=LogLevels.error, log_dictconfig={
                           "incremental": True, "formatters": {}, "handlers": {},
                           "loggers": {}})
    # the requests in progress at a stop get this long, then the server stops
    # waiting for them (granian cannot cancel them: they are answered meanwhile)
    http.workers_kill_timeout = max(opts.shutdown_timeout, 0.001)
    serving = asyncio.ensure_future(http.serve())
    started = asyncio.ensure_future(http.started.wait())
    try:
        await asyncio.wait([serving, started], return_when=asyncio.FIRST_COMPLETED)
        if http.failure is not None or serving.done():
            common.fail(f"cannot listen on {listen or f'{opts.host_ip}:{opts.port}'}: "
                        f"{http.failure or serving.exception()}")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        received = []
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, lambda s=signum: (received.append(s), stop.set()))
        host = f"[{address}]" if ":" in address else address
        LOG.info("%s listening on http://%s:%s (boot interfaces: %s; %s)", name, host, port,
                 ", ".join(services.interfaces.names()),
                 serves or f"machines reach it as [api] public_url = {services.public_url}")
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait([serving, stopping], return_when=asyncio.FIRST_COMPLETED)
        if not stop.is_set():  # the HTTP server ended by itself: do not linger deaf
            stopping.cancel()
            LOG.error("the HTTP server stopped unexpectedly: %s",
                      serving.exception() if not serving.cancelled() else "cancelled")
            raise SystemExit(1)
        LOG.info("received %s, shutting down", signal.Signals(received[0]).name)
        # requests waiting for a batch to fill commit their evidence now
        server.evidence.hurry()
    finally:
        started.cancel()
        if not serving.done():
            http.stop()  # stop accepting; the requests in progress are answered
            ended = await asyncio.gather(serving, return_exceptions=True)
            if isinstance(ended[0], (TimeoutError, asyncio.TimeoutError)):
                LOG.warning("requests still in progress after [boot_server] "
                            "shutdown_timeout (%s s)", opts.shutdown_timeout)
        await server.stop()  # the requests are done: flush, stop threads


def _serve_process(address):
    services = common.load_services()
    gc.collect()
    gc.freeze()  # what is loaded now lives as long as the process
    # not asyncio.run(): its final sweep of tasks (asyncio.all_tasks) stumbles on
    # the requests granian's Rust task implementation steps (they are not asyncio
    # tasks); every request is done by the time serve() returns
    loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(serve(services, CONF.boot_server,
                                      CONF.api.max_request_body_size, address))
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()
        services.db.dispose()
        LOG.info("metalboot-boot-server stopped")


def _exit_while_starting(_signum, _frame):
    raise SystemExit(0)


def _serve_workers(count, address):
    """``count`` forked server processes on one port; SIGTERM/SIGINT reach them all,
    and the parent exits when they have, with the worst exit status."""
    children = []
    for _ in range(count):
        pid = os.fork()
        if pid == 0:  # a worker: its own database engines, plugins and event loop
            code = 1
            try:
                # stopped while it starts (before its event loop handles the
                # signals): nothing is queued yet, so that is a clean exit
                for signum in (signal.SIGTERM, signal.SIGINT):
                    signal.signal(signum, _exit_while_starting)
                _serve_process(address)
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else 1
            except BaseException:
                LOG.exception("metalboot-boot-server worker failed")
            finally:
                os._exit(code)
        children.append(pid)

    def _forward(signum, _frame):
        for child in children:
            try:
                os.kill(child, signum)
            except ProcessLookupError:
                pass

    signal.signal(signal.SIGTERM, _forward)
    signal.signal(signal.SIGINT, _forward)
    worst = 0
    for child in children:
        _, status = os.waitpid(child, 0)
        code = os.waitstatus_to_exitcode(status)
        if code:
            LOG.error("metalboot-boot-server worker %d exited with %d", child, code)
            _forward(signal.SIGTERM, None)  # one gone: stop the others too
            worst = worst or (code if code > 0 else 1)
    return worst


def main(argv=None):
    with common.interrupted_quietly():
        return _main(argv)


def _main(argv):
    common.parse_args(sys.argv[1:] if argv is None else argv,
                      "Serve boot artifacts and boot reports to booting machines.")
    common.setup_logging(CONF.debug)
    workers = CONF.boot_server.workers or len(os.sched_getaffinity(0))
    address = _listen_address(CONF.boot_server.host_ip, CONF.boot_server.port)
    if workers > 1:
        return _serve_workers(workers, address)
    _serve_process(address)
    return 0
