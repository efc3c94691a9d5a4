"""Sphinx extension: the per-machine state machine, drawn and tabulated from
:data:`metalboot_framework.machine_steps.TRANSITIONS`.

``.. metalboot-state-machine::`` renders the Graphviz diagram
(``sphinx.ext.graphviz``, which needs ``dot``) and the table of transitions.
"""

from docutils.statemachine import StringList
from sphinx.util.docutils import SphinxDirective
from sphinx.util.nodes import nested_parse_with_titles


class StateMachineDirective(SphinxDirective):
    has_content = False

    def run(self):
        from metalboot_framework import machine_steps

        text = [".. graphviz::", "   :align: center", ""]
        text += ["   " + line for line in machine_steps.dot().splitlines()]
        text += [""] + machine_steps.rst_table().splitlines()
        container = StringList(text, source="metalboot_framework/machine_steps.py")
        from docutils import nodes
        node = nodes.section()
        node.document = self.state.document
        nested_parse_with_titles(self.state, container, node)
        return node.children


def setup(app):
    app.setup_extension("sphinx.ext.graphviz")
    app.add_directive("metalboot-state-machine", StateMachineDirective)
    return {"parallel_read_safe": True}
