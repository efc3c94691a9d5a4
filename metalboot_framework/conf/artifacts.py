"""[artifacts]: boot scripts and files that booting machines download."""

from oslo_config import cfg

opts = [
    cfg.StrOpt("template_dir",
               help="Directory searched before the built-in templates, so that a "
                    "deployment can override boot.ipxe.j2 and friends."),
    cfg.StrOpt("boot_script_template", default="boot.ipxe.j2",
               help="Template rendered into each machine's boot.ipxe."),
    cfg.StrOpt("cache_dir", default="$state_path/artifacts",
               help="Directory for built artifacts (ISOs), named by content hash."),
]


def register_opts(conf):
    conf.register_opts(opts, group="artifacts")


def list_opts():
    return [("artifacts", opts)]
