#!/usr/bin/env python3
"""Soak test: S stations in one process, steady traffic over faulty loopback links, memory watched.

Examples::

    python scripts/soak.py                                   # 8 stations, 600 s, 5 % loss
    python scripts/soak.py --duration 120 --warmup 20 --json soak.json
    python scripts/soak.py --tracemalloc 8 --json soak.json  # also find what the heap grows by

Theory of operation
-------------------
Issue 6 asks that "a 10-minute soak of 8 stations at 5 % loss grows RSS by
under 5 %" and that reliable streams deliver exactly once and in order under
loss, duplication and reordering.  This script measures both, on the public
node API only (``pianode.mesh.node.open_node``, ``Node.send``/``broadcast``/
``stations``/``statistics``):

1. A :class:`pianode.sim.faults.FaultInjectingSocketFactory` is installed before
   any socket exists, so every datagram of every link (formation included) is
   lost, duplicated or held back by a deterministic per-packet hash.
2. Station *i* binds ``base + i`` (127.0.0.0/8 only), station 0 creates the
   mesh, the others join, and every station waits to see all the others.
3. Each station runs two paced loops until the traffic phase ends: at
   ``--unreliable-rate`` Hz one unreliable broadcast ``U|src|seq|time``, at
   ``--reliable-rate`` Hz one reliable message ``R|src|dst|seq|time`` to each
   other station, with its own sequence per (sender, receiver) pair.  Ticks
   are scheduled on absolute times (``sleep_until``), so the rate does not
   drift, and a tick more than one period late is counted.
4. Each receiver checks reliable sequences per sender: the expected number
   is delivered (exactly once, in order), a lower one is a duplicate, a higher
   one a gap.  Unreliable messages may be lost but never delivered twice; a
   bounded window of recent sequence numbers per sender checks that.  The
   harness keeps only counters and fixed-size windows, so its own memory is
   constant and the RSS measured is the nodes'.
5. A sampler records RSS (``VmRSS`` of ``/proc/self/status``) and, with
   ``--tracemalloc``, the traced Python heap every ``--sample-interval``
   seconds.  At the end of the warm-up and at the end of the traffic phase it
   first runs ``gc.collect()``; the growth between those two RSS readings,
   in percent, is the figure judged against the target.  With
   ``--tracemalloc`` it also takes a heap snapshot at both points and reports
   the allocation sites (file:line) that grew most.  Tracemalloc's own
   bookkeeping is in the RSS too, so judge RSS on a run without it.
6. After the traffic phase the senders stop and the run waits (bounded) for
   every reliable message to arrive, then collects drops by reason,
   retransmissions and the fault counters.

Every phase is bounded in time (formation, traffic, drain, and an overall
limit), and all traffic stays on loopback.
"""

from __future__ import annotations

import argparse
import array
import functools
import gc
import ipaddress
import json
import linecache
import math
import os
import resource
import random
import struct
import sys
import tempfile
import tracemalloc
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import trio

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

from pianode.mesh.config import NodeConfig
from pianode.mesh.events import DataReceived, HostChanged, MeshDestroyed, StationLeft
from pianode.sim.faults import FaultInjectingSocketFactory, LinkFaults
from pianode.mesh.node import JoinError, Node, open_node
from pianode.mesh.reliable import SendBufferFull, WindowFailed

__all__ = ["SoakOptions", "format_table", "main", "read_rss_kib", "run_soak"]

# b"R", source index, destination index, sequence (per pair), send time
_RELIABLE = struct.Struct(">cBBId")
# b"U", source index, sequence (per sender), send time
_UNRELIABLE = struct.Struct(">cBId")
# Unreliable sequence numbers remembered per sender, to catch a second delivery.
_DEDUP_WINDOW = 1024
# Upper bounds (ms) of the reliable-latency histogram; the last bucket is open.
_LATENCY_BUCKETS_MS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000)


@attrs.frozen(kw_only=True)
class SoakOptions:
    """Settings of one soak run (the CLI flags, one for one)."""

    stations: int = 8
    duration: float = 600.0  # seconds of traffic
    warmup: float = 60.0  # seconds of traffic before the reference memory reading
    sample_interval: float = 10.0
    loss: float = 0.05
    duplicate: float = 0.02
    reorder: float = 0.05
    seed: int = 1
    unreliable_rate: float = 10.0  # broadcasts per station per second
    reliable_rate: float = 2.0  # reliable messages per station and receiver per second
    payload: int = 64  # bytes per message (at least the header of the message kind)
    version: str = "5.18"
    base_address: str = "127.0.0.1"
    tracemalloc: int = 0  # frames per traceback; 0 = off
    top: int = 15  # growth sites reported
    drain_timeout: float = 20.0
    rss_target_pct: float = 5.0

    def validate(self) -> None:
        """Raise ValueError for settings the soak cannot run with."""
        if not 2 <= self.stations <= 32:
            raise ValueError(f"stations must be 2..32, got {self.stations}")
        if not 0 <= self.warmup < self.duration:
            raise ValueError(f"warm-up ({self.warmup} s) must be >= 0 and shorter than the duration ({self.duration} s)")
        if not self.sample_interval > 0:
            raise ValueError("sample interval must be > 0 seconds")
        if not (self.unreliable_rate > 0 and self.reliable_rate > 0):
            raise ValueError("message rates must be > 0 Hz")
        if not _RELIABLE.size <= self.payload <= 1024:
            raise ValueError(f"payload must be {_RELIABLE.size}..1024 bytes, got {self.payload}")
        if self.tracemalloc < 0 or self.top < 1 or self.drain_timeout <= 0:
            raise ValueError("tracemalloc frames >= 0, top >= 1 and drain timeout > 0 are required")
        try:
            first = ipaddress.IPv4Address(self.base_address)
        except ValueError:
            raise ValueError(f"base address {self.base_address!r} is not an IPv4 address") from None
        loopback = ipaddress.IPv4Network("127.0.0.0/8")
        if first not in loopback or first + (self.stations - 1) not in loopback or first == loopback[0]:
            raise ValueError("every station address must be in 127.0.0.1-127.255.255.255 (loopback only)")
        # The fault model validates its own probabilities.
        self.link_faults()

    def link_faults(self) -> LinkFaults:
        return LinkFaults(loss=self.loss, duplicate=self.duplicate, reorder=self.reorder, seed=self.seed)


def read_rss_kib() -> int | None:
    """Resident set size of this process in KiB (Linux ``/proc``), or None elsewhere."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except (OSError, ValueError):
        return None
    return None


@attrs.define
class _Receiver:
    """What one station saw: counters and fixed-size windows only."""

    expected: dict[int, int] = attrs.field(factory=dict)  # reliable: next sequence per sender
    delivered: int = 0
    duplicates: int = 0
    gaps: int = 0  # a sequence beyond the expected one (a loss or a reordering)
    misattributed: int = 0  # payload names another source or destination than the event
    latency_count: int = 0
    latency_sum: float = 0.0
    latency_max: float = 0.0
    latency_hist: list[int] = attrs.field(factory=lambda: [0] * (len(_LATENCY_BUCKETS_MS) + 1))
    u_delivered: int = 0
    u_duplicates: int = 0
    u_stale: int = 0  # older than the dedup window: cannot be judged
    u_highest: dict[int, int] = attrs.field(factory=dict)
    # Per sender, a ring of the last _DEDUP_WINDOW sequence numbers seen (slot
    # seq % window holds seq), allocated once at formation: a set of recent
    # numbers would grow with them and show up in the RSS being measured.
    u_ring: dict[int, array.array[int]] = attrs.field(factory=dict)
    other_events: list[str] = attrs.field(factory=list)


@attrs.define
class _Sender:
    next_seq: dict[int, int] = attrs.field(factory=dict)  # reliable, per receiver
    reliable_sent: int = 0
    buffer_full: int = 0
    send_failed: int = 0
    unreliable_seq: int = 0
    unreliable_sent: int = 0  # messages x receivers
    late_ticks: int = 0  # sent more than one period after their due time
    skipped_ticks: int = 0  # never sent: the loop was more than a period behind
    max_lag: float = 0.0


class _Soak:
    def __init__(self, options: SoakOptions, progress: Callable[[dict[str, Any]], None] | None = None) -> None:
        self.o = options
        self.progress = progress
        self.nodes: list[Node] = []
        self.index_of: dict[int, int] = {}  # id(node) -> station index
        self.receivers: dict[int, _Receiver] = {}  # station index -> state
        self.senders: dict[int, _Sender] = {}
        self.samples: list[dict[str, Any]] = []
        self.problems: list[str] = []
        self.memory: dict[str, Any] = {}
        self.formation_time: float | None = None
        self.traffic_start = 0.0
        self.traffic_end = 0.0
        self.cpu_start = 0.0
        self._snapshot_dir: tempfile.TemporaryDirectory[str] | None = None
        self._started_tracing = False

    # ------------------------------------------------------------------ run
    async def run(self) -> dict[str, Any]:
        o = self.o
        t0 = trio.current_time()
        formation_timeout = 10.0 + 0.5 * o.stations
        bound = formation_timeout + o.duration + o.drain_timeout + 30.0
        factory = FaultInjectingSocketFactory(o.link_faults())
        if o.tracemalloc and not tracemalloc.is_tracing():
            tracemalloc.start(o.tracemalloc)
            self._started_tracing = True
        self._snapshot_dir = tempfile.TemporaryDirectory(prefix="pianode-soak-")
        try:
            with trio.move_on_after(bound) as overall:
                async with factory:
                    factory.install()
                    async with trio.open_nursery() as nursery:
                        await self._main(nursery, formation_timeout)
                        nursery.cancel_scope.cancel()
            if overall.cancelled_caught:
                self.problems.append(f"the run exceeded its time bound of {bound:.0f} s")
            if self._started_tracing:
                tracemalloc.stop()
                self._started_tracing = False
            return self._report(factory, trio.current_time() - t0)
        finally:
            if self._started_tracing:
                tracemalloc.stop()
            self._snapshot_dir.cleanup()

    async def _main(self, nursery: trio.Nursery, formation_timeout: float) -> None:
        o = self.o
        rng = random.Random(o.seed)
        key = rng.randbytes(16)
        base = ipaddress.IPv4Address(o.base_address)
        for i in range(o.stations):
            cfg = NodeConfig(version=o.version, session_key=key, bind=(str(base + i), 0), seed=o.seed * 1000 + i)
            self.nodes.append(await nursery.start(self._run_node, cfg))
        if not await self._form(formation_timeout):
            return
        self.traffic_start = trio.current_time()
        self.cpu_start = _cpu_seconds()
        self.traffic_end = self.traffic_start + o.duration
        async with trio.open_nursery() as traffic:
            traffic.start_soon(self._sampler)
            for k, node in enumerate(self.nodes):
                offset = k / (len(self.nodes) * o.unreliable_rate)  # spread the stations over a period
                traffic.start_soon(self._unreliable_loop, node, offset)
                traffic.start_soon(self._reliable_loop, node, offset)
        await self._drain()
        self._check_mesh()

    async def _run_node(self, cfg: NodeConfig, *, task_status: trio.TaskStatus[Node] = trio.TASK_STATUS_IGNORED) -> None:
        async with open_node(cfg) as node:
            task_status.started(node)
            channel = node.events()
            # Drain what is queued after each wake-up: one receive() per event
            # would cost a scheduler pass each.
            async for first in channel:
                self._handle(node, first)
                while True:
                    try:
                        event = channel.receive_nowait()
                    except trio.WouldBlock:
                        break
                    except trio.EndOfChannel:
                        return  # the node stopped (at shutdown) while we were draining
                    self._handle(node, event)

    async def _form(self, timeout: float) -> bool:
        t0 = trio.current_time()
        host, rest = self.nodes[0], self.nodes[1:]
        with trio.move_on_after(timeout):
            await host.create_mesh()
            failed: list[str] = []
            try:
                async with trio.open_nursery() as joins:
                    for node in rest:
                        joins.start_soon(node.join, host.address)
            except BaseExceptionGroup as group:  # (not except*: Python 3.10 has no such syntax)
                joins_failed, rest = group.split(JoinError)
                if rest is not None:
                    raise rest from None
                if joins_failed is not None:
                    failed.extend(f"join failed: {exc}" for exc in joins_failed.exceptions)
            if failed:
                self.problems.extend(failed)
                return False
            want = len(self.nodes) - 1
            for node in self.nodes:
                remaining = t0 + timeout - trio.current_time()
                if not await node.wait_connected(want, timeout=max(0.0, remaining)):
                    break
            else:
                self.formation_time = trio.current_time() - t0
        if self.formation_time is None:
            self.problems.append(f"the mesh did not form within {timeout:.0f} s")
            return False
        for node in self.nodes:
            index = node.station_index
            assert index is not None
            self.index_of[id(node)] = index
            self.receivers[index] = _Receiver()
            self.senders[index] = _Sender()
        if len(self.receivers) != len(self.nodes):
            self.problems.append("station indexes are not distinct")
            return False
        # Every per-sender structure exists before the traffic starts, so the
        # harness allocates nothing that lasts once it runs.
        for me, rx in self.receivers.items():
            for src in self.receivers:
                if src != me:
                    rx.expected[src] = 0
                    rx.u_highest[src] = -1
                    rx.u_ring[src] = array.array("q", [-1]) * _DEDUP_WINDOW
        for src, tx in self.senders.items():
            tx.next_seq = dict.fromkeys((dst for dst in self.receivers if dst != src), 0)
        return True

    # ------------------------------------------------------------------ traffic
    def _targets(self, node: Node) -> list[int]:
        me = self.index_of[id(node)]
        return sorted(i for i in self.receivers if i != me)

    async def _unreliable_loop(self, node: Node, offset: float) -> None:
        o = self.o
        src = self.index_of[id(node)]
        state = self.senders[src]
        period = 1.0 / o.unreliable_rate
        pad = bytes(o.payload - _UNRELIABLE.size)
        tick = 0
        while True:
            due = self.traffic_start + offset + tick * period
            if due >= self.traffic_end:
                return
            await trio.sleep_until(due)
            now = self._lag(state, due, period)
            data = _UNRELIABLE.pack(b"U", src, state.unreliable_seq & 0xFFFFFFFF, now) + pad
            state.unreliable_seq += 1
            state.unreliable_sent += await node.broadcast(data, reliable=False)
            tick = self._next_tick(state, tick, self.traffic_start + offset, period)

    async def _reliable_loop(self, node: Node, offset: float) -> None:
        o = self.o
        src = self.index_of[id(node)]
        state = self.senders[src]
        targets = self._targets(node)
        period = 1.0 / o.reliable_rate
        pad = bytes(o.payload - _RELIABLE.size)
        tick = 0
        while True:
            due = self.traffic_start + offset + tick * period
            if due >= self.traffic_end:
                return
            await trio.sleep_until(due)
            now = self._lag(state, due, period)
            for dst in targets:
                seq = state.next_seq.get(dst, 0)
                try:
                    await node.send(dst, _RELIABLE.pack(b"R", src, dst, seq, now) + pad, reliable=True)
                except SendBufferFull:
                    state.buffer_full += 1  # the same sequence number goes next tick
                    continue
                except (KeyError, WindowFailed) as exc:
                    state.send_failed += 1
                    if state.send_failed == 1:
                        self.problems.append(f"station {src} could not send to {dst}: {exc!r}")
                    continue
                state.next_seq[dst] = seq + 1
                state.reliable_sent += 1
            tick = self._next_tick(state, tick, self.traffic_start + offset, period)

    @staticmethod
    def _next_tick(state: _Sender, tick: int, base: float, period: float) -> int:
        """The next tick to send: a loop that fell behind skips to the latest due tick
        (counted) instead of sending a backlog, so a slow process keeps its rate and
        its time bound."""
        latest_due = math.floor((trio.current_time() - base) / period)
        if latest_due > tick + 1:
            state.skipped_ticks += latest_due - tick - 1
            return latest_due
        return tick + 1

    @staticmethod
    def _lag(state: _Sender, due: float, period: float) -> float:
        now = trio.current_time()
        lag = now - due
        state.max_lag = max(state.max_lag, lag)
        if lag > period:
            state.late_ticks += 1
        return now

    def _handle(self, node: Node, event: object) -> None:
        me = self.index_of.get(id(node))
        if me is None:
            return  # formation events, before the traffic starts
        rx = self.receivers[me]
        if isinstance(event, DataReceived):
            data = event.data
            kind = data[:1]
            if kind == b"R" and event.reliable and len(data) >= _RELIABLE.size:
                _, src, dst, seq, sent = _RELIABLE.unpack_from(data)
                if src != event.source_index or dst != me:
                    rx.misattributed += 1
                    return
                want = rx.expected.get(src, 0)
                if seq == want:
                    rx.delivered += 1
                    rx.expected[src] = want + 1
                    self._latency(rx, trio.current_time() - sent)
                elif seq < want:
                    rx.duplicates += 1
                else:
                    rx.gaps += 1
                    rx.expected[src] = seq + 1
            elif kind == b"U" and not event.reliable and len(data) >= _UNRELIABLE.size:
                _, src, seq, _sent = _UNRELIABLE.unpack_from(data)
                if src != event.source_index:
                    rx.misattributed += 1
                    return
                self._unreliable(rx, src, seq)
            else:
                rx.misattributed += 1
        elif isinstance(event, (StationLeft, HostChanged, MeshDestroyed)):
            if len(rx.other_events) < 32:
                rx.other_events.append(f"station {me}: {event!r}")

    @staticmethod
    def _latency(rx: _Receiver, seconds: float) -> None:
        rx.latency_count += 1
        rx.latency_sum += seconds
        rx.latency_max = max(rx.latency_max, seconds)
        ms = seconds * 1000.0
        for i, bound in enumerate(_LATENCY_BUCKETS_MS):
            if ms <= bound:
                rx.latency_hist[i] += 1
                return
        rx.latency_hist[-1] += 1

    @staticmethod
    def _unreliable(rx: _Receiver, src: int, seq: int) -> None:
        ring = rx.u_ring.get(src)
        if ring is None:
            rx.misattributed += 1  # not a member at formation
            return
        if seq <= rx.u_highest[src] - _DEDUP_WINDOW:
            rx.u_stale += 1
            return
        slot = seq % _DEDUP_WINDOW
        if ring[slot] == seq:
            rx.u_duplicates += 1
            return
        ring[slot] = seq
        rx.u_delivered += 1
        if seq > rx.u_highest[src]:
            rx.u_highest[src] = seq

    # ------------------------------------------------------------------ memory
    async def _sampler(self) -> None:
        o = self.o
        warm_at = self.traffic_start + o.warmup
        k = 0
        warm_done = False
        while True:
            due = self.traffic_start + k * o.sample_interval
            if not warm_done and warm_at <= due:
                # The reference reading, exactly at the end of the warm-up.
                await trio.sleep_until(warm_at)
                self.memory["warmup"] = self._reference("warmup")
                warm_done = True
                continue
            if due >= self.traffic_end:
                break
            await trio.sleep_until(due)
            self._sample()
            k += 1
        await trio.sleep_until(self.traffic_end)
        self.memory["end"] = self._reference("end")

    def _sample(self, label: str | None = None) -> dict[str, Any]:
        row: dict[str, Any] = {
            "t": round(trio.current_time() - self.traffic_start, 3),
            "rss_kib": read_rss_kib(),
            "reliable_delivered": sum(r.delivered for r in self.receivers.values()),
            "unreliable_delivered": sum(r.u_delivered for r in self.receivers.values()),
            "gc_objects": len(gc.get_objects()),
            # Live pymalloc blocks: a cheap heap-growth indicator without tracemalloc.
            "allocated_blocks": sys.getallocatedblocks(),
        }
        if tracemalloc.is_tracing():
            current, peak = tracemalloc.get_traced_memory()
            row["heap_kib"] = current // 1024
            row["heap_peak_kib"] = peak // 1024
        if label is not None:
            row["label"] = label
        self.samples.append(row)
        if self.progress is not None:
            self.progress(row)
        return row

    def _reference(self, label: str) -> dict[str, Any]:
        gc.collect()
        row = self._sample(label)
        if tracemalloc.is_tracing():
            assert self._snapshot_dir is not None
            # Kept on disk, not in memory, so the first snapshot is not part of the RSS at the end.
            path = os.path.join(self._snapshot_dir.name, f"{label}.snapshot")
            tracemalloc.take_snapshot().dump(path)
            self.memory[f"{label}_snapshot"] = path
        return row

    def _growth_sites(self) -> list[dict[str, Any]]:
        before_path = self.memory.pop("warmup_snapshot", None)
        after_path = self.memory.pop("end_snapshot", None)
        if before_path is None or after_path is None:
            return []
        ignore = [
            tracemalloc.Filter(False, tracemalloc.__file__),
            tracemalloc.Filter(False, linecache.__file__),
            tracemalloc.Filter(False, "<frozen importlib._bootstrap>"),
            tracemalloc.Filter(False, "<frozen importlib._bootstrap_external>"),
            tracemalloc.Filter(False, "<unknown>"),
        ]
        before = tracemalloc.Snapshot.load(before_path).filter_traces(ignore)
        after = tracemalloc.Snapshot.load(after_path).filter_traces(ignore)
        sites = []
        for stat in after.compare_to(before, "lineno")[: self.o.top]:
            frame = stat.traceback[0]
            sites.append(
                {
                    "where": f"{_short(frame.filename)}:{frame.lineno}",
                    "source": linecache.getline(frame.filename, frame.lineno).strip(),
                    "size_diff_kib": round(stat.size_diff / 1024, 1),
                    "count_diff": stat.count_diff,
                    "size_kib": round(stat.size / 1024, 1),
                    "count": stat.count,
                }
            )
        if self.o.tracemalloc > 1:
            for i, stat in enumerate(after.compare_to(before, "traceback")[:5]):
                # Oldest call first; the last frame is where the memory was allocated.
                stack = [f"{_short(f.filename)}:{f.lineno}" for f in stat.traceback]
                sites.append({"rank": i + 1, "size_diff_kib": round(stat.size_diff / 1024, 1), "count_diff": stat.count_diff, "traceback": stack})
        return sites

    # ------------------------------------------------------------------ ending
    async def _drain(self) -> None:
        """Wait (bounded) until every reliable message sent has been delivered."""
        with trio.move_on_after(self.o.drain_timeout):
            while self._reliable_delivered() < self._reliable_sent():
                await trio.sleep(0.05)

    def _reliable_sent(self) -> int:
        return sum(s.reliable_sent for s in self.senders.values())

    def _reliable_delivered(self) -> int:
        return sum(r.delivered for r in self.receivers.values())

    def _check_mesh(self) -> None:
        want = len(self.nodes) - 1
        for node in self.nodes:
            connected = sum(1 for s in node.stations() if s.state == "connected")
            if connected != want:
                self.problems.append(f"station {self.index_of.get(id(node))} sees {connected} of {want} stations connected")

    def _report(self, factory: FaultInjectingSocketFactory, wall: float) -> dict[str, Any]:
        o = self.o
        rx = list(self.receivers.values())
        tx = list(self.senders.values())
        # Pairs whose receiver is behind the sender: messages never delivered.
        missing = 0
        for src, sender in self.senders.items():
            for dst, sent in sender.next_seq.items():
                missing += max(0, sent - self.receivers[dst].expected.get(src, 0))
        reliable = {
            "sent": self._reliable_sent(),
            "delivered": self._reliable_delivered(),
            "duplicates": sum(r.duplicates for r in rx),
            "gaps": sum(r.gaps for r in rx),
            "missing": missing,
            "misattributed": sum(r.misattributed for r in rx),
            "send_buffer_full": sum(s.buffer_full for s in tx),
            "send_failed": sum(s.send_failed for s in tx),
            "latency_ms": _latency_summary(rx),
        }
        reliable["exactly_once_in_order"] = bool(
            reliable["sent"] > 0
            and reliable["delivered"] == reliable["sent"]
            and not (reliable["duplicates"] or reliable["gaps"] or missing or reliable["misattributed"])
        )
        u_sent = sum(s.unreliable_sent for s in tx)
        u_delivered = sum(r.u_delivered for r in rx)
        unreliable = {
            "sent": u_sent,
            "delivered": u_delivered,
            "delivered_pct": round(100.0 * u_delivered / u_sent, 2) if u_sent else 0.0,
            "duplicates": sum(r.u_duplicates for r in rx),
            "stale": sum(r.u_stale for r in rx),
        }
        drops: dict[str, int] = {}
        counters: dict[str, int] = {}
        data_retransmissions = 0
        for node in self.nodes:
            if node.session is None:
                continue
            stats = node.statistics()
            for reason, n in dict(stats["drops"]).items():  # type: ignore[call-overload]
                drops[reason] = drops.get(reason, 0) + n
            for name, n in dict(stats["counters"]).items():  # type: ignore[call-overload]
                counters[name] = counters.get(name, 0) + n
            for extra in ("events_dropped", "send_errors"):
                value = int(stats.get(extra, 0))  # type: ignore[call-overload]
                if value:
                    drops[extra] = drops.get(extra, 0) + value
            data_retransmissions += sum(s.lost for s in node.stations() if not s.is_self)
        retransmissions = {
            "reliable_data": data_retransmissions,
            "station_protocol": counters.get("retransmissions", 0),
        }
        memory = self._memory_figures()
        events = [e for r in rx for e in r.other_events]
        problems = list(self.problems)
        if events:
            problems.append(f"{len(events)} station/host events during the soak (first: {events[0]})")
        verdicts = [
            {
                "name": "RSS growth, end of warm-up to end",
                "value": memory.get("rss_growth_pct"),
                "unit": "%",
                "target": f"< {o.rss_target_pct:g} %",
                "passed": memory.get("rss_passed", False),
            },
            {
                "name": "reliable delivered exactly once, in order",
                "value": reliable["delivered"],
                "unit": f"of {reliable['sent']}",
                "target": "all, no duplicate or gap",
                "passed": reliable["exactly_once_in_order"],
            },
            {
                "name": "unreliable never delivered twice",
                "value": unreliable["duplicates"],
                "unit": "duplicates",
                "target": "0",
                "passed": unreliable["duplicates"] == 0,
            },
        ]
        return {
            "options": attrs.asdict(o),
            "formation_time": self.formation_time,
            "wall_time": round(wall, 3),
            # Process CPU over traffic and drain, in % of one core (2 cores here = 200 %).
            "cpu_percent": round(100.0 * (_cpu_seconds() - self.cpu_start) / max(1e-9, trio.current_time() - self.traffic_start), 1)
            if self.traffic_start
            else None,
            "traffic_seconds": o.duration,
            "samples": self.samples,
            "memory": memory,
            "reliable": reliable,
            "unreliable": unreliable,
            "retransmissions": retransmissions,
            "drops": dict(sorted(drops.items())),
            "counters": dict(sorted(counters.items())),
            "faults": factory.statistics().as_dict(),
            "scheduling": {
                "late_ticks": sum(s.late_ticks for s in tx),
                "skipped_ticks": sum(s.skipped_ticks for s in tx),
                "max_tick_lag_ms": round(max((s.max_lag for s in tx), default=0.0) * 1000, 2),
            },
            "events": events,
            "verdicts": verdicts,
            "problems": problems,
            "ok": all(v["passed"] for v in verdicts) and not problems,
        }

    def _memory_figures(self) -> dict[str, Any]:
        o = self.o
        warm = self.memory.get("warmup")
        end = self.memory.get("end")
        out: dict[str, Any] = {"target_pct": o.rss_target_pct, "tracemalloc_frames": o.tracemalloc}
        if warm is None or end is None:
            return out
        out["rss_warmup_kib"] = warm["rss_kib"]
        out["rss_end_kib"] = end["rss_kib"]
        rss = [s["rss_kib"] for s in self.samples if s["rss_kib"] is not None]
        out["rss_max_kib"] = max(rss) if rss else None
        if warm["rss_kib"] and end["rss_kib"] is not None:
            growth = 100.0 * (end["rss_kib"] - warm["rss_kib"]) / warm["rss_kib"]
            out["rss_growth_pct"] = round(growth, 3)
            out["rss_passed"] = growth < o.rss_target_pct
        after = [(s["t"], s["rss_kib"]) for s in self.samples if s["t"] >= o.warmup and s["rss_kib"] is not None]
        out["rss_slope_kib_per_min"] = _slope_per_minute(after)
        out["gc_objects_warmup"] = warm["gc_objects"]
        out["gc_objects_end"] = end["gc_objects"]
        out["allocated_blocks_warmup"] = warm["allocated_blocks"]
        out["allocated_blocks_end"] = end["allocated_blocks"]
        if "heap_kib" in warm and "heap_kib" in end:
            out["heap_warmup_kib"] = warm["heap_kib"]
            out["heap_end_kib"] = end["heap_kib"]
            if warm["heap_kib"]:
                out["heap_growth_pct"] = round(100.0 * (end["heap_kib"] - warm["heap_kib"]) / warm["heap_kib"], 3)
            heap = [(s["t"], s["heap_kib"]) for s in self.samples if s["t"] >= o.warmup and "heap_kib" in s]
            out["heap_slope_kib_per_min"] = _slope_per_minute(heap)
            out["growth_sites"] = self._growth_sites()
            out["note"] = "tracemalloc was on: its own bookkeeping is part of the RSS; judge RSS on a run without it"
        return out


def _cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _short(filename: str) -> str:
    """A path relative to the checkout or site-packages, for readable reports."""
    for marker in ("/site-packages/", "/lib/python"):
        if marker in filename:
            return filename.split(marker, 1)[1]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    return os.path.relpath(filename, root) if filename.startswith(root) else filename


def _slope_per_minute(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of (seconds, KiB) points, in KiB per minute."""
    if len(points) < 2:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    den = sum((t - mt) ** 2 for t, _ in points)
    if den == 0:
        return None
    return round(60.0 * sum((t - mt) * (v - mv) for t, v in points) / den, 2)


def _latency_summary(rx: Sequence[_Receiver]) -> dict[str, Any]:
    count = sum(r.latency_count for r in rx)
    if not count:
        return {"count": 0}
    hist = [sum(r.latency_hist[i] for r in rx) for i in range(len(_LATENCY_BUCKETS_MS) + 1)]

    def upper(p: float) -> str:
        target, seen = p / 100.0 * count, 0
        for i, n in enumerate(hist):
            seen += n
            if seen >= target:
                return f"<= {_LATENCY_BUCKETS_MS[i]}" if i < len(_LATENCY_BUCKETS_MS) else f"> {_LATENCY_BUCKETS_MS[-1]}"
        return "?"

    return {
        "count": count,
        "mean": round(1000.0 * sum(r.latency_sum for r in rx) / count, 2),
        "max": round(1000.0 * max(r.latency_max for r in rx), 2),
        "p50_bucket": upper(50),
        "p99_bucket": upper(99),
    }


async def run_soak(
    options: SoakOptions, *, progress: Callable[[dict[str, Any]], None] | None = None
) -> dict[str, Any]:
    """Run one soak inside the current Trio run and return its report (see :func:`format_table`).

    *progress*, if given, is called with every memory sample as it is taken.
    """
    options.validate()
    return await _Soak(options, progress).run()


def format_table(report: dict[str, Any]) -> str:
    """The report as the plain-text table the CLI prints."""
    o = report["options"]
    m = report["memory"]
    r = report["reliable"]
    u = report["unreliable"]
    lines = [
        f"soak: {o['stations']} stations, Pia {o['version']}, {o['duration']:g} s of traffic "
        f"(warm-up {o['warmup']:g} s), loss {o['loss']:.0%} dup {o['duplicate']:.0%} reorder {o['reorder']:.0%}, "
        f"seed {o['seed']}",
        f"formation {report['formation_time'] or 0:.2f} s, wall time {report['wall_time']:.1f} s, "
        f"CPU {report['cpu_percent']} % of a core",
        "",
        f"{'t (s)':>8} {'RSS (KiB)':>10} {'heap (KiB)':>11} {'objects':>9} {'blocks':>9} {'reliable':>9} {'unreliable':>11}",
    ]
    for s in report["samples"]:
        heap = s.get("heap_kib", "-")
        tag = f"  <- {s['label']}" if "label" in s else ""
        lines.append(
            f"{s['t']:>8.1f} {s['rss_kib'] if s['rss_kib'] is not None else '-':>10} {heap:>11} "
            f"{s['gc_objects']:>9} {s['allocated_blocks']:>9} {s['reliable_delivered']:>9} {s['unreliable_delivered']:>11}{tag}"
        )
    lines += [
        "",
        f"memory: RSS {m.get('rss_warmup_kib')} -> {m.get('rss_end_kib')} KiB (max {m.get('rss_max_kib')}), "
        f"slope after warm-up {m.get('rss_slope_kib_per_min')} KiB/min",
    ]
    if "heap_warmup_kib" in m:
        lines.append(
            f"python heap: {m['heap_warmup_kib']} -> {m['heap_end_kib']} KiB "
            f"({m.get('heap_growth_pct')} %), slope {m.get('heap_slope_kib_per_min')} KiB/min"
        )
    lines.append(
        f"reliable: sent {r['sent']}, delivered {r['delivered']}, duplicates {r['duplicates']}, gaps {r['gaps']}, "
        f"missing {r['missing']}, send buffer full {r['send_buffer_full']}; latency {r['latency_ms']}"
    )
    lines.append(
        f"unreliable: sent {u['sent']}, delivered {u['delivered']} ({u['delivered_pct']} %), duplicates {u['duplicates']}"
    )
    lines.append(f"retransmissions: {report['retransmissions']}")
    lines.append(f"drops by reason: {report['drops']}")
    lines.append(f"faults: {report['faults']}")
    lines.append(f"scheduling: {report['scheduling']}")
    sites = m.get("growth_sites") or []
    if sites:
        lines += ["", "heap growth by allocation site (warm-up -> end):"]
        for site in sites:
            if "where" in site:
                lines.append(
                    f"  {site['size_diff_kib']:>+9.1f} KiB {site['count_diff']:>+8} blocks  {site['where']}  {site['source']}"
                )
            else:
                lines.append(f"  #{site['rank']} {site['size_diff_kib']:+.1f} KiB {site['count_diff']:+} blocks (oldest call first):")
                lines += [f"      {frame}" for frame in site["traceback"]]
    lines += ["", f"{'figure':<45} {'value':>14} {'target':>26}  verdict"]
    for v in report["verdicts"]:
        value = "-" if v["value"] is None else f"{v['value']} {v['unit']}"
        lines.append(f"{v['name']:<45} {value:>14} {v['target']:>26}  {'PASS' if v['passed'] else 'FAIL'}")
    for p in report["problems"]:
        lines.append(f"problem: {p}")
    lines.append("OK" if report["ok"] else "NOT OK")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    d = SoakOptions()
    p = argparse.ArgumentParser(prog="soak.py", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("-n", "--stations", type=int, default=d.stations, help="stations in the mesh (default %(default)s)")
    p.add_argument("--duration", type=float, default=d.duration, help="seconds of traffic (default %(default)s)")
    p.add_argument("--warmup", type=float, default=d.warmup, help="seconds before the reference reading (default %(default)s)")
    p.add_argument("--sample-interval", type=float, default=d.sample_interval, help="seconds between samples (default %(default)s)")
    p.add_argument("--loss", type=float, default=d.loss, help="loss probability per datagram (default %(default)s)")
    p.add_argument("--dup", type=float, default=d.duplicate, help="duplication probability (default %(default)s)")
    p.add_argument("--reorder", type=float, default=d.reorder, help="reordering probability (default %(default)s)")
    p.add_argument("--seed", type=int, default=d.seed, help="seed of faults, ids and key (default %(default)s)")
    p.add_argument("--unreliable-rate", type=float, default=d.unreliable_rate, help="broadcasts/s per station (default %(default)s)")
    p.add_argument("--reliable-rate", type=float, default=d.reliable_rate, help="reliable messages/s per pair (default %(default)s)")
    p.add_argument("--payload", type=int, default=d.payload, help="bytes per message (default %(default)s)")
    p.add_argument("--version", default=d.version, help="Pia version (default %(default)s)")
    p.add_argument("--base-address", default=d.base_address, help="address of station 0; loopback only (default %(default)s)")
    p.add_argument("--tracemalloc", type=int, default=d.tracemalloc, metavar="FRAMES", help="trace the heap with this many frames (0 = off)")
    p.add_argument("--top", type=int, default=d.top, help="growth sites to report (default %(default)s)")
    p.add_argument("--drain-timeout", type=float, default=d.drain_timeout, help="seconds to wait for the last reliable messages")
    p.add_argument("--rss-target", type=float, default=d.rss_target_pct, help="RSS growth target in %% (default %(default)s)")
    p.add_argument("--json", metavar="FILE", help="also write the report as JSON")
    return p


def options_from_args(args: argparse.Namespace) -> SoakOptions:
    return SoakOptions(
        stations=args.stations,
        duration=args.duration,
        warmup=args.warmup,
        sample_interval=args.sample_interval,
        loss=args.loss,
        duplicate=args.dup,
        reorder=args.reorder,
        seed=args.seed,
        unreliable_rate=args.unreliable_rate,
        reliable_rate=args.reliable_rate,
        payload=args.payload,
        version=args.version,
        base_address=args.base_address,
        tracemalloc=args.tracemalloc,
        top=args.top,
        drain_timeout=args.drain_timeout,
        rss_target_pct=args.rss_target,
    )


def main(argv: list[str] | None = None) -> int:
    """CLI entry: 0 when every verdict passed, 1 when one failed, 2 for bad settings."""
    args = _parser().parse_args(argv)
    options = options_from_args(args)
    try:
        options.validate()
    except ValueError as exc:
        print(f"soak.py: {exc}", file=sys.stderr)
        return 2
    def progress(row: dict[str, Any]) -> None:
        heap = f" heap {row['heap_kib']} KiB" if "heap_kib" in row else ""
        label = f" ({row['label']})" if "label" in row else ""
        print(
            f"t={row['t']:.0f} s RSS {row['rss_kib']} KiB{heap} blocks {row['allocated_blocks']} "
            f"reliable {row['reliable_delivered']}{label}",
            file=sys.stderr,
            flush=True,
        )

    report = trio.run(functools.partial(run_soak, options, progress=progress))
    print(format_table(report), flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f, indent=2)
            f.write("\n")
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
