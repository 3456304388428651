"""Node-level benchmark sections that need sockets: receive rate, memory, RTT, profiles.

Theory of operation
-------------------
**Receive rate** (issue 6, figure 2).  Node A creates a mesh and node B joins
it, so A holds a connected peer at B's address.  B is then stopped (A keeps it:
the bench nodes have a long station timeout) and B's own session codec seals
``receive_datagrams`` unreliable data messages exactly as B would have sent
them: same header fields, packet ids and header nonces counting on from B's.
Every datagram is sent once: the node refuses a repeated GCM nonce as a
replay, so the feed is split between the rounds and never loops.
A separate process (``python -m pianode.bench.net sender``) binds B's
address and sends them to A.

A blasting sender would overflow A's socket and the kernel would drop whole
runs of datagrams: the packet-id replay window (``pianode.mesh.packet_ids``: at
most 1024 ids ahead) would then refuse everything after the first big gap and
the figure would measure drops.  So the sender is flow controlled: it keeps at
most ``WINDOW`` datagrams beyond what the receiver has consumed, read from a
shared 16-byte file mapping the receiver updates.  The window is smaller than
the socket buffer, so nothing is lost and the receiver is never idle.  The
reference is a bare Trio draining receiver (perf-limits §7) fed the same
datagrams by the same sender in the same run; rounds alternate and the figure
is the median of the per-round ratios.

On a shared 2-core machine the sender's CPU share limits both receivers, so
each round also measures the cost per datagram with *prefilled* sockets (the
perf-limits §4.1 method): bursts of ``_FILL`` datagrams are written from B's
address synchronously, while no receiver can run, and only the draining is
timed.  The targeted prefilled figure is the node handing each datagram to
its data handler (``Node.set_data_handler``, the API for these rates); the
same through the event channel (``Node.events()``: an event object per
datagram and a consumer task) is printed beside it without a target.

**Memory**: tracemalloc around forming an N-station mesh and letting it idle.

**RTT**: two nodes in one process; B echoes every ``P`` message back as
unreliable data; A times send → echo.  Reference: two plain Trio UDP sockets
echoing in the same process.  Figure: median(node) − median(bare).

**Profiles** (``--profile DIR``): cProfile over one extra receive round and a
short real-time session, written as ``.pstats`` plus the top entries.
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import mmap
import os
import pstats
import socket
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from contextlib import AsyncExitStack
from typing import Any

import attrs
import trio

from pianode.bench.figures import Budget, Figure, at_least, below
from pianode.bench.sessions import session_run
from pianode.mesh.config import NodeConfig
from pianode.mesh.events import DataReceived
from pianode.mesh.node import Node, open_node

__all__ = ["PROFILED", "bench_memory", "bench_receive", "bench_rtt", "profile_hot_paths"]

WINDOW = 1024  # datagrams in flight beyond what the receiver consumed
_COUNTER = struct.Struct("<QQ")  # consumed, stop flag
_RCVBUF = 1 << 20
_KEY = bytes.fromhex("00112233445566778899aabbccddeeff")
_LONG = 3600.0  # station timeout of the bench nodes: B is gone while A is measured


def _config(budget: Budget, ip: str, **extra: Any) -> NodeConfig:
    return NodeConfig(
        version=budget.version,
        aead_backend=budget.node_backend,
        session_key=_KEY,
        bind=(ip, 0),
        station_timeout=_LONG,
        **extra,
    )


async def _pair(budget: Budget, stack: AsyncExitStack) -> tuple[Node, Node]:
    """Nodes A (host, 127.0.0.1) and B (127.0.0.2), connected; both live until *stack* closes."""
    a = await stack.enter_async_context(open_node(_config(budget, "127.0.0.1")))
    await a.create_mesh()
    b = await stack.enter_async_context(open_node(_config(budget, "127.0.0.2")))
    with trio.fail_after(15):
        await b.join(a.address)
        if not await a.wait_connected(1, 10) or not await b.wait_connected(1, 10):
            raise RuntimeError("the two bench nodes did not connect")
    await trio.sleep(0.3)  # let the last acks of the handshake land
    return a, b


# ---------------------------------------------------------------------------- receive


class _Counter:
    """The shared consumed/stop words (a 16-byte file mapped by both processes)."""

    def __init__(self) -> None:
        fd, self.path = tempfile.mkstemp(prefix="pianode-bench-", suffix=".ctr")
        os.write(fd, bytes(_COUNTER.size))
        self._map = mmap.mmap(fd, _COUNTER.size)
        os.close(fd)
        self.consumed = 0
        self.stop = 0
        #: (perf_counter, consumed) at the first and the latest progress.
        self.first: tuple[float, int] | None = None
        self.last: tuple[float, int] = (0.0, 0)

    def publish(self) -> None:
        _COUNTER.pack_into(self._map, 0, self.consumed, self.stop)
        if self.consumed != self.last[1]:
            self.last = (time.perf_counter(), self.consumed)
            if self.first is None:
                self.first = self.last

    def close(self) -> None:
        self._map.close()
        os.unlink(self.path)


async def _sender(
    datagrams_file: str, source: tuple[str, int], dest: tuple[str, int], start: int, end: int, counter: _Counter
) -> trio.Process:
    cmd = [
        sys.executable, "-m", "pianode.bench.net", "sender",
        "--file", datagrams_file, "--source", f"{source[0]}:{source[1]}", "--dest", f"{dest[0]}:{dest[1]}",
        "--start", str(start), "--end", str(end), "--counter", counter.path, "--window", str(WINDOW),
    ]  # fmt: skip
    return await trio.lowlevel.open_process(cmd, stdout=subprocess.PIPE)


async def _finish(proc: trio.Process, counter: _Counter) -> tuple[int, int]:
    """Stop the sender; returns (datagrams sent, next index)."""
    counter.stop = 1
    counter.publish()
    out = b""
    with trio.move_on_after(10) as scope:
        assert proc.stdout is not None
        while chunk := await proc.stdout.receive_some(4096):
            out += chunk
        await proc.wait()
    if scope.cancelled_caught:
        proc.kill()
        await proc.wait()
        raise RuntimeError("the bench sender did not stop")
    fields = dict(part.split("=") for part in out.decode().split())
    return int(fields["sent"]), int(fields["next"])


async def _measure(counter: _Counter, seconds: float, proc: trio.Process, total: int) -> float:
    """Datagrams consumed per second, for *seconds* from the first one or until all *total* arrived.

    The rate is taken between the receiver's own first and last progress
    stamps, so it does not depend on when this task happens to wake up.
    """
    with trio.move_on_after(10):
        while counter.first is None and proc.returncode is None:
            await trio.sleep(0.002)
    if counter.first is None:
        return 0.0
    end = counter.first[0] + seconds
    while time.perf_counter() < end and counter.consumed < total:
        await trio.sleep(0.002)
    (t0, c0), (t1, c1) = counter.first, counter.last
    return (c1 - c0) / (t1 - t0) if t1 > t0 else 0.0


@attrs.define
class _Feed:
    path: str
    count: int
    source: tuple[str, int]
    payload: int


def _write_datagrams(path: str, datagrams: list[bytes]) -> None:
    with open(path, "wb") as f:
        for d in datagrams:
            f.write(len(d).to_bytes(2, "big") + d)


def _read_datagrams(path: str) -> list[bytes]:
    with open(path, "rb") as f:
        blob = f.read()
    out, pos = [], 0
    while pos < len(blob):
        n = int.from_bytes(blob[pos : pos + 2], "big")
        out.append(blob[pos + 2 : pos + 2 + n])
        pos += 2 + n
    return out


def _forge_feed(b: Node, b_address: tuple[str, int], a: Node, budget: Budget, path: str) -> _Feed:
    """Seal B's next *receive_datagrams* data packets to A with B's own session state."""
    from protocols.pia.packet import Packet

    session = b.session
    assert session is not None and session.codec is not None and a.station_index is not None
    peer = session.peers[a.address]
    now = trio.current_time()
    session.send(a.station_index, b"D" + bytes(budget.receive_payload - 1), reliable=False, now=now)
    template = None
    for data, dst in session.datagrams_to_send(now):
        if dst == a.address:
            template = data
    if template is None:
        raise RuntimeError("B produced no datagram for A")
    codec = session.codec
    src_ip = b_address[0]
    packet = codec.decode(template, src_ip)
    data_messages = tuple(m for m in packet.messages if m.payload[:1] == b"D")
    hn = int.from_bytes(packet.header.nonce or bytes(8), "big")
    out = []
    for i in range(budget.receive_datagrams):
        header = attrs.evolve(
            packet.header, packet_id=peer.tx_ids.next(), nonce=((hn + 1 + i) & (2**64 - 1)).to_bytes(8, "big"), tag=b""
        )
        out.append(codec.encode(Packet(header, data_messages, packet.footer), src_ip))
    _write_datagrams(path, out)
    return _Feed(path, len(out), b_address, budget.receive_payload)


async def _consume(events: trio.MemoryReceiveChannel[Any], counter: _Counter) -> None:
    """Count DataReceived events; receive_nowait in a loop, so one checkpoint per batch, not per event."""
    while True:
        event = await events.receive()
        n = isinstance(event, DataReceived)
        while True:
            try:
                event = events.receive_nowait()
            except trio.WouldBlock:
                break
            n += isinstance(event, DataReceived)
        counter.consumed += n
        counter.publish()


async def _node_round(a: Node, feed: _Feed, start: int, end: int, seconds: float) -> tuple[float, int]:
    """One measured round; a feed shorter than a packet-id cycle is sent from *start* to *end* only."""
    counter = _Counter()
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_consume, a.events(), counter)
            proc = await _sender(feed.path, feed.source, a.address, start, end, counter)
            total = end - start
            rate = await _measure(counter, seconds, proc, total)
            _, nxt = await _finish(proc, counter)
            await trio.sleep(0.05)  # let A drain what is still queued
            nursery.cancel_scope.cancel()
    finally:
        counter.close()
    return rate, nxt


async def _drain(raw: socket.socket, counter: _Counter) -> None:
    """The bare receiver: non-blocking receives until the socket is empty, then wait (perf-limits §7)."""
    recv = raw.recvfrom
    n = 0
    while True:
        try:
            recv(2048)
        except BlockingIOError:
            counter.consumed = n
            counter.publish()
            await trio.lowlevel.wait_readable(raw)
            continue
        n += 1
        if n % 64 == 0:
            counter.consumed = n
            counter.publish()
            await trio.lowlevel.checkpoint()


class _BareReceiver:
    """A Trio UDP socket on 127.0.0.1 drained by :func:`_drain`, with the stdlib alias it uses."""

    async def __aenter__(self) -> _BareReceiver:
        self.sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF)
        await self.sock.bind(("127.0.0.1", 0))
        self.address = self.sock.getsockname()
        self.raw = socket.socket(fileno=self.sock.fileno())
        self.raw.setblocking(False)
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.raw.detach()
        self.sock.close()


async def _bare_round(feed: _Feed, end: int, seconds: float) -> float:
    counter = _Counter()
    try:
        async with _BareReceiver() as bare, trio.open_nursery() as nursery:
            nursery.start_soon(_drain, bare.raw, counter)
            proc = await _sender(feed.path, ("127.0.0.3", 0), bare.address, 0, end, counter)
            total = end
            rate = await _measure(counter, seconds, proc, total)
            await _finish(proc, counter)
            nursery.cancel_scope.cancel()
    finally:
        counter.close()
    return rate


_FILL = 800  # datagrams per prefilled burst: well inside a 1 MiB receive buffer


async def _timed_drain(read: Callable[[], int], fill: Callable[[int], int], seconds: float) -> float:
    """Datagrams/s of a receiver emptying bursts written into its socket while it could not run.

    *fill(k)* writes up to k datagrams synchronously (no checkpoint, so the
    receiver is idle meanwhile) and returns how many; only the draining is
    timed.  The cost per datagram is then free of the sender's CPU share.
    """
    done, timed = 0, 0.0
    stop = time.perf_counter() + seconds
    while time.perf_counter() < stop:
        before = read()
        sent = fill(_FILL)
        if not sent:
            break
        t0 = time.perf_counter()
        while read() < before + sent and time.perf_counter() < t0 + 2.0:
            await trio.lowlevel.checkpoint()
        timed += time.perf_counter() - t0
        done += read() - before
    return done / timed if timed else 0.0


async def _prefilled(a: Node, feed: _Feed, start: int, end: int, seconds: float) -> tuple[float, float, float, int]:
    """(node datagrams/s through its data handler, through its event channel, bare datagrams/s, next index)
    with prefilled socket buffers."""
    datagrams = _read_datagrams(feed.path)
    end = min(end, feed.count)
    middle = start + (end - start) // 2  # the event-channel drain takes the first half, the data handler the rest
    index = start

    def sender(dest: tuple[str, int], sock: socket.socket, advance: bool, until: int = end) -> Callable[[int], int]:
        def fill(k: int) -> int:
            nonlocal index
            i = index if advance else 0
            n = 0
            for _ in range(k):
                if i >= until:
                    break
                sock.sendto(datagrams[i], dest)
                i += 1
                n += 1
            if advance:
                index = i
            return n

        return fill

    node_counter, bare_counter = _Counter(), _Counter()
    src = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        src.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _RCVBUF)
        src.bind(feed.source)  # B's address: the peer A knows
        async with _BareReceiver() as bare, trio.open_nursery() as nursery:
            nursery.start_soon(_consume, a.events(), node_counter)
            nursery.start_soon(_drain, bare.raw, bare_counter)
            bare_rate = await _timed_drain(lambda: bare_counter.consumed, sender(bare.address, src, False), seconds / 3)
            node_rate = await _timed_drain(lambda: node_counter.consumed, sender(a.address, src, True, middle), seconds / 3)
            index = max(index, middle)
            # The same node with a data handler (Node.set_data_handler), as an application at this rate uses it.
            handled = [0]

            def on_data(index: int, data: bytes, reliable: bool) -> None:
                handled[0] += 1

            a.set_data_handler(on_data)
            try:
                handler_rate = await _timed_drain(lambda: handled[0], sender(a.address, src, True), seconds / 3)
            finally:
                a.set_data_handler(None)
            nursery.cancel_scope.cancel()
    finally:
        src.close()
        node_counter.close()
        bare_counter.close()
    return handler_rate, node_rate, bare_rate, index


async def _receive(budget: Budget, profile_path: str | None = None) -> list[Figure]:
    with tempfile.TemporaryDirectory(prefix="pianode-bench-") as tmp:
        async with AsyncExitStack() as stack:
            a = await stack.enter_async_context(open_node(_config(budget, "127.0.0.1")))
            await a.create_mesh()
            async with AsyncExitStack() as b_stack:
                b = await b_stack.enter_async_context(open_node(_config(budget, "127.0.0.2")))
                with trio.fail_after(15):
                    await b.join(a.address)
                    if not await a.wait_connected(1, 10):
                        raise RuntimeError("the bench nodes did not connect")
                await trio.sleep(0.3)  # let the last acks of the handshake land
                b_address = b.address
            # B is stopped; its session state lives on and seals the feed, and
            # its address becomes the sender's.  A still counts B as connected.
            feed = _forge_feed(b, b_address, a, budget, os.path.join(tmp, "datagrams"))
            start = 0
            rounds = 2 * budget.receive_rounds + 1 + (profile_path is not None)
            share = feed.count // rounds  # a short feed is split between the rounds (ids never repeat)
            ratios, nodes, bares = [], [], []
            costs: list[tuple[float, float]] = []
            for _ in range(budget.receive_rounds):
                bare = await _bare_round(feed, share, budget.receive_seconds)
                node, start = await _node_round(a, feed, start, start + share, budget.receive_seconds)
                bares.append(bare)
                nodes.append(node)
                ratios.append(node / bare if bare else 0.0)
                handler_pf, node_pf, bare_pf, start = await _prefilled(a, feed, start, start + share, budget.receive_seconds)
                if handler_pf and node_pf and bare_pf:
                    costs.append((1e6 / handler_pf, 1e6 / bare_pf, 1e6 / node_pf))
            stages = _stages(a, feed, start, start + share)
            start += share
            if profile_path is not None:
                prof = cProfile.Profile()
                prof.enable()
                await _node_round(a, feed, start, start + share, budget.receive_seconds)
                prof.disable()
                prof.dump_stats(profile_path)
            stats = a.statistics()
    ratio = 100 * statistics.median(ratios)
    node_rate = statistics.median(nodes)
    figures = []
    if stages:
        figures.append(
            Figure(
                "receive",
                "receive stages: sans-IO session.receive_datagram per datagram",
                stages["session_us"],
                "µs",
                "",
                None,
                f"of which {stages['decode_path']} {stages['decode_us']:.2f} µs (AEAD open {stages['open_us']:.2f} µs);"
                f" {stages['accepted']}/{stages['datagrams']} accepted; the rest of the prefilled cost is the"
                " driver, socket and event channel",
                stages,
            )
        )
    prefilled: list[Figure] = []
    if costs:
        node_us = statistics.median(c[0] for c in costs)
        bare_us = statistics.median(c[1] for c in costs)
        # Paired per round, like the live ratio: the bare drain's cost over the node's.
        events_us = statistics.median(c[2] for c in costs)
        pf_ratio = 100 * statistics.median(c[1] / c[0] for c in costs)
        events_ratio = 100 * statistics.median(c[1] / c[2] for c in costs)
        prefilled.append(
            Figure(
                "receive",
                f"one node decrypt+dispatch, prefilled socket (Pia {budget.version}, {budget.receive_payload} B payload)",
                pf_ratio,
                "%",
                "≥ 25 %",
                at_least(pf_ratio, 25.0),
                f"node {node_us:.2f} µs a datagram to its data handler vs bare Trio drain {bare_us:.2f} µs "
                f"({1e6 / node_us / 1e3:.1f}k/s on one core; no sender competes for the CPU)",
                {"node_us": [c[0] for c in costs], "bare_us": [c[1] for c in costs]},
            )
        )
        # The event channel (Node.events(): an event object and a consumer task per batch) beside it, untargeted:
        # an application at these rates takes the data handler.
        prefilled.append(
            Figure(
                "receive",
                f"the same through the node's event channel (Pia {budget.version})",
                events_ratio,
                "%",
                "",
                None,
                f"node {events_us:.2f} µs a datagram to a consumer of Node.events() vs bare {bare_us:.2f} µs",
                {"events_us": [c[2] for c in costs]},
            )
        )
    return [
        Figure(
            "receive",
            f"one node decrypt+dispatch, live sender (Pia {budget.version}, {budget.receive_payload} B payload)",
            ratio,
            "%",
            "≥ 25 %",
            at_least(ratio, 25.0),
            f"{node_rate / 1e3:.1f}k/s vs bare Trio drain {statistics.median(bares) / 1e3:.1f}k/s, both fed live by"
            " a sender in another process",
            {"node_rates": nodes, "bare_rates": bares, "ratios": ratios, "node_statistics": stats},
        ),
        *prefilled,
        Figure(
            "receive",
            "one node datagrams/s (absolute, this machine)",
            node_rate,
            "/s",
            "≥ 100k/s",
            at_least(node_rate, 100_000.0),
            f"drops {stats.get('drops')}",
        ),
        *figures,
    ]


def _stages(a: Node, feed: _Feed, start: int, end: int) -> dict[str, Any]:
    """Per-datagram cost of the receive path's layers, measured on A's own objects.

    Synchronous (no checkpoint), so A's driver cannot interleave; each datagram
    of the slice goes through ``session.receive_datagram`` once (fresh nonces,
    no replay), after the session's decode (the station's opener, which
    ``receive_datagram`` uses once it has one, else ``codec.decode_lone``) and the
    bare AEAD open were timed on the same bytes (they change no state but
    ``last_nonce``).
    """
    session = a.session
    if session is None or session.codec is None:
        return {}
    datagrams = _read_datagrams(feed.path)[start : min(end, feed.count, start + 20_000)]
    if not datagrams:
        return {}
    codec, src_ip = session.codec, feed.source[0]
    peer = session.peers.get(feed.source)
    opener = peer.opener[1] if peer is not None and peer.opener is not None else None
    t0 = time.perf_counter()
    if opener is not None:
        for d in datagrams:
            opener(d)  # none kept (the garbage collector would be timed)
    else:
        for d in datagrams:
            codec.decode_lone(d, src_ip)
    decode = time.perf_counter() - t0
    packets = [codec.decode(d, src_ip) for d in datagrams]
    # The codec's per-key AEAD object and nonce builder (benchmark introspection;
    # skipped if the codec's internals change).
    aead, nonce_of = getattr(codec, "_gcm", None), getattr(codec, "_nonce", None)
    open_ = float("nan")
    if aead is not None and nonce_of is not None and packets[0].header.tag and not packets[0].footer:
        opened = []
        for d, p in zip(datagrams, packets):
            tag = p.header.tag
            opened.append((nonce_of(p.header, src_ip), d[d.index(tag) + len(tag) :], tag))
        t0 = time.perf_counter()
        for nonce, body, tag in opened:
            aead.open(nonce, body, tag)
        open_ = time.perf_counter() - t0
    now = trio.current_time()
    receive = session.receive_datagram
    before = session.counters["packets_received"]
    t0 = time.perf_counter()
    for d in datagrams:
        receive(d, feed.source, now)
    full = time.perf_counter() - t0
    accepted = session.counters["packets_received"] - before
    n = len(datagrams)
    return {
        "datagrams": n,
        "accepted": accepted,
        "decode_us": 1e6 * decode / n,
        "decode_path": "the station's opener" if opener is not None else "codec.decode_lone",
        "open_us": 1e6 * open_ / n,
        "session_us": 1e6 * full / n,
    }


def bench_receive(budget: Budget) -> list[Figure]:
    return trio.run(_receive, budget)


# ---------------------------------------------------------------------------- memory


async def _form(budget: Budget, stack: AsyncExitStack, n: int) -> list[Node]:
    nodes = []
    for i in range(n):
        nodes.append(await stack.enter_async_context(open_node(_config(budget, f"127.0.0.{i + 1}"))))
    await nodes[0].create_mesh()
    async with trio.open_nursery() as joins:
        for node in nodes[1:]:
            joins.start_soon(node.join, nodes[0].address)
    with trio.move_on_after(10 + n):
        for node in nodes:
            await node.wait_connected(n - 1, 10 + n)
    return nodes


async def _memory(budget: Budget) -> list[Figure]:
    n = budget.memory_stations
    async with AsyncExitStack() as warm:  # imports, caches and first-use allocations
        await _form(budget, warm, 2)
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        async with AsyncExitStack() as stack:
            nodes = await _form(budget, stack, n)
            formed = all(sum(1 for s in node.stations() if s.state == "connected") == n - 1 for node in nodes)
            await trio.sleep(budget.memory_idle)
            gc.collect()
            current, peak = tracemalloc.get_traced_memory()
            top = tracemalloc.take_snapshot().statistics("filename")[:8]
    finally:
        tracemalloc.stop()
    per_node = (current - base) / n / 1024
    return [
        Figure(
            "memory",
            f"Python heap per idle node, {n} stations",
            per_node,
            "KiB",
            "< 1024 KiB",
            below(per_node, 1024.0) and formed,
            f"{(current - base) / 2**20:.2f} MiB for {n} nodes, peak {(peak - base) / 2**20:.2f} MiB"
            + ("" if formed else "; the mesh did not fully form"),
            {"by_file": [(str(s.traceback[0].filename), s.size) for s in top]},
        )
    ]


def bench_memory(budget: Budget) -> list[Figure]:
    return trio.run(_memory, budget)


# ---------------------------------------------------------------------------- rtt


async def _bare_rtt(pings: int, payload: bytes) -> list[float]:
    server = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
    client = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
    await server.bind(("127.0.0.1", 0))
    await client.bind(("127.0.0.1", 0))
    dest = server.getsockname()
    samples = []
    with server, client:
        async with trio.open_nursery() as nursery:

            async def echo() -> None:
                while True:
                    data, addr = await server.recvfrom(2048)
                    await server.sendto(data, addr)

            nursery.start_soon(echo)
            for _ in range(pings):
                with trio.move_on_after(1):
                    t = time.perf_counter()
                    await client.sendto(payload, dest)
                    await client.recvfrom(2048)
                    samples.append(time.perf_counter() - t)
            nursery.cancel_scope.cancel()
    return samples


async def _node_rtt(a: Node, b: Node, pings: int, payload: bytes) -> list[float]:
    assert b.station_index is not None
    target = b.station_index
    samples = []
    a_events, b_events = a.events(), b.events()
    async with trio.open_nursery() as nursery:

        async def echo() -> None:
            async for event in b_events:
                if isinstance(event, DataReceived) and event.data[:1] == b"P":
                    await b.send(event.source_index, event.data, reliable=False)

        nursery.start_soon(echo)
        for i in range(pings):
            ping = b"P" + i.to_bytes(4, "big") + payload[5:]
            with trio.move_on_after(1):
                t = time.perf_counter()
                await a.send(target, ping, reliable=False)
                while True:
                    event = await a_events.receive()
                    if isinstance(event, DataReceived) and event.data == ping:
                        samples.append(time.perf_counter() - t)
                        break
        nursery.cancel_scope.cancel()
    return samples


async def _rtt(budget: Budget) -> list[Figure]:
    payload = bytes(64)
    bare_medians, node_medians, lost = [], [], 0
    async with AsyncExitStack() as stack:
        a, b = await _pair(budget, stack)
        for _ in range(budget.rtt_rounds):
            bare = await _bare_rtt(budget.rtt_pings, payload)
            node = await _node_rtt(a, b, budget.rtt_pings, payload)
            lost += budget.rtt_pings - len(node)
            if bare and node:
                bare_medians.append(statistics.median(bare))
                node_medians.append(statistics.median(node))
    if not node_medians:
        return [Figure("rtt", "RTT overhead over a bare Trio echo", None, "µs", "< 100 µs", False, "no round trip completed")]
    bare_us = 1e6 * statistics.median(bare_medians)
    node_us = 1e6 * statistics.median(node_medians)
    overhead = node_us - bare_us
    return [
        Figure(
            "rtt",
            f"RTT overhead over a bare Trio echo (Pia {budget.version}, 64 B)",
            overhead,
            "µs",
            "< 100 µs",
            below(overhead, 100.0),
            f"median {node_us:.0f} µs through pianode vs {bare_us:.0f} µs bare; {lost} pings lost",
            {"node_medians_us": [1e6 * x for x in node_medians], "bare_medians_us": [1e6 * x for x in bare_medians]},
        )
    ]


def bench_rtt(budget: Budget) -> list[Figure]:
    return trio.run(_rtt, budget)


# ---------------------------------------------------------------------------- profiles


def _top(path: str, count: int = 25) -> str:
    out = io.StringIO()
    stats = pstats.Stats(path, stream=out)
    stats.sort_stats("tottime").print_stats(count)
    return out.getvalue()


#: The sections ``--profile`` profiles (profile_hot_paths), in the order it does.
PROFILED = ("receive", "session")


def profile_hot_paths(budget: Budget, sections: Sequence[str], progress: Callable[[str], None] | None = None) -> dict[str, str]:
    """cProfile the receive path and the bench's real-time session, shorter, those of :data:`PROFILED` among
    *sections* (at least one: budget_from_args refuses a run with none); returns {name: pstats path}."""
    assert budget.profile_dir is not None
    os.makedirs(budget.profile_dir, exist_ok=True)
    written: dict[str, str] = {}
    if "receive" in sections:
        path = os.path.join(budget.profile_dir, "receive.pstats")
        trio.run(_receive, attrs.evolve(budget, receive_rounds=1), path)
        written["receive"] = path
    if "session" in sections:
        path = os.path.join(budget.profile_dir, "session.pstats")
        run = session_run(budget, min(budget.session_seconds, budget.profile_session_seconds), split=False)
        prof = cProfile.Profile()
        prof.enable()
        trio.run(run.run)
        prof.disable()
        prof.dump_stats(path)
        written["session"] = path
    for name, path in written.items():
        with open(path[: -len(".pstats")] + ".txt", "w") as f:
            f.write(_top(path, 60))
        if progress is not None:
            progress(f"profile {name}: {path}\n{_top(path, 25)}")
    return written


# ---------------------------------------------------------------------------- sender process


def _hostport(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host, int(port)


def sender_main(argv: Sequence[str]) -> int:
    """Send prepared datagrams, flow controlled by the receiver's consumed count.

    Bounded: stops when the receiver sets the stop word, after 120 s, or at
    ``--end`` (each datagram is sent once: a repeated nonce is a replay).
    """
    p = argparse.ArgumentParser(prog="pianode.bench.net sender")
    p.add_argument("--file", required=True)
    p.add_argument("--source", type=_hostport, required=True)
    p.add_argument("--dest", type=_hostport, required=True)
    p.add_argument("--start", type=int, default=0)
    p.add_argument("--end", type=int, default=None, help="stop before this index")
    p.add_argument("--counter", required=True)
    p.add_argument("--window", type=int, default=WINDOW)
    args = p.parse_args(argv)
    datagrams = _read_datagrams(args.file)
    n = len(datagrams)
    end = n if args.end is None else min(args.end, n)
    dest = args.dest
    if not dest[0].startswith("127.") or not args.source[0].startswith("127."):
        print("sender: loopback only", file=sys.stderr)
        return 2
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, _RCVBUF)
    sock.bind(args.source)
    fd = os.open(args.counter, os.O_RDONLY)
    shared = mmap.mmap(fd, _COUNTER.size, prot=mmap.PROT_READ)
    os.close(fd)
    unpack = _COUNTER.unpack_from
    send = sock.sendto
    window = args.window
    idx = min(args.start, end)
    sent = 0
    base = unpack(shared, 0)[0]
    lost = 0  # datagrams written off after a stall (the receiver dropped them)
    last_seen, last_change = base, time.monotonic()
    hard_stop = last_change + 120.0
    while True:
        consumed, stop = unpack(shared, 0)
        if stop:
            break
        now = time.monotonic()
        if now > hard_stop:
            break
        done = consumed - base
        if consumed != last_seen:
            last_seen, last_change = consumed, now
        elif now - last_change > 0.2 and sent - lost > done:
            lost = sent - done  # nothing consumed for 200 ms: assume the rest is gone
            last_change = now
        room = window - (sent - lost - done)
        if room <= 0:
            continue
        for _ in range(min(room, 32)):
            if idx >= end:
                break
            try:
                send(datagrams[idx], dest)
            except BlockingIOError:
                break
            sent += 1
            idx += 1
        if idx >= end:
            # Used up: wait for the stop word so the receiver's measurement is not cut short.
            while not unpack(shared, 0)[1] and time.monotonic() < hard_stop:
                time.sleep(0.01)
            break
    print(f"sent={sent} next={idx}", flush=True)
    return 0


if __name__ == "__main__":
    if sys.argv[1:2] == ["sender"]:
        sys.exit(sender_main(sys.argv[2:]))
    print("usage: python -m pianode.bench.net sender ...", file=sys.stderr)
    sys.exit(2)
