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

import functools
import importlib.util
import json
import pathlib
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import trio

from protocols.pia.keys import lan_constant_id, lan_network_id
from protocols.pia.lan import lan_session_key

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
        pytest.skip(f"NETNS TEST SKIPPED: {why}")
    try:
        segment = seg.build(4, SUBNET)
    except seg.SegmentError as exc:
        pytest.skip(f"NETNS TEST SKIPPED: namespaces work but the virtual LAN cannot be built: {exc}")
    try:
        yield segment
    finally:
        seg.remove(segment.prefix)


class _Proc:
    """A CLI process whose output lines are collected as they come, so the test can wait on them."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.lines: list[str] = []
        self.stderr = b""
        self.returncode: int | None = None
        self._process: trio.Process | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            start = functools.partial(trio.run_process, self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      check=False)  # fmt: skip
            process: trio.Process = await nursery.start(start)
            self._process = process
            task_status.started()
            assert process.stdout is not None and process.stderr is not None
            nursery.start_soon(self._read_stderr, process.stderr)
            pending = b""
            async for chunk in process.stdout:
                *done, pending = (pending + chunk).split(b"\n")
                self.lines.extend(line.decode() for line in done)
        self.returncode = process.returncode

    async def _read_stderr(self, stream: trio.abc.ReceiveStream) -> None:
        async for chunk in stream:
            self.stderr += chunk

    def stop(self) -> None:
        """SIGTERM (``ip netns exec`` execs the command, so the signal reaches pianode): summary, leave, exit."""
        assert self._process is not None
        if self._process.returncode is None:
            self._process.send_signal(signal.SIGTERM)

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines]

    def enough(self) -> bool:
        """Three messages from each of the three other stations."""
        got = Counter(r["source_index"] for r in self.records() if r["event"] == "data")
        return len(got) == 3 and min(got.values()) >= 3


async def _until(predicate: Callable[[], bool]) -> None:
    while not predicate():
        await trio.sleep(0.05)


async def _run_segment(segment: Any) -> tuple[_Proc, list[_Proc]]:
    """Host in node 1, joiners in nodes 2-4; SIGTERM once data flowed everywhere (--duration only bounds)."""
    py = [sys.executable, "-m", "pianode", "lan"]
    common = ["--game-key", KEY, "--broadcast", segment.broadcast, "--format", "jsonl", "--send-every", "0.2"]
    host = _Proc(segment.exec_argv(0, *py, "host", *common, "--address", segment.addresses[0], "--duration", "60"))
    joiners = [
        _Proc(segment.exec_argv(k, *py, "join", *common, "--bind", segment.addresses[k], "--duration", "60"))
        for k in range(1, 4)
    ]
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(host.run)
            await _until(lambda: bool(host.lines))
            for j in joiners:
                await nursery.start(j.run)
            await _until(lambda: all(p.enough() or p.returncode is not None for p in (host, *joiners)))
            for j in joiners:
                j.stop()
            await _until(lambda: all(j.returncode is not None for j in joiners))
            host.stop()
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
            _Proc(segment.exec_argv(k, *py, "host", *common, "--address", segment.addresses[k], "--duration", "60",
                                    "--name", f"host{k}", "--send-every", "0"))
            for k in (0, 1)
        ]
        browse = segment.exec_argv(2, *py, "browse", *common, "--bind", f"{segment.addresses[2]}:0",
                                   "--timeout", "1", "--format", "jsonl")  # fmt: skip
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                for h in hosts:
                    await nursery.start(h.run)
                await _until(lambda: all(h.lines for h in hosts))  # both listen
                found = await trio.run_process(browse, capture_stdout=True, capture_stderr=True, check=False)
                for h in hosts:
                    h.stop()
    assert found.returncode == 0, found.stderr.decode()
    records = sorted((json.loads(line) for line in found.stdout.decode().splitlines()), key=lambda r: r["host_address"])
    assert [(r["host_address"], r["reply_from"].split(":")[0]) for r in records] == [
        (f"{SUBNET}.2", f"{SUBNET}.2"),
        (f"{SUBNET}.3", f"{SUBNET}.3"),
    ]
    assert [r["stations"][0]["username"] for r in records] == ["host0", "host1"]
    assert {r["network_id"] for r in records} == {lan_network_id(f"{SUBNET}.{k}", 49152) for k in (2, 3)}
    assert all(h.returncode == 0 for h in hosts)
