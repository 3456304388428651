"""Separate hosts for real: four LAN nodes in four network namespaces find each other by broadcast and form a mesh.

The test builds its own network with ``scripts/netns/lan_segment.py`` and
removes it in a ``finally``:

* five namespaces ``pianode-<random>-0`` … ``-4``; namespace 0 holds only a
  bridge, namespaces 1-4 one node each;
* one veth pair per node namespace, created inside namespace 0 with its peer
  moved straight into the node's namespace (nothing is created in, or routed
  through, the machine's own namespace);
* node *k* is ``192.168.77.(k+1)/24`` on its veth, broadcast ``192.168.77.255``.

Then ``pianode lan host`` runs in namespace 1 and ``pianode lan join`` in
namespaces 2-4, all with the documented defaults (browse on port 30000, Pia
sockets on 49152), each joiner knowing only the broadcast address: the same
code path as four machines on one LAN segment (spec §6.1, §6.6).  It is
skipped, loudly and with the failing command's error, only where network
namespaces (or veth/bridge links) cannot be created.
"""

from __future__ import annotations

import importlib.util
import json
import pathlib
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from peers import peer_unavailable
import trio

from protocols.pia.keys import lan_constant_id, lan_network_id
from protocols.pia.lan import lan_session_key

from cli_processes import CliProcess, run_mesh, until

KEY = "ee182a63e216cdb1f51ad4bed8cf6508"  # Splatoon 2 (spec §3.6)
SUBNET = "192.168.77"
HARNESS = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "netns" / "lan_segment.py"


def _harness() -> Any:
    spec = importlib.util.spec_from_file_location("pianode_netns_lan_segment", HARNESS)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


seg = _harness()


@contextmanager
def lan_segment() -> Iterator[Any]:
    """The harness's segment, or a loud skip naming the command that cannot run here."""
    why = seg.netns_unavailable()
    if why:
        peer_unavailable(f"NETNS TEST NOT RUN: {why}")
    try:
        segment = seg.build(4, SUBNET)
    except seg.SegmentError as exc:
        peer_unavailable(f"NETNS TEST NOT RUN: namespaces work but the virtual LAN cannot be built: {exc}")
    try:
        yield segment
    finally:
        seg.remove(segment.prefix)


def _enough(p: CliProcess) -> bool:
    """Three messages from each of the three other stations."""
    got = p.received_from()
    return len(got) == 3 and min(got.values()) >= 3


async def _run_segment(segment: Any) -> tuple[CliProcess, list[CliProcess]]:
    """Host in node 1, joiners in nodes 2-4; SIGTERM once data flowed everywhere (--duration only bounds)."""
    py = [sys.executable, "-m", "pianode", "lan"]
    common = ["--game-key", KEY, "--broadcast", segment.broadcast, "--format", "jsonl", "--send-every", "0.2"]
    host = CliProcess(segment.exec_argv(0, *py, "host", *common, "--address", segment.addresses[0], "--duration", "60"))
    joiners = [
        CliProcess(segment.exec_argv(k, *py, "join", *common, "--bind", segment.addresses[k], "--duration", "60"))
        for k in range(1, 4)
    ]
    with trio.fail_after(60):
        await run_mesh(host, joiners, _enough)
    return host, joiners


async def test_four_namespaces_discover_by_broadcast_and_form_a_mesh() -> None:
    with lan_segment() as segment:
        assert segment.addresses == tuple(f"{SUBNET}.{k}" for k in (2, 3, 4, 5))
        assert segment.broadcast == f"{SUBNET}.255"
        host, joins = await _run_segment(segment)
    assert seg.ip("netns", "list").stdout.count(segment.prefix) == 0  # removed again
    assert host.returncode == 0, host.stderr.decode()
    hrec = host.records()
    hosting, hsummary = hrec[0], hrec[-1]
    assert hosting["event"] == "hosting" and hosting["address"] == f"{SUBNET}.2:49152"
    assert hosting["browse_address"] == "0.0.0.0:30000"  # the documented port (spec §6.1)
    assert hosting["network_id"] == lan_network_id(f"{SUBNET}.2", 49152)
    param = bytes.fromhex(hosting["session_key_param"])
    assert hosting["session_key"] == lan_session_key(bytes.fromhex(KEY), param).hex()
    assert hsummary["stations_seen"] == [1, 2, 3]
    assert sorted(hsummary["received"]) == ["1", "2", "3"]
    assert hsummary["browse"]["answered"] >= 3
    joined_from = {r["address"]: r["constant_id"] for r in hrec if r["event"] == "station_joined"}
    assert joined_from == {f"{SUBNET}.{k}:49152": lan_constant_id(f"{SUBNET}.{k}", 49152) for k in (3, 4, 5)}
    indexes = set()
    for k, j in enumerate(joins, start=3):
        assert j.returncode == 0, j.stderr.decode()
        recs = j.records()
        joined, summary = recs[0], recs[-1]
        # Found by broadcast alone: the host address and the key came from the browse reply.
        assert joined["event"] == "joined" and joined["host"] == f"{SUBNET}.2:49152"
        assert joined["address"] == f"{SUBNET}.{k}:49152"
        assert joined["session_key"] == hosting["session_key"]
        me = summary["station_index"]
        indexes.add(me)
        others = sorted({0, 1, 2, 3} - {me})
        assert summary["stations_seen"] == others, recs
        assert sorted(int(s) for s in summary["received"]) == others
        assert min(summary["received"].values()) >= 3
        peers = {r["address"] for r in recs if r["event"] == "station_joined"}
        assert peers == {f"{SUBNET}.{n}:49152" for n in (2, 3, 4, 5) if n != k}
    assert indexes == {1, 2, 3}


async def test_one_browse_finds_hosts_in_two_namespaces() -> None:
    """Two hosts on separate (virtual) machines, one browse from a third: both answer the broadcast."""
    py = [sys.executable, "-m", "pianode", "lan"]
    with lan_segment() as segment:
        common = ["--game-key", KEY, "--broadcast", segment.broadcast]
        hosts = [
            CliProcess(segment.exec_argv(k, *py, "host", *common, "--address", segment.addresses[k], "--duration", "60",
                                         "--name", f"host{k}", "--send-every", "0"))
            for k in (0, 1)
        ]
        browse = segment.exec_argv(2, *py, "browse", *common, "--bind", f"{segment.addresses[2]}:0",
                                   "--timeout", "1", "--format", "jsonl")  # fmt: skip
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for h in hosts:
                    await nursery.start(h.run)
                await until(lambda: all(h.lines for h in hosts))  # both listen
                found = await trio.run_process(browse, capture_stdout=True, capture_stderr=True, check=False)
                for h in hosts:
                    h.stop()
    assert found.returncode == 0, found.stderr.decode()
    lines = [json.loads(line) for line in found.stdout.decode().splitlines()]
    assert lines[-1]["event"] == "summary" and lines[-1]["found"] == 2
    records = sorted((r for r in lines if r["event"] == "session"), key=lambda r: r["host_address"])
    assert [(r["host_address"], r["reply_from"].split(":")[0]) for r in records] == [
        (f"{SUBNET}.2", f"{SUBNET}.2"),
        (f"{SUBNET}.3", f"{SUBNET}.3"),
    ]
    assert [r["stations"][0]["username"] for r in records] == ["host0", "host1"]
    assert {r["network_id"] for r in records} == {lan_network_id(f"{SUBNET}.{k}", 49152) for k in (2, 3)}
    assert all(h.returncode == 0 for h in hosts)


def test_a_browse_that_cannot_reach_the_broadcast_address_says_so() -> None:
    """In a namespace whose LAN is 192.168.77.0/24, a browse or join left on the default 127.0.0.1 cannot send
    to 192.168.77.255: one line naming both addresses and the cause, exit 2 (before: "Invalid argument")."""
    import subprocess

    why = seg.netns_unavailable()
    if why:
        peer_unavailable(f"NETNS TEST NOT RUN: {why}")
    try:
        segment = seg.build(1, SUBNET)
    except seg.SegmentError as exc:
        peer_unavailable(f"NETNS TEST NOT RUN: namespaces work but the virtual LAN cannot be built: {exc}")
    try:
        lines = {}
        for command in ("browse", "join"):
            argv = segment.exec_argv(0, sys.executable, "-m", "pianode", "lan", command, "--game-key", KEY,
                                     "--broadcast", segment.broadcast, "--timeout", "1")  # fmt: skip
            done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)
            lines[command] = (done.returncode, done.stderr.splitlines())
    finally:
        seg.remove(segment.prefix)
    for command, (status, err) in lines.items():
        expected = (f"pianode lan {command}: cannot send the browse request from 127.0.0.1 to {segment.broadcast}:30000"
                    " (Invalid argument): the browse must go out from an address on that network")  # fmt: skip
        assert status == 2 and err == [expected], lines
