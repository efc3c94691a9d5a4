"""Sphinx configuration of metalboot's documentation (``tox -e docs``).

Built with warnings as errors. Generated parts: the configuration reference
(oslo.config's ``show-options`` over every ``oslo.config.opts`` namespace),
the REST API reference (``_ext/metalboot_openapi.py``, from the app's OpenAPI
document) and the Python API of the plugin contract and the conformance kit
(autodoc), and the diagrams and tables of a machine's steps and of its
lifecycle (``_ext/metalboot_machine_steps.py``, drawn by Graphviz's ``dot``). Needs metalboot
installed (its entry points) and the ``docs`` extra.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "_ext"))

project = "metalboot"
copyright = "metalboot authors"
author = "metalboot authors"

try:
    from metalboot_framework import __version__ as release
except ImportError:  # pragma: no cover - the build needs metalboot installed anyway
    release = "unknown"
version = release

extensions = [
    "sphinx.ext.autodoc",
    "oslo_config.sphinxext",
    "metalboot_openapi",
    "metalboot_machine_steps",
]
graphviz_output_format = "svg"

root_doc = "index"
exclude_patterns = ["build", "_build", "Thumbs.db", ".DS_Store"]

autodoc_member_order = "bysource"
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_typehints = "none"
nitpicky = False

html_theme = "alabaster"
html_title = f"metalboot {release}"
html_static_path = []
