"""A private LAN segment made of network namespaces, for running LAN nodes as separate hosts.

Layout: namespace ``<prefix>-0`` holds only a bridge ``br0``; namespaces
``<prefix>-1`` … ``-N`` each get one veth (``eth0``) whose other end is a
bridge port, and the address ``<subnet>.(k+1)/24`` with broadcast
``<subnet>.255``.  Every link is created inside namespace 0 with its peer
moved straight into the node's namespace, so nothing is created in, or routed
through, the machine's own namespace; deleting the namespaces removes it all.
Needs root (or CAP_SYS_ADMIN + CAP_NET_ADMIN) and iproute2.

Used by ``tests/netns/test_netns_lan.py``; by hand::

    sudo python scripts/netns/lan_segment.py demo      # host + 3 joiners, prints their summaries
    sudo python scripts/netns/lan_segment.py up 4      # keep a segment; prints its namespaces
    sudo ip netns exec pianode-xxxxxx-2 <your tool>    # run anything on node 2's address
    sudo python scripts/netns/lan_segment.py down pianode-xxxxxx
"""

from __future__ import annotations

import argparse
import json
import secrets
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import attrs

IP = shutil.which("ip") or "/usr/sbin/ip"


class SegmentError(RuntimeError):
    """An ``ip`` command failed while building the segment."""


@attrs.frozen
class Segment:
    """A built segment: node namespaces (index 0 = node 1) and their addresses."""

    prefix: str
    namespaces: tuple[str, ...]
    addresses: tuple[str, ...]
    broadcast: str

    def exec_argv(self, node: int, *argv: str) -> list[str]:
        """*argv* run inside node *node*'s namespace (0-based)."""
        return [IP, "netns", "exec", self.namespaces[node], *argv]


def ip(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([IP, *argv], capture_output=True, text=True, timeout=10, check=False)


def _must(*argv: str) -> None:
    done = ip(*argv)
    if done.returncode != 0:
        raise SegmentError(f"ip {' '.join(argv)} failed: {done.stderr.strip()}")


def netns_unavailable() -> str | None:
    """Why namespaces cannot be created here (None when they can): probes with a throwaway namespace."""
    if not shutil.which(IP):
        return "the 'ip' command (iproute2) is not installed"
    probe = f"pianode-probe-{secrets.token_hex(4)}"
    made = ip("netns", "add", probe)
    if made.returncode != 0:
        return f"'ip netns add' failed (needs root / CAP_SYS_ADMIN): {made.stderr.strip()}"
    ip("netns", "del", probe)
    return None


def build(nodes: int = 4, subnet: str = "192.168.77", prefix: str | None = None) -> Segment:
    """Create the namespaces and links; on failure, remove what was made and raise SegmentError."""
    if not 1 <= nodes <= 250:
        raise ValueError(f"nodes must be 1..250, got {nodes}")
    prefix = prefix or f"pianode-{secrets.token_hex(3)}"
    names = [f"{prefix}-{k}" for k in range(nodes + 1)]
    made: list[str] = []
    try:
        for name in names:
            _must("netns", "add", name)
            made.append(name)
        hub = names[0]
        _must("-n", hub, "link", "set", "lo", "up")
        _must("-n", hub, "link", "add", "br0", "type", "bridge")
        _must("-n", hub, "link", "set", "br0", "up")
        for k in range(1, nodes + 1):
            ns = names[k]
            _must("-n", hub, "link", "add", f"port{k}", "type", "veth", "peer", "name", "eth0", "netns", ns)
            _must("-n", hub, "link", "set", f"port{k}", "master", "br0", "up")
            _must("-n", ns, "link", "set", "lo", "up")
            _must("-n", ns, "addr", "add", f"{subnet}.{k + 1}/24", "brd", f"{subnet}.255", "dev", "eth0")
            _must("-n", ns, "link", "set", "eth0", "up")
    except BaseException:
        for name in made:
            ip("netns", "del", name)
        raise
    return Segment(prefix, tuple(names[1:]), tuple(f"{subnet}.{k + 1}" for k in range(1, nodes + 1)), f"{subnet}.255")


def remove(prefix: str) -> list[str]:
    """Delete every namespace named ``<prefix>-<number>``; returns the names removed."""
    listed = ip("netns", "list").stdout.split("\n")
    names = [line.split()[0] for line in listed if line.strip()]
    gone = [n for n in names if n.startswith(prefix + "-") and n[len(prefix) + 1 :].isdigit()]
    for name in gone:
        ip("netns", "del", name)
    return gone


@contextmanager
def lan_segment(nodes: int = 4, subnet: str = "192.168.77") -> Iterator[Segment]:
    """:func:`build` for the duration of a ``with`` block; always removed afterwards."""
    segment = build(nodes, subnet)
    try:
        yield segment
    finally:
        remove(segment.prefix)


def _demo(game_key: str, duration: float) -> int:
    with lan_segment(4) as seg:
        py = [sys.executable, "-m", "pianode", "lan"]
        common = ["--game-key", game_key, "--broadcast", seg.broadcast, "--format", "jsonl"]
        host = subprocess.Popen(
            seg.exec_argv(0, *py, "host", *common, "--address", seg.addresses[0], "--duration", str(duration + 3)),
            stdout=subprocess.PIPE,
            text=True,
        )
        joins = [
            subprocess.Popen(
                seg.exec_argv(k, *py, "join", *common, "--bind", seg.addresses[k], "--duration", str(duration)),
                stdout=subprocess.PIPE,
                text=True,
            )
            for k in range(1, 4)
        ]
        status = 0
        for proc in [*joins, host]:
            out, _ = proc.communicate(timeout=duration + 30)
            lines = out.splitlines()
            summary = json.loads(lines[-1]) if lines else {}
            print(json.dumps(summary))
            status |= proc.returncode
    return 1 if status else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="build a segment and leave it in place")
    up.add_argument("nodes", type=int, nargs="?", default=4)
    up.add_argument("--subnet", default="192.168.77", help="first three octets (default 192.168.77)")
    down = sub.add_parser("down", help="remove a segment built by 'up'")
    down.add_argument("prefix")
    demo = sub.add_parser("demo", help="host + three joiners in four namespaces, then remove them")
    demo.add_argument("--game-key", default="ee182a63e216cdb1f51ad4bed8cf6508")
    demo.add_argument("--duration", type=float, default=5.0)
    args = parser.parse_args(argv)
    why = netns_unavailable()
    if why:
        print(f"lan_segment: {why}", file=sys.stderr)
        return 2
    if args.command == "up":
        seg = build(args.nodes, args.subnet)
        print(json.dumps(attrs.asdict(seg)))
        return 0
    if args.command == "down":
        print("removed", " ".join(remove(args.prefix)) or "nothing")
        return 0
    return _demo(args.game_key, args.duration)


if __name__ == "__main__":
    sys.exit(main())
