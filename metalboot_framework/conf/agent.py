"""[agent]: metalboot-boot-agent, the boot service of a partition.

It serves what booting machines call from a replica of its partitions' boot
data, which it reads from the control plane's API (and nothing else: no
database, no BMC password key), and delivers the evidence it journals to the
API. See :mod:`metalboot_framework.agent`.
"""

import socket

from oslo_config import cfg

opts = [
    cfg.URIOpt("api_url", schemes=["http", "https"],
               help="Base URL of the control plane's metalboot API, e.g. "
                    "https://metalboot.mgmt.example:6480: the only address of the "
                    "control plane the agent reaches."),
    cfg.StrOpt("token_file",
               help="File holding the partition's agent token (made by `metalboot "
                    "partitions agent-token create P`), or, for an agent of several "
                    "partitions, a line '<partition> <token>' for each (a token is "
                    "valid for one partition). Read at start and again whenever the "
                    "API answers 401, so a rotated token is picked up without a "
                    "restart."),
    cfg.ListOpt("partitions", default=[],
                help="The partitions this agent serves (one or more)."),
    cfg.StrOpt("listen", default="[::]:6481",
               help="host:port the agent listens on, an IPv6 address in brackets "
                    "(e.g. [fd00:b007::1]:6481, the partition's anycast address) or "
                    "an IPv4 address or name. The rest of its HTTP server and evidence "
                    "journal is set as metalboot-boot-server's: [boot_server] backlog, "
                    "task_impl, shutdown_timeout, db_threads, evidence_batch_size, "
                    "evidence_batch_wait, access_log."),
    cfg.StrOpt("state_dir", default="$state_path/agent",
               help="Directory of the agent's own state: the last snapshot of each "
                    "partition's boot data, the evidence journal and the cached "
                    "partition artifacts (ISOs). Keep it on a local disk."),
    cfg.FloatOpt("max_staleness", default=900.0, min=1,
                 help="Seconds the agent keeps serving boot data after it last heard "
                      "from the API (also: how old a snapshot on disk may be for a "
                      "restart without the API to serve it). Past it, boot routes "
                      "answer 503 and /healthz says the agent is not fresh."),
    cfg.StrOpt("agent_id", default=socket.gethostname(),
               sample_default="<hostname>", regex=r"^[A-Za-z0-9._-]{1,64}$",
               help="Name of this agent in the evidence it delivers: with the "
                    "journal's sequence number, what the API stores each record "
                    "once by. Unique among the agents of a deployment."),
    cfg.FloatOpt("api_timeout", default=10.0, min=0.1,
                 help="Seconds an API call may take (a long poll of the change feed "
                      "this much longer than its wait)."),
    cfg.IntOpt("delivery_batch_size", default=1000, min=1, max=1000,
               help="Most evidence records delivered by one call of the API."),
]


def register_opts(conf):
    conf.register_opts(opts, group="agent")


def list_opts():
    return [("agent", opts)]
