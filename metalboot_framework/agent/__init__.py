"""metalboot-boot-agent: the boot service of a partition.

It runs in the partition's boot network, several times behind one anycast
address, and reaches the control plane only through the API, with a token
valid for its partitions alone. It serves what booting machines call with
the same code as metalboot-boot-server
(:class:`~metalboot_framework.boot_server.app.BootServer`), from other
objects:

- :mod:`.client`: the calls of the API (boot data, change feed, artifacts,
  evidence delivery);
- :mod:`.replica`: the partitions' boot data (snapshot, then the change feed),
  the tokens that come with it, kept on disk for a restart without the API,
  and whether it is fresh;
- :mod:`.artifact_cache`: partition artifacts (ISOs) fetched once, checked by
  digest, kept on disk;
- :mod:`.journal`: evidence fsync'ed to a local journal before each answer;
- :mod:`.delivery`: the journal delivered to the API, at least once;
- :mod:`.state_files`: atomic writes under ``[agent] state_dir``;
- :mod:`.process`: configuration, ``/healthz``, the process.

The console script ``metalboot-boot-agent`` is
:func:`metalboot_framework.cmd.boot_agent.main`.
"""
