#!/usr/bin/env python3
"""Run one e2e scenario by hand, with real OVMF firmware, and print its table.

    sudo python tests/e2e/run_scenario.py smoke               # one machine booted by pxe
    sudo python tests/e2e/run_scenario.py chain               # the full chain (2 machines)
    sudo python tests/e2e/run_scenario.py path dhcp-httpboot  # one path, from --source
    sudo python tests/e2e/run_scenario.py chain --hold        # keep it all up afterwards
    sudo python tests/e2e/run_scenario.py path pxe --agent    # through the partition's agent
    sudo python tests/e2e/run_scenario.py api-stop            # a wave, the API stopped 60 s
    sudo python tests/e2e/run_scenario.py agent-kill          # two agents, one killed

Builds the same boot network as the pytest e2e tests (tests/e2e/harness.py) in
a namespace of its own and removes it at the end, also on failure or Ctrl-C.
``--workdir`` keeps the logs (server, dnsmasq, Kea, BMCs, serial consoles,
boots.jsonl per machine) after the run; without it they go to a temporary
directory that is deleted unless the scenario failed. ``--agent`` (implied by
``api-stop`` and ``agent-kill``) puts the control plane into a namespace of its own, fenced off
from the partition but for the API's port, and lets metalboot-boot-agent serve
the machines (tests/e2e/control_plane.py).
"""

import argparse
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from tests.e2e import scenarios  # noqa: E402
from tests.e2e.harness import ADMIN_TOKEN, Harness, HarnessError  # noqa: E402

PATHS = ["fake", "pxe", "redfish-virtual-media-ipxe", "redfish-http-url", "dhcp-httpboot",
         scenarios.BROKEN]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenario", choices=["smoke", "chain", "path", "api-stop",
                                             "agent-kill"])
    parser.add_argument("target", nargs="?", choices=PATHS,
                        help="boot interface to migrate to (scenario 'path')")
    parser.add_argument("--source", default="fake", choices=PATHS,
                        help="interface the machines are registered on, unbooted "
                             "(scenario 'path'; default fake)")
    parser.add_argument("--machines", type=int, help="default: 1 (smoke, path), 2 (chain)")
    parser.add_argument("--workdir", help="keep all logs here")
    parser.add_argument("--agent", action="store_true",
                        help="the control plane apart, the partition's agent serving")
    parser.add_argument("--hold", action="store_true",
                        help="after the scenario, keep everything running until Ctrl-C")
    args = parser.parse_args(argv)
    if args.scenario == "path" and not args.target:
        parser.error("scenario 'path' needs a target interface")
    waves = ("chain", "api-stop", "agent-kill")
    count = args.machines or (2 if args.scenario in waves else 1)
    agent = args.agent or args.scenario in waves[1:]

    # SIGTERM like Ctrl-C, so that the harness is closed either way.
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    # pxe needs DHCPv4; every other scenario runs on an IPv6-only boot network.
    ipv6_only = args.scenario in waves or (
        args.scenario == "path" and "pxe" not in (args.target, args.source))
    through = scenarios.CHAIN if args.scenario == "chain" else [args.target, args.source]
    harness = Harness(machines=count, workdir=args.workdir, ipv6_only=ipv6_only, agent=agent,
                      agents=2 if args.scenario == "agent-kill" else 1,
                      boot_network_prefixes=scenarios.prefixes(*through))
    failed = True
    started = time.monotonic()
    try:
        harness.start()
        if args.scenario == "smoke":
            rows = scenarios.pxe_smoke(harness)
        elif args.scenario == "chain":
            rows = scenarios.migration_chain(harness)
        elif args.scenario == "api-stop":
            rows, _ = scenarios.api_stopped_in_a_wave(harness, args.target or
                                                      "redfish-virtual-media-ipxe")
        elif args.scenario == "agent-kill":
            rows, _ = scenarios.agent_killed_in_a_wave(harness, args.target or
                                                       "redfish-virtual-media-ipxe")
        elif agent:
            print(scenarios.fenced_partition(harness))
            rows = scenarios.agent_boot(harness, args.target)
        else:
            rows = scenarios.single_path(harness, args.target, source=args.source)
        print(scenarios.format_table(rows))
        print(f"\n{args.scenario}: passed in {time.monotonic() - started:.0f} s "
              f"(workdir {harness.workdir})")
        failed = False
        if args.hold:
            print(f"holding: namespace {harness.netns}, API {harness.server_url} "
                  f"(token {ADMIN_TOKEN}); Ctrl-C ends")
            while True:
                time.sleep(3600)
    except HarnessError as exc:
        print(f"\n{args.scenario}: FAILED after {time.monotonic() - started:.0f} s: {exc}",
              file=sys.stderr)
    except KeyboardInterrupt:
        if failed:
            print("\ninterrupted", file=sys.stderr)
    finally:
        harness.keep_workdir = harness.keep_workdir or failed
        harness.close()
        if failed:
            print(f"logs kept in {harness.workdir}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
