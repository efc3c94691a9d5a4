"""[bmc]: how metalboot talks to BMCs over Redfish (timeouts, retries, polling)."""

from oslo_config import cfg

opts = [
    cfg.FloatOpt("connect_timeout", default=30.0, min=0.01,
                 help="Seconds to wait for a TCP connection to a BMC."),
    cfg.FloatOpt("read_timeout", default=20.0, min=0.01,
                 help="Seconds to wait for a BMC's answer to one request."),
    cfg.FloatOpt("call_timeout", default=60.0, min=0.01,
                 help="Seconds one BMC call (a read or a change, with its retries) "
                      "may take before it fails: a hung BMC stops a step after about "
                      "this long. Busy refusals (post_retry_timeout) and power "
                      "changes (power_timeout) have their own limits."),
    cfg.IntOpt("retry_attempts", default=5, min=1,
               help="Attempts of one Redfish request when the BMC is unreachable, "
                    "times out or answers 5xx. 4xx answers are never retried, "
                    "except a BMC's busy or not-ready refusal (HPE iLO during POST, "
                    "Dell SYS518). A reset or media insert is never sent again "
                    "after a timeout: the BMC's state is read instead."),
    cfg.FloatOpt("retry_interval", default=4.0, min=0.0,
                 help="Seconds before the first retry; the wait doubles with each "
                      "further attempt up to retry_max_interval."),
    cfg.FloatOpt("retry_max_interval", default=30.0, min=0.0,
                 help="Longest wait between two attempts."),
    cfg.FloatOpt("power_poll_interval", default=2.0, min=0.01,
                 help="Seconds between reads of a system's PowerState while "
                      "waiting for a power change to take effect."),
    cfg.FloatOpt("power_timeout", default=120.0, min=0.01,
                 help="Seconds a power change may take before it counts as "
                      "failed (iDRAC may need a minute)."),
    cfg.FloatOpt("post_retry_timeout", default=300.0, min=0.0,
                 help="Seconds to keep retrying a change that a BMC refuses "
                      "because the system is in POST (HPE iLO quirk)."),
    cfg.FloatOpt("post_retry_interval", default=10.0, min=0.01,
                 help="Seconds between those retries."),
    cfg.IntOpt("max_requests_per_bmc", default=10, min=1, max=1000,
               help="Redfish requests sent to one BMC (address and user) at the same "
                    "time; more wait. A BMC of one system sees one request at a time "
                    "anyway (a machine runs one step at a time); a chassis manager or "
                    "an emulator serving many systems gets up to this many. Lower it "
                    "for BMCs that fail under concurrent requests. Read when the "
                    "connection to a BMC is opened."),
    cfg.IntOpt("connection_cache_ttl", default=900, min=0,
               help="Seconds a cached Redfish connection to a BMC is reused "
                    "before it is opened anew; 0 disables reuse."),
    cfg.IntOpt("connection_cache_size", default=5000, min=1,
               help="Most BMC connections kept open at once; the least "
                    "recently used is closed first."),
]


def register_opts(conf):
    conf.register_opts(opts, group="bmc")


def list_opts():
    return [("bmc", opts)]
