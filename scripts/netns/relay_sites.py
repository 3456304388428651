"""Places that cannot reach each other, and a relay hub that both can: network namespaces for relay tests.

Layout: namespace ``<prefix>-hub`` holds the hub; each site namespace
``<prefix>-<k>`` (k = 1, 2, ...) has one veth ``eth0`` to the hub and nothing
else.  Site *k* is ``10.<base>.<k>.2/24``, the hub's end ``10.<base>.<k>.1/24``.
The hub namespace does not forward (a new namespace starts with IPv4
forwarding off) and the sites have no route beyond their own /24, so site A
cannot reach site B: only the hub can carry their traffic.  Every link is
made inside the hub namespace with its peer moved straight into the site's
namespace, so nothing is created in, or routed through, the machine's own
namespace; deleting the namespaces removes it all.  Needs root and iproute2.

Used by ``tests/netns/test_netns_relay.py``; by hand::

    sudo python scripts/netns/relay_sites.py up 2     # prints the namespaces and addresses
    sudo python scripts/netns/relay_sites.py down pianode-relay-xxxxxx
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import subprocess
import sys

import attrs

IP = shutil.which("ip") or "/usr/sbin/ip"


class SitesError(RuntimeError):
    """An ``ip`` command failed while building the sites."""


@attrs.frozen
class Sites:
    prefix: str
    hub: str
    sites: tuple[str, ...]  # namespace of site 1, 2, ...
    site_addresses: tuple[str, ...]
    hub_addresses: tuple[str, ...]  # the hub's address as site k sees it

    def exec_argv(self, namespace: str, *argv: str) -> list[str]:
        return [IP, "netns", "exec", namespace, *argv]


def ip(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([IP, *argv], capture_output=True, text=True, timeout=10, check=False)


def _must(*argv: str) -> None:
    done = ip(*argv)
    if done.returncode != 0:
        raise SitesError(f"ip {' '.join(argv)} failed: {done.stderr.strip()}")


def build(count: int = 2, base: int = 99, prefix: str | None = None) -> Sites:
    """Create the hub and *count* sites; on failure, remove what was made and raise SitesError."""
    if not 1 <= count <= 50:
        raise ValueError(f"count must be 1..50, got {count}")
    prefix = prefix or f"pianode-relay-{secrets.token_hex(3)}"
    hub = f"{prefix}-hub"
    sites = [f"{prefix}-{k}" for k in range(1, count + 1)]
    made: list[str] = []
    try:
        for name in (hub, *sites):
            _must("netns", "add", name)
            made.append(name)
        _must("-n", hub, "link", "set", "lo", "up")
        for k, ns in enumerate(sites, start=1):
            _must("-n", hub, "link", "add", f"site{k}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            _must("-n", hub, "addr", "add", f"10.{base}.{k}.1/24", "dev", f"site{k}")
            _must("-n", hub, "link", "set", f"site{k}", "up")
            _must("-n", ns, "link", "set", "lo", "up")
            _must("-n", ns, "addr", "add", f"10.{base}.{k}.2/24", "dev", "eth0")
            _must("-n", ns, "link", "set", "eth0", "up")
    except BaseException:
        for name in made:
            ip("netns", "del", name)
        raise
    return Sites(
        prefix, hub, tuple(sites),
        tuple(f"10.{base}.{k}.2" for k in range(1, count + 1)),
        tuple(f"10.{base}.{k}.1" for k in range(1, count + 1)),
    )  # fmt: skip


def remove(prefix: str) -> list[str]:
    """Delete every namespace of *prefix*; returns the names removed."""
    names = [line.split()[0] for line in ip("netns", "list").stdout.split("\n") if line.strip()]
    gone = [n for n in names if n.startswith(prefix + "-")]
    for name in gone:
        ip("netns", "del", name)
    return gone


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    up = sub.add_parser("up")
    up.add_argument("count", type=int, nargs="?", default=2)
    down = sub.add_parser("down")
    down.add_argument("prefix")
    args = p.parse_args(argv)
    if args.cmd == "up":
        print(json.dumps(attrs.asdict(build(args.count))))
    else:
        print(" ".join(remove(args.prefix)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
