"""Sphinx extension: the per-machine tables, drawn and tabulated from the code.

``.. metalboot-state-machine::`` renders the Graphviz diagram
(``sphinx.ext.graphviz``, which needs ``dot``) and the table of
:data:`metalboot_framework.machine_steps.TRANSITIONS`, a machine's steps in a
migration; ``.. metalboot-machine-lifecycle::`` those of
:data:`metalboot_framework.machine_lifecycle.CHANGES`, its own states.
"""

import importlib

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles


class _TableDirective(SphinxDirective):
    """The diagram (``dot()``) and the table (``rst_table()``) of ``module``."""

    has_content = False
    module = None

    def run(self):
        table = importlib.import_module(self.module)
        text = [".. graphviz::", "   :align: center", ""]
        text += ["   " + line for line in table.dot().splitlines()]
        text += [""] + table.rst_table().splitlines()
        container = StringList(text, source=table.__file__)
        node = nodes.section()
        node.document = self.state.document
        nested_parse_with_titles(self.state, container, node)
        return node.children


class StateMachineDirective(_TableDirective):
    module = "metalboot_framework.machine_steps"


class LifecycleDirective(_TableDirective):
    module = "metalboot_framework.machine_lifecycle"


def setup(app):
    app.setup_extension("sphinx.ext.graphviz")
    app.add_directive("metalboot-state-machine", StateMachineDirective)
    app.add_directive("metalboot-machine-lifecycle", LifecycleDirective)
    return {"parallel_read_safe": True}
