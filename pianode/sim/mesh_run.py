"""A scripted multi-node run on loopback: the engine behind ``pianode mesh`` and the benchmarks.

:class:`MeshRun` starts N nodes in one Trio run (node *i* on ``base_address + i``),
forms a mesh, exchanges numbered reliable and unreliable messages (or, with
``rate``, one game-state frame per station per tick), optionally makes the host
leave to exercise migration, and returns a :class:`MeshRunResult` whose
``summary()`` is what the CLI prints.  It checks the delivery guarantees it
reports: every reliable message exactly once and in order per sender.
"""

from __future__ import annotations

import array
import collections
import contextlib
import functools
import gc
import ipaddress
import logging
import math
import os
import random
import socket as stdlib_socket
import struct
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import attrs
import trio

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

from pianode.mesh.config import NodeConfig
from pianode.mesh.events import DataReceived, HostChanged, StationJoined, StationLeft
from pianode.sim.faults import LinkFaults
from pianode.sim.scheduling import MODES, RealtimeClass
from pianode.mesh.node import JoinError, Node

__all__ = ["LanMeshRun", "MeshRun", "MeshRunResult", "write_record"]

_log = logging.getLogger("pianode.mesh")  # -v: stations joining and leaving, host changes

_RELIABLE = struct.Struct(">cBI")  # b"R", source index, sequence
_FRAME = struct.Struct(">cBId")  # b"F", source index, frame number, send time
#: The one unreliable message each station sends to every station before a real-time session's clock starts.
_WARM_UP = b"W" + bytes(61)


LOOPBACK_BROADCAST = "127.255.255.255"


@contextlib.contextmanager
def _frozen_heap(enabled: bool) -> Iterator[None]:
    """Keep the objects alive now (nodes, sessions, tables) out of the cyclic collector's scans.

    A real-time session allocates steadily, which triggers full collections;
    each scans every tracked object of 32 formed stations (tens of ms here),
    and a pause that long makes the frames of several ticks late.  Frozen
    objects are skipped by those scans.  For the process that owns the run
    (``pianode mesh``, ``pianode bench``); undone when the session ends.
    """
    if not enabled:
        yield
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _free_broadcast_port() -> int:
    """A UDP port free on 0.0.0.0 for the session's group broadcasts (every station binds it with SO_REUSEADDR)."""
    probe = stdlib_socket.socket(stdlib_socket.AF_INET, stdlib_socket.SOCK_DGRAM)
    try:
        probe.setsockopt(stdlib_socket.SOL_SOCKET, stdlib_socket.SO_REUSEADDR, 1)
        probe.bind(("0.0.0.0", 0))
        return int(probe.getsockname()[1])
    finally:
        probe.close()


@attrs.define
class _Receiver:
    expected: dict[int, int] = attrs.field(factory=dict)
    delivered: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    unreliable: int = 0
    #: Each frame's latency as it arrived, in one flat array (8 bytes a frame, no object kept per frame:
    #: a session of 32 stations at 60 Hz hears 59,520 frames a second).
    latencies: array.array = attrs.field(factory=lambda: array.array("d"))
    #: Scheduled times of the frames that arrived late (for the timeline of late frames).
    late_due: list[float] = attrs.field(factory=list)
    #: Warm-up messages heard (one from each station before the frame clock starts).
    warm_ups: int = 0

    @property
    def frames(self) -> int:
        """Frames heard (each has its latency)."""
        return len(self.latencies)


@attrs.define
class MeshRunResult:
    version: str
    network: str
    nodes: int
    formation_time: float | None = None
    #: How joiners found the host: "matchmaking hand-off", "LAN discovery" or "LDN discovery".
    formation: str = "matchmaking hand-off"
    host_index: int | None = None
    stations: list[dict[str, Any]] = attrs.field(factory=list)
    reliable_expected: int = 0
    reliable_delivered: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    unreliable_sent: int = 0
    unreliable_delivered: int = 0
    frames_expected: int = 0
    frames_delivered: int = 0
    latencies: list[float] = attrs.field(factory=list)
    late_threshold: float = 0.050
    #: Real-time session: when the frame clock started, and the scheduled times of late frames.
    session_start: float | None = None
    late_due: list[float] = attrs.field(factory=list)
    #: Real-time session: process CPU time / wall time while frames were sent (None otherwise).
    cpu_load: float | None = None
    #: Real-time session: process CPU seconds while frames were sent, summed over the processes of a split
    #: run (None otherwise).
    cpu_time: float | None = None
    #: Real-time session: the frame clock's wall time until its last frame went out over the time the
    #: schedule gives it (1.0: every tick on time; more: it fell behind), the slowest process's of a split run.
    clock_pace: float | None = None
    #: Real-time session: warm-up messages heard before the clock started, and sent (one per stream).
    warm_up: tuple[int, int] | None = None
    host_changes: list[str] = attrs.field(factory=list)
    drops: dict[str, int] = attrs.field(factory=dict)
    faults: dict[str, int] = attrs.field(factory=dict)
    problems: list[str] = attrs.field(factory=list)
    record: dict[str, Any] | None = None
    wall_time: float = 0.0
    indexes: dict[int, int] = attrs.field(factory=dict)
    host_views: list[int | None] = attrs.field(factory=list)

    #: Real-time session: the share of frames that must arrive within ``late_threshold`` (percent).
    on_time_target_pct: float = 99.0
    #: How many processes ran the stations (:mod:`pianode.sim.mesh_procs`); CPU load sums them.
    processes: int = 1
    #: The core each of those processes kept to, in order (None: the OS moved them as it saw fit).
    cores: list[int] | None = None
    #: Real-time session: each station process's scheduling class while frames were sent
    #: (:meth:`pianode.sim.scheduling.RealtimeClass.as_dict`), in process order.
    scheduling: list[dict[str, Any]] = attrs.field(factory=list)

    @property
    def on_time_pct(self) -> float | None:
        """Real-time session: frames delivered within ``late_threshold``, in percent of those expected."""
        if not self.frames_expected:
            return None
        late = sum(1 for x in self.latencies if x > self.late_threshold)
        return 100.0 * (self.frames_delivered - late) / self.frames_expected

    @property
    def late(self) -> bool:
        """A real-time session that missed its latency target (fewer than ``on_time_target_pct`` on time)."""
        pct = self.on_time_pct
        return pct is not None and pct < self.on_time_target_pct

    @property
    def ok(self) -> bool:
        return not self.problems and not self.late

    @property
    def verdict(self) -> str:
        """OK, LATE (everything arrived, but too many frames late) or FAILED."""
        return "FAILED" if self.problems else "LATE" if self.late else "OK"

    def check_delivery(self) -> None:
        """Add a problem for every broken delivery guarantee (reliable: exactly once, in order)."""
        if self.reliable_delivered != self.reliable_expected:
            self.problems.append(f"reliable messages delivered {self.reliable_delivered} of {self.reliable_expected}")
        if self.duplicates:
            self.problems.append(f"{self.duplicates} reliable messages delivered twice")
        if self.out_of_order:
            self.problems.append(f"{self.out_of_order} reliable messages out of order")

    def late_by_second(self) -> dict[int, int]:
        """Late frames by the second of the session they were scheduled in (only seconds with any):
        a few seconds with many tell a stall of the process or machine from load spread over the run."""
        if self.session_start is None:
            return {}
        counts = collections.Counter(int(due - self.session_start) for due in self.late_due)
        return dict(sorted(counts.items()))

    def summary(self) -> dict[str, Any]:
        lat = sorted(self.latencies)

        def pct(p: float) -> float:
            if not lat:
                return 0.0
            return lat[min(len(lat) - 1, int(p / 100 * len(lat)))] * 1000

        late = sum(1 for x in lat if x > self.late_threshold)
        out: dict[str, Any] = {
            "version": self.version,
            "network": self.network,
            "nodes": self.nodes,
            "formation_time": self.formation_time,
            "formation": self.formation,
            "host_index": self.host_index,
            "stations": self.stations,
            "reliable": {
                "expected": self.reliable_expected,
                "delivered": self.reliable_delivered,
                "duplicates": self.duplicates,
                "out_of_order": self.out_of_order,
            },
            "unreliable": {"sent": self.unreliable_sent, "delivered": self.unreliable_delivered},
            "host_changes": self.host_changes,
            "drops": self.drops,
            "faults": self.faults,
            "problems": self.problems,
            "ok": self.ok,
            "result": self.verdict,
            "processes": self.processes,
            "cores": self.cores,
            "wall_time": self.wall_time,
        }
        if self.frames_expected:
            out["frames"] = {
                "expected": self.frames_expected,
                "delivered": self.frames_delivered,
                "p50_ms": pct(50),
                "p90_ms": pct(90),
                "p99_ms": pct(99),
                "max_ms": lat[-1] * 1000 if lat else 0.0,
                "late": late,
                "late_threshold_ms": self.late_threshold * 1000,
                "within_threshold_pct": self.on_time_pct,
                "on_time_target_pct": self.on_time_target_pct,
                "late_by_second": self.late_by_second(),
                "cpu_load_pct": None if self.cpu_load is None else 100.0 * self.cpu_load,
                "scheduling": self.scheduling,
            }
            if self.warm_up is not None:
                out["frames"]["warm_up"] = {"heard": self.warm_up[0], "sent": self.warm_up[1]}
        if self.record is not None:
            out["record"] = self.record
        return out


class MeshRun:
    def __init__(
        self,
        config: NodeConfig,
        *,
        nodes: int = 4,
        base_address: str = "127.0.0.1",
        port: int = 0,
        duration: float = 2.0,
        rate: float | None = None,
        messages: int = 20,
        record: str | None = None,
        faults: LinkFaults | None = None,
        leave_host: bool = False,
        live: Callable[[list[dict[str, Any]]], None] | None = None,
        live_interval: float = 0.5,
        formation_timeout: float | None = None,
        group_fanout: str = "unicast",
        freeze_gc: bool = False,
        scheduling: str = "normal",
    ) -> None:
        if scheduling not in MODES:
            raise ValueError(f"scheduling must be one of {', '.join(MODES)}, got {scheduling!r}")
        self.config = config
        self.scheduling = scheduling
        self.n = nodes
        base = ipaddress.IPv4Address(base_address)
        self.addresses = [str(base + i) for i in range(nodes)]
        self.port = port
        self.duration = duration
        self.rate = rate
        self.messages = messages
        self.record = record
        self.faults = faults
        self.leave_host = leave_host
        self.live = live
        self.live_interval = live_interval
        self.formation_timeout = formation_timeout or (10.0 + 0.25 * nodes)
        if group_fanout not in ("unicast", "broadcast"):
            raise ValueError(f"group fanout must be unicast or broadcast, got {group_fanout!r}")
        if group_fanout == "broadcast" and not ipaddress.IPv4Address(self.addresses[0]).is_loopback:
            raise ValueError("group broadcast is only used on loopback (127.255.255.255)")
        self.group_fanout = group_fanout
        self.freeze_gc = freeze_gc
        self._group_port = 0
        self.result = MeshRunResult(version=config.profile.name, network=config.network.value, nodes=nodes)
        self.receivers: dict[int, _Receiver] = {}
        self._clock: Callable[[], float] = trio.current_time  # the run's clock, once it runs
        self._late = self.result.late_threshold  # frames later than this go on the timeline of late frames
        self._records: list[tuple[bytes, tuple[str, int], tuple[str, int], float]] = []
        self._wall_offset: float | None = None

    # ------------------------------------------------------------------ helpers
    def _tap(self, data: bytes, src: tuple[str, int], dst: tuple[str, int], now: float) -> None:
        # pcap timestamps from the wall clock: the run's clock plus its offset, taken at the first datagram
        if self._wall_offset is None:
            self._wall_offset = time.time() - now
        self._records.append((data, src, dst, now + self._wall_offset))

    async def run(self) -> MeshRunResult:
        if self.group_fanout == "broadcast":
            self._group_port = _free_broadcast_port()
        factory = None
        if self.faults is not None:
            from pianode.sim.faults import FaultInjectingSocketFactory

            factory = FaultInjectingSocketFactory(self.faults)
        try:
            if factory is not None:
                async with factory:
                    factory.install()
                    await self._run()
                self.result.faults = factory.statistics().as_dict()
            else:
                await self._run()
        finally:
            if self.record:
                self._write_record()
        return self.result

    async def _run(self) -> None:
        async with trio.open_nursery() as nursery:
            t0 = trio.current_time()
            nodes = await self._form(nursery)
            self.nodes = nodes
            self.all_nodes = list(nodes)
            formed = len(nodes) == self.n and await self._wait_formed(nodes, self.formation_timeout)
            if formed:
                self.result.formation_time = trio.current_time() - t0
            else:
                self.result.problems.append("the mesh did not form: not every station saw every other one")
            # The run's clock read directly (what trio.current_time() reads,
            # without two calls in between): once per frame received.
            self._clock = trio.lowlevel.current_clock().current_time
            for node in nodes:
                rec = self.receivers[id(node)] = _Receiver()
                node.set_event_handler(functools.partial(self._on_events, node, rec))
                node.set_data_handler(self._data_handler(node, rec))
            if self.live is not None:
                nursery.start_soon(self._show_live, nodes)
            try:
                if formed:
                    self._check_table(nodes)
                    if self.rate:
                        with _frozen_heap(self.freeze_gc):
                            await self._realtime(nodes)
                    else:
                        await self._exchange(nodes)
                    if self.leave_host:
                        await self._migrate(nodes)
            except BaseException:
                # Ctrl-C or SIGTERM (or a failure): what the stations received until now, so that the
                # summary "until then" counts it (the receivers hold it until _gather).
                self._gather(nodes)
                raise
            self._collect(nodes)
            nursery.cancel_scope.cancel()

    def _node_configs(self) -> list[NodeConfig]:
        """One configuration per station: its own loopback address and seed, the shared session key."""
        rng = random.Random(self.config.seed)
        key = self.config.session_key or (rng.randbytes(16) if self.config.seed is not None else os.urandom(16))
        group = (LOOPBACK_BROADCAST, self._group_port) if self.group_fanout == "broadcast" else None
        return [
            attrs.evolve(
                self.config,
                bind=(ip, self.port),
                session_key=key,
                group_broadcast=group,
                seed=None if self.config.seed is None else self.config.seed * 1000 + i,
            )
            for i, ip in enumerate(self.addresses)
        ]

    async def _form(self, nursery: trio.Nursery) -> list[Node]:
        """Start the stations and form the mesh; returns the nodes that are in it.

        Here the launcher hands every joiner the host address and session key,
        as a matchmaking server would; subclasses discover the host instead
        (:class:`pianode.sim.ldn_run.LdnMeshRun`, :class:`LanMeshRun`).
        """
        tap = self._tap if self.record else None
        nodes: list[Node] = []
        for cfg in self._node_configs():
            node = Node(cfg)
            node.tap = tap
            await nursery.start(node._run)
            nodes.append(node)
        await nodes[0].create_mesh()
        try:
            async with trio.open_nursery() as joins:
                for node in nodes[1:]:
                    joins.start_soon(self._join, node, nodes[0].address)
        except BaseExceptionGroup as group:  # (not except*: Python 3.10 has no such syntax)
            failed, rest = group.split(JoinError)
            if rest is not None:
                raise rest from None
            for exc in failed.exceptions if failed is not None else ():
                self.result.problems.append(f"join failed: {exc}")
        return nodes

    async def _join(self, node: Node, host: tuple[str, int]) -> None:
        await node.join(host)

    async def _wait_formed(self, nodes: list[Node], timeout: float) -> bool:
        want = len(nodes) - 1
        with trio.move_on_after(timeout):
            while True:
                if all(
                    n.session is not None
                    and n.session.joined
                    and sum(1 for s in n.stations() if s.state == "connected") >= want
                    for n in nodes
                ):
                    return True
                await trio.sleep(0.01)
        return False

    def _check_table(self, nodes: list[Node]) -> None:
        indexes = [n.station_index for n in nodes]
        if len(set(indexes)) != len(indexes) or None in indexes:
            self.result.problems.append(f"station indexes are not distinct: {indexes}")
        hosts = {n.host_index for n in nodes}
        if len(hosts) != 1:
            self.result.problems.append(f"stations disagree on the host: {sorted(map(str, hosts))}")

    def _on_events(self, node: Node, rec: _Receiver, events: Sequence[object]) -> None:
        # Called by the node itself (Node.set_event_handler) once per batch:
        # no channel hand-over or consumer task per station.
        for event in events:
            self._handle(node, rec, event)

    def _data_handler(self, node: Node, rec: _Receiver) -> Callable[[int, bytes, bool], None]:
        """One station's handler of application data as the node decodes it (Node.set_data_handler): no
        event object per message.  Frames, the bulk of a real-time session, are counted here, with their
        latency off the run's clock as they arrive (what it reads per frame bound once); the rest in
        :meth:`_handle`."""
        unpack_from, frame_size, clock, late = _FRAME.unpack_from, _FRAME.size, self._clock, self._late
        latencies, late_due, handle = rec.latencies, rec.late_due, self._handle

        def on_data(source_index: int, data: bytes, reliable: bool) -> None:
            if len(data) >= frame_size and data[0] == 0x46:  # b"F"
                due = unpack_from(data)[3]
                latency = clock() - due
                latencies.append(latency)
                if latency > late:
                    late_due.append(due)
                return
            handle(node, rec, DataReceived(source_index, data, reliable))

        return on_data

    def _handle(self, node: Node, rec: _Receiver, event: object) -> None:
        if isinstance(event, DataReceived):
            data = event.data
            kind = data[:1]
            if kind == b"R" and len(data) >= _RELIABLE.size:
                _, src, seq = _RELIABLE.unpack_from(data)
                want = rec.expected.get(src, 0)
                if seq == want:
                    rec.delivered += 1
                    rec.expected[src] = want + 1
                elif seq < want:
                    rec.duplicates += 1
                else:
                    rec.out_of_order += 1
                    rec.expected[src] = seq + 1
            elif kind == b"U":
                rec.unreliable += 1
            elif kind == _WARM_UP[:1]:
                rec.warm_ups += 1
        elif isinstance(event, HostChanged):
            idx = node.station_index
            self.result.host_changes.append(f"station {idx}: {event.old_host_index} -> {event.new_host_index}")
            # (the node's own log says it at -v, as it says joins and departures: pianode.mesh.membership)

    async def _send_batch(self, nodes: list[Node], count: int, spread: float) -> None:
        async def sender(node: Node) -> None:
            src = node.station_index
            assert src is not None
            targets = [s.index for s in node.stations() if s.state == "connected" and s.index is not None]
            seq = self._seq.setdefault(src, 0)
            for k in range(count):
                await node.broadcast(_RELIABLE.pack(b"R", src, seq + k), reliable=True)
                await node.broadcast(b"U" + bytes([src]) + bytes(32), reliable=False)
                self.result.unreliable_sent += len(targets)
                if spread:
                    await trio.sleep(spread / count)
            self._seq[src] = seq + count
            self.result.reliable_expected += count * len(targets)

        started = trio.current_time()
        async with trio.open_nursery() as n:
            for node in nodes:
                n.start_soon(sender, node)
        # The exchange lasts *spread* (--duration) however few messages there are to spread over it.
        await trio.sleep_until(started + spread)

    async def _wait_delivered(self, nodes: list[Node], timeout: float) -> None:
        with trio.move_on_after(timeout):
            while sum(r.delivered for r in self.receivers.values()) < self.result.reliable_expected:
                await trio.sleep(0.02)

    async def _exchange(self, nodes: list[Node]) -> None:
        self._seq: dict[int, int] = {}
        await self._send_batch(nodes, self.messages, self.duration)
        await self._wait_delivered(nodes, 10.0 + self.duration)

    async def _realtime(self, nodes: list[Node]) -> None:
        await self._warm_up(nodes, nodes)
        await self._frame_clock(list(enumerate(nodes)), len(nodes), trio.current_time())
        await self._wait_delivered(nodes, 10.0)
        await trio.sleep(0.2)  # let the last frames land

    def warm_up_send(self, nodes: list[Node]) -> None:
        """Every station of *nodes* sends its warm-up message to every station (see :meth:`_warm_up`)."""
        for node in nodes:
            node.broadcast_nowait(_WARM_UP, reliable=False)

    def warmed_up(self, nodes: list[Node]) -> int:
        """Warm-up messages the stations of *nodes* have heard so far."""
        return sum(self.receivers[id(n)].warm_ups for n in nodes if id(n) in self.receivers)

    async def _warm_up(self, senders: list[Node], receivers: list[Node], timeout: float = 3.0) -> None:
        """Before the frame clock starts, each station sends one unreliable message on its stream to every station.

        As a game exchanges data before a match starts: the first packet of a
        stream between two stations makes the node's fast path for it (the
        codec's sealer at the sender and opener at the receiver, about 0.1 ms
        each, 992 pairs of them in a 32-station session), a one-off cost that
        would otherwise land on the session's first frames.  Bounded in time;
        not counted as frames.
        """
        self.warm_up_send(senders)
        want = sum(sum(1 for s in n.stations() if s.state == "connected") for n in receivers)
        with trio.move_on_after(timeout):
            while self.warmed_up(receivers) < want:
                await trio.sleep(0.01)
        self.result.warm_up = (self.warmed_up(receivers), want)

    async def _frame_clock(
        self, placed: list[tuple[int, Node]], total: int, start: float, *, stamp_shift: float = 0.0
    ) -> None:
        """Send the real-time session's frames for the stations *placed* here.

        *placed* holds (position among all *total* stations, node); *start* is
        the session's start on the Trio clock.  Frames carry their scheduled
        time minus *stamp_shift*: the Trio clock itself in one process, the
        system-wide monotonic clock when the stations are split over processes
        (:mod:`pianode.sim.mesh_procs`), whose receivers read that clock.
        """
        assert self.rate
        self._seq = {}
        period = 1.0 / self.rate
        # The ticks that fall within the session (--duration after the mesh formed): frames at 0,
        # 1/rate, ... while before its end (rate 1 for 3 s: three frames; rate 2 for 1.5 s: three too).
        frames = max(1, math.ceil(self.duration * self.rate - 1e-9))
        cpu_start = time.process_time()
        self.result.session_start = start - stamp_shift
        every = max(1, int(self.rate))

        # The stations share one frame clock (as a clock-synchronised game
        # session does): every station sends frame k at start + k * period.
        # One task runs the clock for all of them and hands each station's
        # frame over without yielding in between, so the frame's packets are
        # received as one batch; a task per station would add a scheduler
        # round trip and a timer per station per frame.
        first = 0.05
        stations = []
        for position, node in placed:
            src = node.station_index
            assert src is not None
            # One reliable message a second per station, the stations' phases
            # spread over the second (a burst of every station's at once
            # would be a load spike no game produces).
            phase = (position * every) // total
            peers = sum(1 for s in node.stations() if s.state == "connected")
            stations.append((node, src, phase, peers))
        sequence = [0] * len(stations)
        # The real-time class while the frames go out, where the OS grants it (pianode.sim.scheduling).
        priority = RealtimeClass(self.scheduling)
        priority.enter(trio.current_time(), cpu_start)
        # The clock reads every station's socket each tick and runs its due timers (_ticks): the drivers
        # sleep off them meanwhile.
        for node, _, _, _ in stations:
            node.set_polled(True, period)
        try:
            await self._ticks(stations, sequence, frames, every, start + first, period, stamp_shift, priority)
            self.result.clock_pace = (trio.current_time() - start) / (first + (frames - 1) * period)
        finally:
            for node, _, _, _ in stations:
                node.set_polled(False)
            priority.leave()
            self.result.scheduling = [priority.as_dict()]
        # Reliable messages sent after the session (the host's leave) go on from each sender's sequence.
        self._seq = {src: sequence[k] for k, (_, src, _, _) in enumerate(stations)}
        # The process's CPU time over the session's wall time: near 100 % the
        # process cannot keep up and frames queue (one core; Trio runs on one thread).
        self.result.cpu_time = time.process_time() - cpu_start
        self.result.cpu_load = self.result.cpu_time / max(1e-9, trio.current_time() - start)
        # The session lasts its duration, not until its last tick: at a low rate the last frame
        # goes out a period before the end (rate 1 for 3 s: the last at 2 s).
        await trio.sleep_until(start + first + self.duration)

    async def _ticks(
        self,
        stations: list[tuple[Node, int, int, int]],
        sequence: list[int],
        frames: int,
        every: int,
        first_due: float,
        period: float,
        stamp_shift: float,
        priority: RealtimeClass,
    ) -> None:
        """The frame clock's ticks: every station's frame per tick, and its reliable message at the tick
        of its phase in each run of *every* ticks (a second)."""
        payload_pad = bytes(48)
        cpu = time.process_time
        for frame in range(frames):
            due = first_due + frame * period
            await trio.sleep_until(due)
            priority.check(trio.current_time(), cpu())
            stamp = due - stamp_shift
            tick = frame % every
            for k, (node, src, phase, peers) in enumerate(stations):
                # Stamp the scheduled time: a station that falls behind real
                # time shows up as latency, not as a slower but "on time" game.
                node.broadcast_nowait(_FRAME.pack(b"F", src, frame, stamp) + payload_pad, reliable=False)
                self.result.frames_expected += peers
                if tick == phase:
                    node.broadcast_nowait(_RELIABLE.pack(b"R", src, sequence[k]), reliable=True)
                    sequence[k] += 1
                    self.result.reliable_expected += peers
            # Every station's socket read here, as the stations' drivers would read them once woken:
            # one task for all of them, no wake-up each (Node.receive_nowait).
            for node, _, _, _ in stations:
                node.receive_nowait()

    async def _migrate(self, nodes: list[Node]) -> None:
        host = next(n for n in nodes if n.station_index == n.host_index)
        rest = [n for n in nodes if n is not host]
        old_host = host.station_index
        await host.leave()
        with trio.move_on_after(self.config.station_timeout + 5):
            while True:
                views = {n.host_index for n in rest}
                if len(views) == 1 and old_host not in views and all(
                    sum(1 for s in n.stations() if s.state == "connected") >= len(rest) - 1 for n in rest
                ):
                    break
                await trio.sleep(0.02)
        views = {n.host_index for n in rest}
        if len(views) != 1 or old_host in views:
            self.result.problems.append(f"host migration did not settle: views {sorted(map(str, views))}")
            return
        # Keep exchanging data among the remaining stations.
        self.nodes = rest
        await self._send_batch(rest, max(1, self.messages // 2), 0.2)
        await self._wait_delivered(rest, 10.0)

    @staticmethod
    def station_rows(nodes: list[Node]) -> list[dict[str, Any]]:
        """One row per station as it sees itself: index, host mark, address, mean RTT, packets, losses."""
        rows = []
        for n in nodes:
            if n.session is None or n.session.closed:
                continue
            stations = n.stations()
            me = next((s for s in stations if s.is_self), None)
            if me is None:
                continue
            rtts = [x.rtt for x in stations if x.rtt is not None]
            rows.append(
                {
                    "index": me.index,
                    "host": me.is_host,
                    "address": f"{me.address[0]}:{me.address[1]}",
                    "rtt_ms": (sum(rtts) / len(rtts) * 1000) if rtts else None,
                    "sent": sum(x.packets_sent for x in stations),
                    "received": sum(x.packets_received for x in stations),
                    "lost": sum(x.lost for x in stations),
                    "constant_id": me.constant_id,
                }
            )
        rows.sort(key=lambda row: (row["index"] is None, row["index"]))
        return rows

    async def _show_live(self, nodes: list[Node]) -> None:
        assert self.live is not None
        while True:
            self.live(self.station_rows(nodes))
            await trio.sleep(self.live_interval)

    def _collect(self, nodes: list[Node]) -> None:
        self._gather(nodes)
        self.result.check_delivery()

    def _gather(self, nodes: list[Node]) -> None:
        """The receivers' counts, the stations' rows and drops into the result (no verdict)."""
        r = self.result
        all_nodes = nodes
        r.reliable_delivered = sum(self.receivers[id(n)].delivered for n in all_nodes if id(n) in self.receivers)
        r.duplicates = sum(self.receivers[id(n)].duplicates for n in all_nodes if id(n) in self.receivers)
        r.out_of_order = sum(self.receivers[id(n)].out_of_order for n in all_nodes if id(n) in self.receivers)
        r.unreliable_delivered = sum(self.receivers[id(n)].unreliable for n in all_nodes if id(n) in self.receivers)
        r.frames_delivered = sum(self.receivers[id(n)].frames for n in all_nodes if id(n) in self.receivers)
        for n in all_nodes:
            if id(n) in self.receivers:
                r.latencies.extend(self.receivers[id(n)].latencies)
                r.late_due.extend(self.receivers[id(n)].late_due)
        live = [n for n in all_nodes if n.session is not None and not n.session.closed]
        r.host_index = live[0].host_index if live else None
        drops: dict[str, int] = {}
        for n in all_nodes:
            if n.session is None:
                continue
            for k, v in n.session.drops.items():
                drops[k] = drops.get(k, 0) + v
        r.drops = drops
        r.stations = self.station_rows(live)



    def _write_record(self) -> None:
        assert self.record is not None
        self.result.record = write_record(self.record, self._records, self._session_context(), self.result.problems)

    def _session_context(self) -> dict[str, Any]:
        nodes = getattr(self, "all_nodes", [])
        host = nodes[0].session if nodes else None
        ctx: dict[str, Any] = {"version": self.result.version, "network": self.result.network}
        if host is not None and host.session_key is not None:
            ctx["session_key"] = host.session_key.hex()
            ctx.update(host.decode_context())
        return ctx


def write_record(
    path: str, records: Iterable[tuple[bytes, tuple[str, int], tuple[str, int], float]], context: dict[str, Any],
    problems: list[str],
) -> dict[str, Any] | None:
    """Write the datagrams (data, source, destination, wall time) to the pcap *path* and the
    session file beside it (FILE.session.json); returns the summary's ``record`` entry.  A recording that
    cannot be written now (a full disk) is one of the run's *problems*, and the summary is still the run's."""
    from pianode.capture.recording import write_recording

    try:
        return write_recording(path, records, context)
    except OSError as exc:  # pianode.capture.output leaves no partial file
        problems.append(f"the recording was not written: {exc.filename or path}: {exc.strerror or exc}")
        return None


class LanMeshRun(MeshRun):
    """A MeshRun whose stations find the host by LAN discovery (spec §6.6).

    Station 0 hosts the mesh and answers browse requests; every other station
    broadcasts a browse request, verifies the challenge, derives the session
    key from the published session key param and joins
    (:func:`pianode.lan.session.form_lan_mesh`).  A LanSessionInfo lists at
    most 16 stations, so a LAN run has at most 16.
    """

    def __init__(self, *args: Any, game_key: bytes, game_key_text: str, browse_port: int | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.game_key = game_key
        self.game_key_text = game_key_text
        self.browse_port = browse_port

    def _session_context(self) -> dict[str, Any]:
        # The recording holds the browse requests and replies too: decode verifies their challenge with the game key.
        return {**super()._session_context(), "game_key": self.game_key.hex()}

    async def _form(self, nursery: trio.Nursery) -> list[Node]:
        from pianode.lan.session import form_lan_mesh

        self.result.formation = "LAN discovery"
        rng = random.Random(self.config.seed)
        tap = self._tap if self.record else None
        mesh = await form_lan_mesh(
            nursery,
            self._node_configs(),
            self.game_key,
            tap=tap,
            browse_port_number=self.browse_port,
            session_key_param=None if self.config.seed is None else rng.randbytes(32),
        )
        for i, exc in mesh.failures:
            self.result.problems.append(f"join failed: station {i}: {exc}")
        return mesh.nodes
