"""The API as a WSGI application for any WSGI server, e.g.

    gunicorn -w 4 -b 127.0.0.1:6480 'metalboot_framework.wsgi:application()'

Configuration comes from the files named in METALBOOT_CONFIG_FILES (separated
by ':'), default /etc/metalboot/metalboot.conf when it exists. No conductor
runs in these processes: start metalboot-conductor beside them.
"""

import os

from metalboot_framework.api import create_app
from metalboot_framework.cmd import common
from metalboot_framework.conf import CONF
from metalboot_framework.services import Services


def application():
    files = [f for f in os.environ.get("METALBOOT_CONFIG_FILES", "").split(":") if f]
    if not files and os.path.exists("/etc/metalboot/metalboot.conf"):
        files = ["/etc/metalboot/metalboot.conf"]
    CONF([], project="metalboot", default_config_files=files)
    common.setup_logging(CONF.debug)
    return create_app(Services.from_conf(CONF))
