"""metalboot-server: the REST API, the artifact server and a conductor in one process."""

import gc
import ipaddress
import logging
import signal
import socket
import sys

import waitress

from metalboot_framework.api import create_app
from metalboot_framework.cmd import common
from metalboot_framework.conductor.manager import Conductor
from metalboot_framework.conf import CONF

LOG = logging.getLogger(__name__)


def is_loopback(host):
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        try:
            return all(ipaddress.ip_address(info[4][0]).is_loopback
                       for info in socket.getaddrinfo(host, None))
        except OSError:
            return False


def check_listen_address():
    if not is_loopback(CONF.api.host_ip) and not [t for t in CONF.api.admin_tokens if t]:
        common.fail(f"refusing to listen on {CONF.api.host_ip}, which is not a loopback "
                    f"address, without [api] admin_tokens configured")


def run(name, description, argv, with_api=True, with_conductor=True):
    """Start the API (on waitress), a conductor, or both, until SIGTERM/SIGINT."""
    with common.interrupted_quietly():
        return _run(name, description, argv, with_api, with_conductor)


def _run(name, description, argv, with_api, with_conductor):
    common.parse_args(sys.argv[1:] if argv is None else argv, description)
    common.setup_logging(CONF.debug, queued=with_conductor)
    if with_api:
        check_listen_address()
    services = common.load_services()
    conductor = Conductor(services) if with_conductor else None
    server = None
    if with_api:
        try:
            server = waitress.create_server(
                create_app(services), host=CONF.api.host_ip, port=CONF.api.port,
                threads=CONF.api.threads, connection_limit=CONF.api.connection_limit,
                ident="metalboot", clear_untrusted_proxy_headers=True, channel_timeout=120)
        except OSError as exc:
            common.fail(f"cannot listen on {CONF.api.host_ip}:{CONF.api.port}: {exc.strerror}")

    def _terminate(signum, _frame):
        LOG.info("received %s, shutting down", signal.Signals(signum).name)
        # before waitress's own close (which waits for its request threads)
        services.stopping.set()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, _terminate)
    signal.signal(signal.SIGINT, _terminate)
    if conductor is not None:
        conductor.start()
    # Everything loaded so far lives as long as the process: keep the cyclic
    # garbage collector from walking it again and again (latency spikes).
    gc.collect()
    gc.freeze()
    parts = [f"boot interfaces: {', '.join(services.interfaces.names())}"]
    if conductor is not None:
        parts.append(f"conductor {CONF.host}")
    try:
        if server is not None:
            tokens = "configured tokens" if (CONF.api.admin_tokens or CONF.api.reader_tokens) \
                else f"the admin token in {CONF.state_path}/admin-token"
            LOG.info("%s listening on http://%s:%s (%s; API needs %s)", name,
                     server.effective_host, server.effective_port, "; ".join(parts), tokens)
            server.run()
        else:
            LOG.info("%s running (%s)", name, "; ".join(parts))
            signal.pause()
    except SystemExit:
        pass
    finally:
        if server is not None:
            server.close()
        if conductor is not None:
            conductor.stop()
        services.db.dispose()
        LOG.info("%s stopped", name)
    return 0


def main(argv=None):
    return run("metalboot-server", "Run the metalboot API, artifact server and conductor in "
               "one process.", argv)


if __name__ == "__main__":
    sys.exit(main())
