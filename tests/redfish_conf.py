"""Configuration for Redfish plugin tests: a private ConfigOpts with fast BMC timings."""

import contextlib

import pytest
from oslo_config import cfg

from metalboot_framework.bmc import connection as bmc_connection
from metalboot_framework.conf import api, artifacts, bmc, conductor, database, default, dhcp
from metalboot_redfish import conf as redfish_conf


def make_conf(state_path, public_url, ipxe_efi, fast, **bmc_overrides):
    """A ConfigOpts for the two Redfish interfaces; ``fast``: [bmc] timings."""
    conf = cfg.ConfigOpts()
    for module in (default, api, database, conductor, artifacts, bmc, dhcp):
        module.register_opts(conf)
    redfish_conf.register_opts(conf)
    conf([], project="metalboot", default_config_files=[])
    conf.set_override("state_path", str(state_path))
    conf.set_override("connection", f"sqlite:///{state_path}/metalboot.sqlite", group="database")
    conf.set_override("enabled_boot_interfaces",
                      ["redfish-http-url", "redfish-virtual-media-ipxe"])
    conf.set_override("default_boot_interface", "redfish-http-url")
    conf.set_override("public_url", public_url, group="api")
    # the simulated machines fetch boot.ipxe by MAC from loopback
    conf.set_override("boot_network_prefixes", ["127.0.0.0/8", "::1/128"], group="artifacts")
    for key, value in dict(fast, **bmc_overrides).items():
        conf.set_override(key, value, group="bmc")
    conf.set_override("ipxe_efi_path", ipxe_efi, group="redfish")
    return conf


@pytest.fixture(autouse=True)
def fresh_bmc_connection_cache():
    bmc_connection.CACHE.clear()
    yield
    bmc_connection.CACHE.clear()


@contextlib.contextmanager
def services_factory(conf_for, on_made=None):
    """A factory of real Services, ``make(**bmc_overrides)``, from
    ``conf_for(index, **bmc_overrides)``; their databases closed at the end."""
    from metalboot_framework.services import Services
    made = []

    def make(**bmc_overrides):
        services = Services.from_conf(conf_for(len(made), **bmc_overrides))
        if on_made:
            on_made(services)
        made.append(services)
        return services
    try:
        yield make
    finally:
        for services in made:
            services.db.write_engine.dispose()
            services.db.read_engine.dispose()
