"""``python -m metalboot_framework.cli``: the same as the ``metalboot`` command."""

import sys

from metalboot_framework.cli import main

sys.exit(main())
