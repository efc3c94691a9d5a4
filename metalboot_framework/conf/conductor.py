"""[conductor]: the worker that runs migrations and periodic checks."""

from oslo_config import cfg

opts = [
    cfg.IntOpt("workers", default=64, min=1,
               help="Machines this conductor works on at once (migration steps, "
                    "enrolments, removals), and the threads that run plugin steps written "
                    "as blocking functions (steps written as coroutines need none). A "
                    "migration's max_parallel is capped by this number."),
    cfg.FloatOpt("poll_interval", default=0.5, min=0.01,
                 help="Seconds between looks for work that became due."),
    cfg.FloatOpt("evidence_interval", default=0.02, min=0.001,
                 help="Seconds between looks for boot evidence of the machines this "
                      "conductor waits for (each look reads only evidence newer than the "
                      "last)."),
    cfg.IntOpt("heartbeat_interval", default=10, min=1,
               help="Seconds between this conductor's heartbeats."),
    cfg.IntOpt("heartbeat_timeout", default=60, min=2,
               help="Seconds without a heartbeat after which a conductor is "
                    "taken as dead and its machine locks are released."),
    cfg.IntOpt("default_boot_timeout", default=900, min=1,
               help="Seconds a migrated machine has, after activation, to prove "
                    "it booted through the new path; a migration may set its own."),
    cfg.IntOpt("drift_check_interval", default=600, min=0,
               help="Seconds between drift checks of every machine at rest; 0 "
                    "turns the check off."),
]


def register_opts(conf):
    conf.register_opts(opts, group="conductor")


def list_opts():
    return [("conductor", opts)]
