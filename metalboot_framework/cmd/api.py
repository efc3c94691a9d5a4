"""metalboot-api: the REST API and artifact server, without a conductor.

Run several behind a load balancer, each against the same PostgreSQL
database, beside one or more metalboot-conductor processes. Any other WSGI
server can serve :mod:`metalboot_framework.wsgi` instead.
"""

import sys

from metalboot_framework.cmd.server import run


def main(argv=None):
    return run("metalboot-api", "Run the metalboot API and artifact server (no conductor).",
               argv, with_api=True, with_conductor=False)


if __name__ == "__main__":
    sys.exit(main())
