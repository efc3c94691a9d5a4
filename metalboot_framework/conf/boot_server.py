"""[boot_server]: metalboot-boot-server, the artifact server for boot storms (granian).

It serves only what booting machines call (boot.ipxe and other per-machine
artifacts, boot.ipxe by MAC, partition ISOs, boot reports) from the same
database as the API. Machines find it through ``[api] public_url``: point that
at this server's address.
"""

from oslo_config import cfg

opts = [
    cfg.HostAddressOpt("host_ip", default="127.0.0.1",
                       help="Address metalboot-boot-server listens on. It serves no "
                            "administrative endpoint (every per-machine URL carries the "
                            "machine's token), so any address may be used; booting "
                            "machines must reach it."),
    cfg.PortOpt("port", default=6481, help="TCP port metalboot-boot-server listens on."),
    cfg.FloatOpt("cache_ttl", default=1.0, min=0,
                 help="Seconds a machine's snapshot (machine, NICs, partition, rendered "
                      "boot.ipxe), a MAC lookup and a partition artifact are reused "
                      "before being checked against the database again (a machine "
                      "snapshot by its revisions only: it is read again only if it "
                      "changed). A token rotation, a partition change or a machine's "
                      "move to another boot interface takes effect on this server "
                      "within this time. 0: read on every request (concurrent requests "
                      "still share one query)."),
    cfg.FloatOpt("warm_interval", default=0.1, min=0,
                 help="Seconds between two looks at the machines a migration is "
                      "preparing or activating: their snapshots not yet cached are "
                      "loaded then, so that the first fetch after the machine's reset "
                      "finds them (one indexed query per look). 0, or a cache_ttl of "
                      "0: no looks; the first fetch loads the snapshot."),
    cfg.IntOpt("read_batch_size", default=500, min=1,
               help="Most machines (or MACs, or partition artifacts) loaded by one "
                    "database query when concurrent requests miss the cache."),
    cfg.IntOpt("evidence_batch_size", default=1000, min=1,
               help="Most evidence rows inserted by one transaction. Fetches that "
                    "arrive while a transaction is being committed are written by the "
                    "next one (group commit); each answer is sent once its evidence "
                    "is committed."),
    cfg.FloatOpt("evidence_batch_wait", default=0.0, min=0, max=1,
                 help="Seconds the evidence writer waits after the first queued row "
                      "of an idle period for more rows to join its transaction."),
    cfg.IntOpt("db_threads", default=4, min=1,
               help="Threads that run database reads (and plugin artifact lookups) "
                    "off the event loop; evidence has one writer thread of its own."),
    cfg.IntOpt("workers", default=1, min=0,
               help="Server processes sharing the port (SO_REUSEPORT; the kernel spreads "
                    "connections over them). One event loop uses one core at most, and "
                    "its HTTP threads (Rust) part of another: give a boot storm about "
                    "one process per two cores. 0: one per CPU this process may run "
                    "on."),
    cfg.IntOpt("backlog", default=1024, min=1,
               help="Listen backlog of the server socket."),
    cfg.FloatOpt("shutdown_timeout", default=10.0, min=0,
                 help="Seconds the server waits at SIGTERM/SIGINT for the requests in "
                      "progress (past it, it logs a warning and goes on stopping: their "
                      "answers may fail); queued evidence is committed before the "
                      "process exits."),
    cfg.StrOpt("task_impl", default="rust", choices=[
                   ("rust", "granian steps each request's coroutine from Rust: about "
                            "30% more requests per second in a boot storm. granian marks "
                            "it experimental, and uses asyncio on Python 3.12 and later."),
                   ("asyncio", "each request is an asyncio task.")],
               help="How the HTTP server (granian, embedded in the process's event "
                    "loop) runs the coroutine of each request."),
    cfg.BoolOpt("access_log", default=False,
                help="Log one INFO line per request and per evidence row (costly "
                     "during a boot storm)."),
]


def register_opts(conf):
    conf.register_opts(opts, group="boot_server")


def list_opts():
    return [("boot_server", opts)]
