"""[api]: the REST API and boot-artifact HTTP server."""

from oslo_config import cfg

#: also what schemas loaded outside the API limit properties to
DEFAULT_MAX_PROPERTIES_SIZE = 64 * 1024

opts = [
    cfg.HostAddressOpt("host_ip", default="127.0.0.1",
                       help="Address to listen on. Any address other than a "
                            "loopback one requires admin_tokens to be set."),
    cfg.PortOpt("port", default=6480, help="TCP port to listen on."),
    cfg.StrOpt("public_url",
               help="Base URL under which booting machines reach this server, "
                    "e.g. http://[fd00:b007::1]:6480. Boot artifacts and scripts "
                    "carry it. Defaults to http://<host_ip>:<port>."),
    cfg.ListOpt("admin_tokens", default=[], secret=True,
                help="Bearer tokens allowed to read and change everything. "
                     "When neither admin_tokens nor reader_tokens is set, the "
                     "server generates one admin token into "
                     "<state_path>/admin-token at first start."),
    cfg.ListOpt("reader_tokens", default=[], secret=True,
                help="Bearer tokens allowed to read only."),
    cfg.IntOpt("max_request_body_size", default=16 * 1024 * 1024, min=1024,
                help="Largest accepted request body in bytes; larger ones get 413."),
    cfg.IntOpt("max_properties_size", default=DEFAULT_MAX_PROPERTIES_SIZE, min=1024,
               help="Largest 'properties' of a machine or a partition, in bytes of "
                    "compact UTF-8 JSON: they are stored and served back with every "
                    "list. Larger ones get 422 naming the field."),
    cfg.IntOpt("max_machines_per_request", default=10000, min=1,
               help="Most machines one POST /v1/machines may register."),
    cfg.IntOpt("max_page_size", default=1000, min=1,
               help="Largest accepted 'limit' of a list request."),
    cfg.IntOpt("default_page_size", default=100, min=1, max=1000,
               help="'limit' of a list request that names none."),
    cfg.IntOpt("threads", default=16, min=1,
               help="Worker threads of the WSGI server."),
    cfg.IntOpt("connection_limit", default=1000, min=1,
               help="Most simultaneous client connections the WSGI server accepts."),
    cfg.BoolOpt("metrics_public", default=False,
                help="Serve GET /metrics (Prometheus text format) without a token. "
                     "When false, /metrics needs a reader or admin bearer token, "
                     "like the rest of the API (Prometheus: "
                     "authorization: {credentials_file: ...})."),
    cfg.BoolOpt("access_log", default=True,
                help="Log one INFO line per HTTP request: method, path (per-machine "
                     "tokens and token query parameters masked), status, duration, "
                     "request id."),
]


def register_opts(conf):
    conf.register_opts(opts, group="api")


def list_opts():
    return [("api", opts)]
