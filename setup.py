"""Finds the packages of the core (under .) and of the first-party plugins
(under plugins/): setup.cfg's ``packages = find:`` searches only one
directory. Everything else is in setup.cfg."""

from setuptools import find_packages, setup

PLUGINS = find_packages("plugins")

setup(packages=find_packages(include=["metalboot_framework", "metalboot_framework.*"]) + PLUGINS,
      package_dir={name: f"plugins/{name}" for name in PLUGINS if "." not in name})
