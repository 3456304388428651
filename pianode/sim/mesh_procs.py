"""A scripted multi-node run with its stations split over processes: every core for one session.

Usage (the library's entry for many stations; ``pianode mesh --processes`` uses it)::

    result = trio.run(ProcessMeshRun(NodeConfig(version="5.18"), nodes=32, rate=60, duration=30,
                                     processes=2).run)
    print(result.summary())

Theory of operation
-------------------
A Trio run is one thread, so the stations of a :class:`~pianode.sim.mesh_run.MeshRun`
share one core.  :class:`ProcessMeshRun` starts *processes* worker processes
(``multiprocessing``'s spawn context: a fresh interpreter, safe from inside a
running Trio), gives each a contiguous block of the stations, and plays the
part :meth:`MeshRun._run` plays in one process, step by step over a pipe to each
worker: start the stations, create the mesh at station 0, join the others
(the host's address and the session key handed over, as a matchmaking server
does), wait until every station sees every other one, then exchange data or
run the real-time session, optionally make the host leave, and collect.

* **One frame clock.**  The coordinator picks the session's start on the
  system-wide monotonic clock (``time.perf_counter``, CLOCK_MONOTONIC on
  Linux); each worker maps it onto its own Trio clock, stamps its frames with
  their scheduled time on the shared clock and measures latency on it, so a
  frame's latency means the same whichever process sent or received it.
* **One report.**  The workers return their receivers' counts, latencies,
  drops, station rows and host changes; the coordinator adds them into one
  :class:`~pianode.sim.mesh_run.MeshRunResult` and judges it as one process
  would (every reliable message exactly once and in order; LATE below the
  real-time target).  CPU load is the sum of the workers' (up to 100 % per core).
* **One recording.**  Each worker taps what its stations send, with wall-clock
  times from one shared base; the coordinator merges them by time into one
  pcap and writes the session file from station 0's session.
* **Faults** apply in every worker alike: a fault is decided per datagram from
  the seed, the link and the bytes (:mod:`pianode.sim.faults`), not from the
  process; their counters are summed.

Discovery (LAN browse, LDN scan) forms a mesh inside one process; a split
run is formed by the hand-off.
"""

from __future__ import annotations

import array
import contextlib
import functools
import logging
import heapq
import ipaddress
import math
import multiprocessing
import os
import signal
import socket as stdlib_socket
import struct
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import trio

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

from pianode.mesh.config import NodeConfig
from pianode.mesh.node import JoinError, Node
from pianode.sim.faults import LinkFaults
from pianode.sim.scheduling import MODES
from pianode.sim.mesh_run import (
    MeshRun,
    MeshRunResult,
    _free_broadcast_port,
    _frozen_heap,
    _Receiver,
    write_record,
)

__all__ = ["ProcessMeshRun", "WorkerFailed", "default_processes"]

_log = logging.getLogger("pianode.mesh")  # -v: a worker's traceback

#: Received datagrams a second that one process carries comfortably in a
#: real-time session (a third of what one core here manages on 5.18 with the
#: cryptography backend); above it the stations are split.
DATAGRAMS_PER_PROCESS = 20000
#: How long before the session's start the coordinator hands it to the workers (seconds).
START_MARGIN = 0.3
#: What the coordinator sends its workers when it is interrupted (Ctrl-C, SIGTERM): end the step under way
#: now, so that their figures until then reach the summary at once, not after the rest of --duration.
STOP_SIGNAL = getattr(signal, "SIGUSR1", None)
#: How long an interrupted coordinator waits for its workers' figures (seconds).
COLLECT_TIMEOUT = 3.0
#: One recorded datagram in the blob a worker returns: wall time, source IP, port, destination IP, port, length.
_RECORD = struct.Struct(">dIHIHH")


def default_processes(nodes: int, rate: float | None, *, cpus: int | None = None) -> int:
    """How many processes a session of *nodes* stations at *rate* frames a second needs.

    One, unless it is a real-time session whose received datagrams
    (``nodes * (nodes - 1) * rate``, the same for unicast and group packets)
    exceed what one process carries with room to spare; then one per
    ``DATAGRAMS_PER_PROCESS``, at most one per usable core and per station.
    """
    if not rate or nodes < 2:
        return 1
    if cpus is None:
        try:
            cpus = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not Linux
            cpus = os.cpu_count() or 1
    wanted = math.ceil(nodes * (nodes - 1) * rate / DATAGRAMS_PER_PROCESS)
    return max(1, min(wanted, cpus, nodes))


class WorkerFailed(Exception):
    """A worker process failed (its traceback) or went away."""


@attrs.frozen
class _ShareSpec:
    """What a worker needs to run its block of stations (pickled to it)."""

    config: NodeConfig
    nodes: int
    positions: tuple[int, int]  # [first, stop) of the stations' positions
    base_address: str
    port: int
    duration: float
    rate: float | None
    record: bool
    faults: LinkFaults | None
    group_fanout: str
    group_port: int
    freeze_gc: bool
    live_interval: float | None
    wall_base: float  # time.time() - time.perf_counter() in the coordinator
    scheduling: str  # --scheduling: each worker asks for the real-time class during the frame clock
    core: int | None = None  # the core the worker keeps to (None: any)


class _MeshShare(MeshRun):
    """The stations of one worker: a MeshRun over all the session's stations that runs only its block."""

    def __init__(self, spec: _ShareSpec) -> None:
        super().__init__(
            spec.config,
            nodes=spec.nodes,
            base_address=spec.base_address,
            port=spec.port,
            duration=spec.duration,
            rate=spec.rate,
            record="share" if spec.record else None,
            group_fanout=spec.group_fanout,
            freeze_gc=spec.freeze_gc,
            scheduling=spec.scheduling,
        )
        self.spec = spec
        self._group_port = spec.group_port
        self.first, self.stop = spec.positions
        self._clock = time.perf_counter  # latencies on the shared clock (see the module docstring)
        self.local: list[Node] = []
        self._placed: list[tuple[int, Node]] = []

    def _shift(self) -> float:
        """The Trio clock minus the shared clock, in this process."""
        return trio.current_time() - time.perf_counter()

    async def start_nodes(self, nursery: trio.Nursery) -> list[tuple[str, int]]:
        shift = self._shift()
        self._wall_offset = self.spec.wall_base - shift  # Trio time -> wall time, as in every worker
        tap = self._tap if self.record else None
        configs = self._node_configs()
        for position in range(self.first, self.stop):
            node = Node(configs[position])
            node.tap = tap
            await nursery.start(node._run)
            self.local.append(node)
            self._placed.append((position, node))
        self.nodes = self.all_nodes = list(self.local)
        return [node.address for node in self.local]

    async def create(self) -> tuple[str, int]:
        host = self.local[0]
        await host.create_mesh()
        return host.address

    async def join_all(self, host: tuple[str, int]) -> list[str]:
        problems: list[str] = []
        joiners = [node for position, node in self._placed if position != 0]

        async def join(node: Node) -> None:
            try:
                await node.join(host)
            except JoinError as exc:
                problems.append(f"join failed: {exc}")

        async with trio.open_nursery() as joins:
            for node in joiners:
                joins.start_soon(join, node)
        return problems

    async def formed(self, timeout: float) -> dict[str, Any]:
        """Wait until every local station sees every other station; then take the data."""
        ok = await self._wait_formed_of(self.local, self.n - 1, timeout)
        for node in self.local:
            rec = self.receivers[id(node)] = _Receiver()
            node.set_event_handler(functools.partial(self._on_events, node, rec))
            node.set_data_handler(self._data_handler(node, rec))
        return {
            "formed": ok,
            "indexes": [node.station_index for node in self.local],
            "hosts": [node.host_index for node in self.local],
        }

    async def _wait_formed_of(self, nodes: list[Node], want: int, timeout: float) -> bool:
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

    async def realtime(self, start_shared: float) -> dict[str, Any]:
        shift = self._shift()
        with _frozen_heap(self.freeze_gc):
            await self._frame_clock(self._placed, self.n, start_shared + shift, stamp_shift=shift)
        r = self.result
        return {"frames_expected": r.frames_expected, "reliable_expected": r.reliable_expected,
                "cpu_load": r.cpu_load, "cpu_time": r.cpu_time, "clock_pace": r.clock_pace, "session_start": r.session_start,
                "scheduling": r.scheduling}  # fmt: skip

    async def exchange(self, count: int, spread: float) -> dict[str, Any]:
        if not hasattr(self, "_seq"):
            self._seq = {}
        await self._send_batch(self.nodes, count, spread)
        return {"reliable_expected": self.result.reliable_expected}

    def delivered(self) -> int:
        return sum(r.delivered for r in self.receivers.values())

    async def host_leave(self) -> int | None:
        """Make the host leave if it is one of ours; returns its index (None: not here)."""
        host = next((n for n in self.nodes if n.station_index == n.host_index), None)
        if host is None:
            return None
        old = host.station_index
        await host.leave()
        self.nodes = [n for n in self.nodes if n is not host]
        return old

    async def settle(self, old_host: int, rest: int, timeout: float) -> list[int | None]:
        """Wait until the local stations but the old host agree on a new one and see the *rest* - 1 others."""
        nodes = [n for n in self.nodes if n.station_index != old_host]
        self.nodes = nodes
        with trio.move_on_after(timeout):
            while True:
                views = {n.host_index for n in nodes}
                if (len(views) <= 1 and old_host not in views
                        and all(sum(1 for s in n.stations() if s.state == "connected") >= rest - 1 for n in nodes)):  # fmt: skip
                    break
                await trio.sleep(0.02)
        return [n.host_index for n in nodes]

    def collect(self) -> dict[str, Any]:
        self._gather(self.all_nodes)
        r = self.result
        live = [n for n in self.all_nodes if n.session is not None and not n.session.closed]
        out: dict[str, Any] = {
            "reliable_expected": r.reliable_expected,
            "reliable_delivered": r.reliable_delivered,
            "duplicates": r.duplicates,
            "out_of_order": r.out_of_order,
            "unreliable_sent": r.unreliable_sent,
            "unreliable_delivered": r.unreliable_delivered,
            "frames_expected": r.frames_expected,
            "frames_delivered": r.frames_delivered,
            "latencies": array.array("d", r.latencies).tobytes(),
            "late_due": array.array("d", r.late_due).tobytes(),
            "host_changes": r.host_changes,
            "drops": r.drops,
            "stations": r.stations,
            "host_index": live[0].host_index if live else None,
            "records": _pack_records(self._records),
            "context": self._session_context() if self.first == 0 else None,
            # The cores this process may run on, as the OS says (what the report shows: the fact, not the wish).
            "cores": sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        }
        return out

    def rows(self) -> list[dict[str, Any]]:
        return self.station_rows(self.local)


def _pack_records(records: list[tuple[bytes, tuple[str, int], tuple[str, int], float]]) -> bytes:
    ip = stdlib_socket.inet_aton
    parts = []
    for data, src, dst, now in records:
        parts.append(_RECORD.pack(now, int.from_bytes(ip(src[0]), "big"), src[1],
                                  int.from_bytes(ip(dst[0]), "big"), dst[1], len(data)))  # fmt: skip
        parts.append(data)
    return b"".join(parts)


def _unpack_records(blob: bytes) -> Iterator[tuple[float, bytes, tuple[str, int], tuple[str, int]]]:
    """(wall time, data, source, destination) in the worker's order, which is by time."""
    at, size, unpack = 0, _RECORD.size, _RECORD.unpack_from
    name = stdlib_socket.inet_ntoa
    while at < len(blob):
        now, sip, sport, dip, dport, n = unpack(blob, at)
        at += size
        yield now, blob[at : at + n], (name(sip.to_bytes(4, "big")), sport), (name(dip.to_bytes(4, "big")), dport)
        at += n


# ---------------------------------------------------------------------------- worker process


def _worker_main(conn: Any, spec: _ShareSpec) -> None:
    """A worker process: serve the coordinator's commands until it says stop or goes away."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's; it stops us
    if STOP_SIGNAL is not None:
        signal.signal(STOP_SIGNAL, signal.SIG_IGN)  # until _serve watches for it
    if spec.core is not None:
        with contextlib.suppress(OSError):  # (a core taken away meanwhile: run anywhere)
            os.sched_setaffinity(0, {spec.core})
    try:
        trio.run(_serve, conn, spec)
    except BaseException:  # noqa: BLE001 - reported to the coordinator, which reports it
        with contextlib.suppress(OSError):
            conn.send(("error", traceback.format_exc()))
    finally:
        conn.close()


async def _receive(conn: Any) -> Any:
    while not conn.poll():
        await trio.lowlevel.wait_readable(conn.fileno())
    return conn.recv()


async def _serve(conn: Any, spec: _ShareSpec) -> None:
    share = _MeshShare(spec)
    async with contextlib.AsyncExitStack() as stack:
        factory = None
        if spec.faults is not None:
            from pianode.sim.faults import FaultInjectingSocketFactory

            factory = await stack.enter_async_context(FaultInjectingSocketFactory(spec.faults))
            factory.install()
        async with trio.open_nursery() as nursery:
            conn.send(("ok", await share.start_nodes(nursery)))
            if spec.live_interval is not None:
                nursery.start_soon(_push_rows, conn, share, spec.live_interval)
            under_way: list[trio.CancelScope] = []
            if STOP_SIGNAL is not None:
                nursery.start_soon(_end_steps_on_signal, under_way)
            while True:
                try:
                    command, *args = await _receive(conn)
                except EOFError:
                    break  # the coordinator went away
                if command == "stop":
                    break
                if command == "collect":
                    reply: Any = share.collect()
                    reply["faults"] = None if factory is None else factory.statistics().as_dict()
                elif command == "delivered":
                    reply = share.delivered()
                elif command == "warm_up":
                    share.warm_up_send(share.local)
                    reply = None
                elif command == "warmed_up":
                    reply = share.warmed_up(share.local)
                else:
                    steps = {"create": share.create, "join_all": share.join_all, "formed": share.formed,
                             "realtime": share.realtime, "exchange": share.exchange,
                             "host_leave": share.host_leave, "settle": share.settle}  # fmt: skip
                    with trio.CancelScope() as scope:
                        under_way[:] = [scope]
                        reply = await steps[command](*args)
                    under_way.clear()
                    if scope.cancelled_caught:
                        conn.send(("cancelled", None))  # the coordinator was interrupted and asks for "collect"
                        continue
                conn.send(("ok", reply))
            nursery.cancel_scope.cancel()


async def _end_steps_on_signal(under_way: list[trio.CancelScope]) -> None:
    """The coordinator was interrupted: end the step under way (STOP_SIGNAL), keeping what it did."""
    assert STOP_SIGNAL is not None
    with trio.open_signal_receiver(STOP_SIGNAL) as signals:
        async for _ in signals:
            for scope in under_way:
                scope.cancel()


async def _push_rows(conn: Any, share: _MeshShare, interval: float) -> None:
    while True:
        await trio.sleep(interval)
        conn.send(("rows", share.rows()))


# ---------------------------------------------------------------------------- coordinator


def _cores_for(processes: int) -> list[int] | None:
    """A core of its own for each worker when the workers take every core this process may use;
    None otherwise (more cores: the OS has room to spread them, and pinning every session to
    the first cores would stack them; fewer: there is no core of its own to give).

    Without it the OS may put two workers of one session on one core while another program
    runs alone on the other; each then gets half a core for a tick's burst of frames, and the
    session falls behind for seconds at a time.  Measured with one core kept busy by another
    process, 32 stations of 5.18 at 60 Hz, 20 s runs alternating: 98.72, 99.41 and 99.96 % of
    frames within 50 ms with a core each, against 90.42, 86.46 and 81.77 % without.
    """
    getter = getattr(os, "sched_getaffinity", None)
    if getter is None or processes < 2:
        return None
    cores = sorted(getter(0))
    return cores if len(cores) == processes else None




class _Worker:
    """The coordinator's end of one worker: its process, pipe and latest station rows."""

    def __init__(self, number: int, spec: _ShareSpec) -> None:
        context = multiprocessing.get_context("spawn")
        self.number = number
        self.conn, child = context.Pipe()
        self.process = context.Process(target=_worker_main, args=(child, spec), name=f"pianode-mesh-{number}",
                                       daemon=True)  # fmt: skip
        self.process.start()
        child.close()
        self.rows: list[dict[str, Any]] = []

    async def reply(self) -> Any:
        while True:
            try:
                kind, value = await _receive(self.conn)
            except (EOFError, OSError):
                raise WorkerFailed(f"station process {self.number} went away (exit code {self.process.exitcode})") from None
            if kind == "rows":
                self.rows = value
            elif kind == "error":
                _log.info("station process %d failed:\n%s", self.number, value)
                last = value.strip().splitlines()[-1].strip() if value.strip() else "?"
                raise WorkerFailed(f"station process {self.number} failed: {last}")
            else:
                return value

    async def ask(self, command: str, *args: Any) -> Any:
        self.conn.send((command, *args))
        return await self.reply()

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.conn.send(("stop",))
        self.process.join(timeout=5)
        if self.process.is_alive():
            self.process.terminate()  # our own child, by its handle
            self.process.join(timeout=5)
        self.conn.close()


def _leaves(group: BaseExceptionGroup[Any]) -> Iterator[BaseException]:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc)
        else:
            yield exc


class ProcessMeshRun:
    """:class:`~pianode.sim.mesh_run.MeshRun` with the stations split over *processes* processes.

    Takes MeshRun's arguments but the discovery ones; *live* receives every
    station's row, gathered from the workers.
    """

    def __init__(
        self,
        config: NodeConfig,
        *,
        processes: int,
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
        pin_cores: bool = True,
        scheduling: str = "normal",
    ) -> None:
        if not 1 <= processes <= nodes:
            raise ValueError(f"{nodes} stations can be split over 1 to {nodes} processes, not {processes}")
        if group_fanout not in ("unicast", "broadcast"):
            raise ValueError(f"group fanout must be unicast or broadcast, got {group_fanout!r}")
        if group_fanout == "broadcast" and not ipaddress.IPv4Address(base_address).is_loopback:
            raise ValueError("group broadcast is only used on loopback (127.255.255.255)")
        if config.session_key is None:
            # Every worker derives the same stations from the configuration: one key for all.
            key = os.urandom(16) if config.seed is None else None
            if key is not None:
                config = attrs.evolve(config, session_key=key)
        self.config = config
        self.processes = processes
        self.n = nodes
        self.base_address = base_address
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
        self.group_fanout = group_fanout
        self.freeze_gc = freeze_gc
        self.cores = _cores_for(processes) if pin_cores else None
        if scheduling not in MODES:
            raise ValueError(f"scheduling must be one of {', '.join(MODES)}, got {scheduling!r}")
        self.scheduling = scheduling
        self.result = MeshRunResult(version=config.profile.name, network=config.network.value, nodes=nodes,
                                    processes=processes)  # fmt: skip
        self.workers: list[_Worker] = []

    def _specs(self) -> list[_ShareSpec]:
        group_port = _free_broadcast_port() if self.group_fanout == "broadcast" else 0
        wall_base = time.time() - time.perf_counter()
        cuts = [k * self.n // self.processes for k in range(self.processes + 1)]
        return [
            _ShareSpec(
                config=self.config, nodes=self.n, positions=(cuts[k], cuts[k + 1]), base_address=self.base_address,
                port=self.port, duration=self.duration, rate=self.rate, record=self.record is not None,
                faults=self.faults, group_fanout=self.group_fanout, group_port=group_port, freeze_gc=self.freeze_gc,
                live_interval=self.live_interval if self.live is not None else None, wall_base=wall_base,
                scheduling=self.scheduling,
                core=None if self.cores is None else self.cores[k],
            )  # fmt: skip
            for k in range(self.processes)
        ]

    async def _all(self, command: str, *args: Any) -> list[Any]:
        """Ask every worker at once; their replies in worker order."""
        return await self._all_replies((command, *args))

    async def _all_replies(self, command: tuple[Any, ...] | None = None) -> list[Any]:
        workers = self.workers
        replies: list[Any] = [None] * len(workers)

        async def one(k: int, worker: _Worker) -> None:
            replies[k] = await (worker.reply() if command is None else worker.ask(*command))

        async with trio.open_nursery() as nursery:
            for k, worker in enumerate(workers):
                nursery.start_soon(one, k, worker)
        return replies

    async def run(self) -> MeshRunResult:
        collected: list[dict[str, Any]] = []
        try:
            self.workers = [_Worker(k, spec) for k, spec in enumerate(self._specs())]
            try:
                collected = await self._run()
            except BaseExceptionGroup as group:  # (not except*: Python 3.10 has no such syntax)
                failed, rest = group.split(WorkerFailed)
                if rest is not None:
                    raise rest from None
                if failed is not None:
                    self.result.problems.extend(str(exc) for exc in _leaves(failed))
        except BaseException:
            # Ctrl-C or SIGTERM: the workers' figures until now, so that the caller's summary (self.result)
            # has them at once, not after the rest of the session.
            collected = self._collect_now()
            raise
        finally:
            for worker in self.workers:
                worker.stop()
            self._merge(collected)
        return self.result

    def _collect_now(self) -> list[dict[str, Any]]:
        """End every worker's step under way and gather what each has so far (bounded by COLLECT_TIMEOUT;
        a worker that does not answer in time is left out).  Blocking: the run is being torn down."""
        for worker in self.workers:
            with contextlib.suppress(OSError):
                if STOP_SIGNAL is not None and worker.process.pid is not None:
                    os.kill(worker.process.pid, STOP_SIGNAL)  # our own child, by its handle's PID
                worker.conn.send(("collect",))
        deadline = time.monotonic() + COLLECT_TIMEOUT
        out = []
        for worker in self.workers:
            while (left := deadline - time.monotonic()) > 0:
                try:
                    if not worker.conn.poll(left):
                        break
                    kind, value = worker.conn.recv()
                except (EOFError, OSError):
                    break
                if kind == "ok" and isinstance(value, dict) and "latencies" in value:  # collect's reply
                    out.append(value)
                    break
        return out

    async def _run(self) -> list[dict[str, Any]]:
        r = self.result
        t0 = time.perf_counter()
        await self._all_replies()  # every worker's stations are bound
        async with trio.open_nursery() as nursery:
            if self.live is not None:
                nursery.start_soon(self._show_live)
            host = await self.workers[0].ask("create")
            for problems in await self._all("join_all", host):
                r.problems.extend(problems)
            views = await self._all("formed", self.formation_timeout)
            formed = all(v["formed"] for v in views)
            if formed:
                r.formation_time = time.perf_counter() - t0
            else:
                r.problems.append("the mesh did not form: not every station saw every other one")
            if formed:
                self._check_table(views)
                if self.rate:
                    await self._realtime()
                else:
                    sent = await self._all("exchange", self.messages, self.duration)
                    await self._wait_delivered(10.0 + self.duration, sum(s["reliable_expected"] for s in sent))
                if self.leave_host:
                    await self._migrate()
            nursery.cancel_scope.cancel()
        return await self._all("collect")

    def _check_table(self, views: list[dict[str, Any]]) -> None:
        indexes = [i for v in views for i in v["indexes"]]
        if len(set(indexes)) != len(indexes) or None in indexes:
            self.result.problems.append(f"station indexes are not distinct: {indexes}")
        hosts = {h for v in views for h in v["hosts"]}
        if len(hosts) != 1:
            self.result.problems.append(f"stations disagree on the host: {sorted(map(str, hosts))}")

    async def _realtime(self) -> None:
        # The warm-up of MeshRun._warm_up, across the processes: every station sends, then each
        # process counts what its stations heard, until all of it (bounded).
        await self._all("warm_up")
        want = self.n * (self.n - 1)
        with trio.move_on_after(3.0):
            while sum(await self._all("warmed_up")) < want:
                await trio.sleep(0.01)
        self.result.warm_up = (sum(await self._all("warmed_up")), want)
        start = time.perf_counter() + START_MARGIN
        sent = await self._all("realtime", start)
        loads = [s["cpu_load"] for s in sent if s["cpu_load"] is not None]
        self.result.cpu_load = sum(loads) if loads else None
        times = [s["cpu_time"] for s in sent if s["cpu_time"] is not None]
        self.result.cpu_time = sum(times) if times else None  # every process's, while its frames went out
        paces = [s["clock_pace"] for s in sent if s["clock_pace"] is not None]
        self.result.clock_pace = max(paces) if paces else None
        self.result.scheduling = [p for s in sent for p in s["scheduling"]]
        self.result.session_start = start
        await self._wait_delivered(10.0, sum(s["reliable_expected"] for s in sent))
        await trio.sleep(0.2)  # let the last frames land

    async def _wait_delivered(self, timeout: float, expected: int) -> None:
        """Until the workers' receivers have every reliable message sent so far (*expected*), bounded."""
        with trio.move_on_after(timeout):
            while sum(await self._all("delivered")) < expected:
                await trio.sleep(0.02)

    async def _migrate(self) -> None:
        gone = [old for old in await self._all("host_leave") if old is not None]
        if not gone:
            self.result.problems.append("host migration: no station is the host")
            return
        old_host = gone[0]
        views = await self._all("settle", old_host, self.n - 1, self.config.station_timeout + 5)
        hosts = {h for v in views for h in v}
        if len(hosts) != 1 or old_host in hosts:
            self.result.problems.append(f"host migration did not settle: views {sorted(map(str, hosts))}")
            return
        sent = await self._all("exchange", max(1, self.messages // 2), 0.2)
        await self._wait_delivered(10.0, sum(s["reliable_expected"] for s in sent))

    async def _show_live(self) -> None:
        assert self.live is not None
        while True:
            await trio.sleep(self.live_interval)
            rows = sorted((row for w in self.workers for row in w.rows),
                          key=lambda row: (row["index"] is None, row["index"]))  # fmt: skip
            if rows:
                self.live(rows)

    def _merge(self, collected: list[dict[str, Any]]) -> None:
        r = self.result
        counts = ("reliable_expected", "reliable_delivered", "duplicates", "out_of_order", "unreliable_sent",
                  "unreliable_delivered", "frames_expected", "frames_delivered")  # fmt: skip
        for name in counts:
            setattr(r, name, sum(c[name] for c in collected))
        if self.cores is not None and collected:
            # Each worker kept to one core: which, from each worker itself.
            cores = [c.get("cores") for c in collected]
            r.cores = [c[0] for c in cores] if all(c is not None and len(c) == 1 for c in cores) else None  # type: ignore[index]
        for c in collected:
            r.latencies.extend(array.array("d", c["latencies"]))
            r.late_due.extend(array.array("d", c["late_due"]))
            r.host_changes.extend(c["host_changes"])
            r.stations.extend(c["stations"])
            for k, v in c["drops"].items():
                r.drops[k] = r.drops.get(k, 0) + v
            if c["faults"] is not None:
                for k, v in c["faults"].items():
                    r.faults[k] = r.faults.get(k, 0) + v
        r.stations.sort(key=lambda row: (row["index"] is None, row["index"]))
        r.host_index = next((c["host_index"] for c in collected if c["host_index"] is not None), None)
        if collected:
            r.check_delivery()
        if self.record is not None:
            streams = [_unpack_records(c["records"]) for c in collected]
            merged = ((data, src, dst, now) for now, data, src, dst in heapq.merge(*streams, key=lambda x: x[0]))
            context = next((c["context"] for c in collected if c["context"] is not None), None) or {
                "version": r.version, "network": r.network}  # fmt: skip
            r.record = write_record(self.record, merged, context, r.problems)
