"""[database]: where machines, partitions, migrations and events are kept."""

from oslo_config import cfg

opts = [
    cfg.StrOpt("connection", default="sqlite:///$state_path/metalboot.sqlite",
               secret=True,
               help="SQLAlchemy URL of the database. SQLite suits one server; "
                    "use postgresql+psycopg://... when several conductors share "
                    "the work."),
    cfg.BoolOpt("auto_upgrade", default=True,
                help="Upgrade the schema at server start, as metalboot-dbsync "
                     "would. Turn off where schema changes are rolled out by hand."),
    cfg.StrOpt("bmc_password_key_file", default="$state_path/bmc-password.key",
               help="File of the key that seals BMC passwords in the database "
                    "(mode 0600, created at the first start). Every process that "
                    "opens the database needs the same file; back it up with the "
                    "database, which reveals no password without it. "
                    "metalboot-dbsync rotate-key replaces the key."),
    cfg.IntOpt("pool_size", default=10, min=1,
               help="Connections kept open to a client-server database."),
]


def register_opts(conf):
    conf.register_opts(opts, group="database")


def list_opts():
    return [("database", opts)]
