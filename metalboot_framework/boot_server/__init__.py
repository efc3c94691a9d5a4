"""metalboot-boot-server: the artifact server for boot storms (granian, asyncio).

It serves exactly what booting machines and their BMCs call, the routes of
:mod:`metalboot_framework.boot_endpoints`, with the same answers as the Flask
blueprint of metalboot-server (both answer through that module and decide
through :mod:`metalboot_framework.artifacts`):

- ``GET /boot/<machine>/<interface>/<token>/<name>`` (boot.ipxe and plugin
  artifacts; every fetch is boot evidence),
- ``GET /boot/mac/<mac>/<interface>/boot.ipxe`` (evidence too),
- ``GET /boot/partitions/<partition>/<interface>/<name>`` (ISOs, in ranges),
- ``POST /v1/machines/<id>/boot-report``.

Operators point ``[api] public_url`` at it, so that the URLs machines are given
lead here; the REST API stays on metalboot-server / metalboot-api, on the same
database. One module per job:

- :mod:`.cache`: what a fetch reads (machine snapshots with their rendered
  boot.ipxe, MAC lookups, partition artifacts), cached ``[boot_server]
  cache_ttl`` seconds, concurrent misses loaded by one query, unchanged
  machines kept by their revisions, machines about to boot loaded ahead;
- :mod:`.evidence`: the group commit of boot evidence (no answered fetch
  without committed evidence);
- :mod:`.app`: the RSGI application granian calls (HTTP is granian's: Rust,
  hyper on tokio, so parsing and writing cost no Python; one event loop runs
  the answers; database calls run in threads);
- :mod:`.process`: listening, signals, worker processes.

The console script ``metalboot-boot-server`` is
:func:`metalboot_framework.cmd.boot_server.main`.
"""
