"""boot.ipxe: rendered from the operator's or the built-in template, then
amended by the ``metalboot_amend_boot_script`` hooks."""

import os

import jinja2

from metalboot_framework import ipxe

TEMPLATE_DIR = os.path.join(os.path.dirname(__file__), "templates")


class BootScripts:
    """Renders a machine's boot script; ``templates`` is the jinja2 environment
    (``[artifacts] template_dir`` first, then the built-in templates)."""

    def __init__(self, conf, hooks, urls):
        self.conf = conf
        self.hooks = hooks
        self.urls = urls
        loaders = [jinja2.FileSystemLoader(TEMPLATE_DIR)]
        if conf.artifacts.template_dir:
            loaders.insert(0, jinja2.FileSystemLoader(conf.artifacts.template_dir))
        self.templates = ipxe.script_environment(jinja2.ChoiceLoader(loaders))

    def render(self, machine, partition, interface, token):
        """The script ``machine`` is served for ``interface`` with ``token``."""
        template = self.templates.get_template(self.conf.artifacts.boot_script_template)
        script = template.render(machine=machine, partition=partition, interface=interface,
                                 token=token,
                                 report_url=self.urls.report_url(machine.id, partition),
                                 public_url=self.urls.base_url(partition))
        if not self.hooks.has("metalboot_amend_boot_script"):
            return script
        return self.hooks.amend_boot_script(script, machine=machine, partition=partition,
                                            interface=interface)
