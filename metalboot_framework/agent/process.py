"""metalboot-boot-agent as a process: the configuration checked (no
database, the ``[agent]`` options it needs), the enabled boot interfaces and
hooks loaded without a database, then the boot server
(:class:`~metalboot_framework.boot_server.app.BootServer`) on the replica
and the journal, with ``GET /healthz``, until SIGTERM or SIGINT."""

import asyncio
import gc
import logging
import os
import sys

from oslo_config import cfg

from metalboot_framework import boot_endpoints
from metalboot_framework.agent import dhcp_sync
from metalboot_framework.agent.artifact_cache import ArtifactCache
from metalboot_framework.agent.client import ApiClient
from metalboot_framework.agent.delivery import Delivery
from metalboot_framework.agent.journal import Journal
from metalboot_framework.agent.replica import Replica, ReplicaTokens
from metalboot_framework.boot_server import process as boot_process
from metalboot_framework.boot_server.app import BootServer
from metalboot_framework.cmd import common
from metalboot_framework.conf import CONF
from metalboot_framework.exceptions import PluginLoadError, ValidationFailed
from metalboot_framework.services import BootServices

LOG = logging.getLogger(__name__)

NAME = "metalboot-boot-agent"


def parse_listen(listen):
    """(host, port) of ``[agent] listen``: ``[v6]:port``, ``v4:port`` or
    ``name:port``; ValueError naming what is wrong."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"[agent] listen {listen!r}: expected host:port, e.g. [::]:6481")
    if host.startswith("["):
        if not host.endswith("]"):
            raise ValueError(f"[agent] listen {listen!r}: unclosed '['")
        host = host[1:-1]
    elif ":" in host:
        raise ValueError(f"[agent] listen {listen!r}: an IPv6 address goes in brackets, "
                         f"e.g. [{host}]:{port}")
    if not host:
        raise ValueError(f"[agent] listen {listen!r}: no host")
    return host, int(port)


def check_configuration(conf=CONF):
    """Stop with one line unless the configuration is one of an agent."""
    location = conf.get_location("connection", "database")
    if location is not None and location.location in (
            cfg.Locations.user, cfg.Locations.command_line, cfg.Locations.environment):
        common.fail("[database] connection is set, but metalboot-boot-agent has no "
                    "database: it reads its partitions' boot data from the API "
                    "([agent] api_url). Remove [database] connection from its "
                    "configuration.")
    opts = conf.agent
    for name in ("api_url", "token_file"):
        if not opts[name]:
            common.fail(f"[agent] {name} is not set")
    if not opts.partitions:
        common.fail("[agent] partitions is empty: name the partitions this agent serves")
    if not os.access(opts.token_file, os.R_OK):
        common.fail(f"[agent] token_file {opts.token_file}: cannot read it")
    try:
        return parse_listen(opts.listen)
    except ValueError as exc:
        common.fail(str(exc))


def load_services(conf=CONF):
    """The services of a boot agent: plugins and hooks as enabled, the
    replicated tokens, no database."""
    try:
        interfaces, hooks = BootServices.load_plugins(conf)
    except PluginLoadError as exc:
        common.fail(str(exc))
    common.check_options()  # the plugins' options too
    if not conf.api.public_url:
        # machines of a partition without its own boot_url reach the API's public URL
        conf.set_override("public_url", conf.agent.api_url, group="api")
    return BootServices(conf, interfaces, hooks, ReplicaTokens())


class Agent:
    """What one agent process runs, built from the configuration."""

    def __init__(self, conf, services):
        opts = conf.agent
        server_opts = conf.boot_server
        self.opts = opts
        self.client = ApiClient(opts.api_url, opts.token_file, opts.api_timeout)
        self.replica = Replica(services, self.client, opts.partitions, opts.state_dir,
                               opts.max_staleness, reads=server_opts.db_threads)
        self.replica.partition_artifacts = ArtifactCache(
            self.client, os.path.join(opts.state_dir, "artifacts"), opts.partitions,
            services.interfaces, self.replica.reads)
        self.journal = Journal(os.path.join(opts.state_dir, "journal"),
                               self.replica.partition_of, server_opts.evidence_batch_size,
                               server_opts.evidence_batch_wait, log_rows=server_opts.access_log)
        try:
            backends = dhcp_sync.configured_backends(services)
        except ValidationFailed as exc:
            raise ValueError(exc.message) from None
        self.dhcp = dhcp_sync.DhcpSync(self.replica, self.client, opts.agent_id, backends) \
            if backends else None
        self.delivery = Delivery(self.journal, self.client, opts.agent_id, opts.partitions[0],
                                 opts.delivery_batch_size)
        self.server = BootServer(services, server_opts, conf.api.max_request_body_size,
                                 source=self.replica, sink=self.journal,
                                 extra={"/healthz": self.healthz})

    async def healthz(self, _request):
        """200 while every partition is fresh, else 503 with the reason: what a
        route announcer (FRR, BIRD) checks to withdraw the anycast route."""
        fresh, document = self.replica.health()
        document["journal_pending"] = self.journal.pending_count()
        document["agent"] = self.opts.agent_id
        if self.dhcp is not None:
            document["dhcp"] = self.dhcp.status()
        if self.delivery.failing is not None:
            document["delivery_error"] = self.delivery.failing
        return boot_endpoints.json_reply(200 if fresh else 503, document)


def _serve(agent, services, address, port):
    agent.replica.load_from_disk()
    agent.delivery.start()
    gc.collect()
    gc.freeze()
    loop = asyncio.new_event_loop()  # not asyncio.run(): see boot_server.process
    try:
        loop.run_until_complete(boot_process.serve(
            services, CONF.boot_server, CONF.api.max_request_body_size, address=address,
            server=agent.server, port=port, name=NAME, listen=CONF.agent.listen,
            serves=f"partitions {', '.join(CONF.agent.partitions)} from "
                   f"{CONF.agent.api_url}, agent id {CONF.agent.agent_id}"))
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        loop.close()
        agent.delivery.stop()
        LOG.info("evidence delivered: %d stored, %d duplicates, %d refused; %d records "
                 "left in the journal", agent.delivery.stored, agent.delivery.duplicates,
                 agent.delivery.refused, agent.journal.pending_count())
        LOG.info("%s stopped", NAME)


def main(argv=None):
    with common.interrupted_quietly():
        return _main(argv)


def _main(argv):
    common.parse_args(sys.argv[1:] if argv is None else argv,
                      "Serve a partition's boot data, replicated from the metalboot API, "
                      "to its booting machines.")
    common.setup_logging(CONF.debug)
    host, port = check_configuration()
    address = boot_process._listen_address(host, port)
    services = load_services()
    try:
        agent = Agent(CONF, services)
    except (OSError, ValueError) as exc:
        common.fail(f"cannot start: {exc}")
    _serve(agent, services, address, port)
    return 0
