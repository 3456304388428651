"""The bare-Python floor of a real-time session: what one delivered frame costs with nothing but sockets and AEAD.

Theory of operation
-------------------
The session figure's CPU per delivered frame (:mod:`pianode.bench.sessions`) needs a reference that a
Python node cannot beat: a plain loop over *stations* non-blocking UDP sockets on 127.0.0.1 .. 127.0.0.N
(no Trio, no node) in which every station seals one frame per other station with the AEAD backend the
node uses and sends it (unicast, as Pia up to 5.26 does), and every station then drains its socket and
opens each datagram.  Per delivered frame that is one seal, one ``sendto``, one ``recvfrom`` and one open:
the work no implementation of a unicast session can skip.  The plaintext is the size of the session's
frame message (message header, 62-byte frame, padding).

It runs for *seconds* of wall time and reports process CPU per delivered frame; a second pass without the
AEAD tells how much of it the sockets are.  Given the session's *rate*, it runs its rounds at that rate, as
the session sends its ticks, and sleeps in between: work that wakes 60 times a second finds its caches
cold, and pays about a third more per frame here than the same loop run flat out (32 stations, 5.18,
cryptography: 6.1 against 4.5 µs), which the session pays too.  Without a rate it runs flat out.  Either
way a tick's cost is spread over its frames: the comparison means what it says at the bench's size (32
stations at 60 Hz, 992 frames a tick), not for a handful of stations.  The AEAD calls are the cheapest this project
knows: ``gcm(key, backend).seal_raw`` (for *cryptography*, ``AESGCM.encrypt`` itself) and the
unchecked full-tag open (``AESGCM.decrypt`` itself), or for pycryptodome its per-key fast path a frame
to every station (and a socket's batch) at a time, as the node calls it.
"""

from __future__ import annotations

import ipaddress
import multiprocessing
import os
import socket
import time
from typing import Any

from protocols.crypto.aead import default_backend, gcm, open_raw

__all__ = ["bare_frame_floor"]

_KEY = bytes.fromhex("000102030405060708090a0b0c0d0e0f")
#: A 5.18 frame message as the session sends it: 16-byte message header + 62-byte frame, 0xFF-padded to 16.
_PLAINTEXT = bytes(16 + 62) + b"\xff" * 2
_RCVBUF = 1 << 20


def bare_frame_floor(
    stations: int, backend: str | None, seconds: float, *, rate: float | None = None, first_address: str = "127.0.0.1",
    processes: int = 1,
) -> dict[str, Any]:
    """``{"cpu_us_per_frame", "socket_us_per_frame", "frames", "backend", "rate", "processes"}`` of the bare
    loop (see the module): *stations* sockets on *first_address* and the addresses after it, rounds at *rate*
    a second (None: flat out), in one process or split over *processes* (see :func:`_split`)."""
    backend = backend or default_backend()
    aead = gcm(_KEY, backend)
    first = ipaddress.IPv4Address(first_address)
    socks: list[socket.socket] = []
    try:
        for i in range(stations):
            s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            socks.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RCVBUF)
            s.bind((str(first + i), 0))
            s.setblocking(False)
        addresses = [s.getsockname() for s in socks]
        if processes > 1:
            (full_cpu, frames), (socket_cpu, socket_frames) = _split(socks, addresses, backend, seconds, rate, processes)
        else:
            full_cpu, frames = _loop(socks, addresses, aead, True, seconds, rate)
            socket_cpu, socket_frames = _loop(socks, addresses, aead, False, seconds / 2, rate)
    finally:
        for s in socks:
            s.close()
    return {"cpu_us_per_frame": _per_frame(full_cpu, frames), "socket_us_per_frame": _per_frame(socket_cpu, socket_frames),
            "frames": frames, "backend": backend, "rate": rate, "processes": processes}  # fmt: skip


def _per_frame(cpu_seconds: float, frames: int) -> float:
    return 1e6 * cpu_seconds / frames if frames else float("nan")


def _split(
    socks: list[socket.socket], addresses: list[Any], backend: str, seconds: float, rate: float | None, processes: int
) -> list[tuple[float, int]]:
    """The bare loop over *processes* forked workers, as ``pianode mesh --processes`` splits a session: each
    takes a contiguous share of the stations, on a core of its own where there are as many cores as
    workers (``pianode.sim.mesh_procs``), sends its stations' frames to every station and drains its own
    sockets, rounds at the same instants in every worker.  A frame between workers crosses cores, as the
    session's do.  ``[(CPU seconds, frames delivered)]`` summed over the workers: with the AEAD, then the
    sockets alone."""
    context = multiprocessing.get_context("fork")
    getter = getattr(os, "sched_getaffinity", None)
    cores = sorted(getter(0)) if getter is not None else []
    share = -(-len(socks) // processes)
    start = time.monotonic() + 0.3  # (CLOCK_MONOTONIC: the same clock in every worker)
    pipes, workers = [], []
    try:
        for k in range(processes):
            receive, send = context.Pipe(duplex=False)
            core = cores[k] if len(cores) == processes else None
            part = socks[k * share : (k + 1) * share]
            worker = context.Process(target=_split_worker, args=(send, part, addresses, backend, seconds, rate, start, core, k),
                                     daemon=True)  # fmt: skip
            worker.start()
            send.close()
            pipes.append(receive)
            workers.append(worker)
        limit = 30 + 3 * seconds
        results = [pipe.recv() if pipe.poll(limit) else None for pipe in pipes]
    finally:
        for worker in workers:
            worker.join(5)
            if worker.is_alive():
                worker.kill()
    if any(r is None for r in results):
        raise RuntimeError("a worker of the split bare loop did not report")
    return [(sum(r[phase][0] for r in results), sum(r[phase][1] for r in results)) for phase in (0, 1)]


def _split_worker(
    pipe: Any, socks: list[socket.socket], addresses: list[Any], backend: str, seconds: float, rate: float | None,
    start: float, core: int | None, position: int,
) -> None:
    """One worker of :func:`_split`: the loop with the AEAD from *start*, then the sockets alone."""
    if core is not None:
        os.sched_setaffinity(0, {core})
    aead = gcm(_KEY, backend)
    out = []
    for crypto, length, at in ((True, seconds, start), (False, seconds / 2, start + seconds + 0.5)):
        while time.monotonic() < at:
            time.sleep(min(0.01, max(0.0, at - time.monotonic())))
        out.append(_loop(socks, addresses, aead, crypto, length, rate, counter=position << 40, drain_after=0.05))
    pipe.send(out)
    pipe.close()


def _loop(
    socks: list[socket.socket], addresses: list[Any], aead: Any, crypto: bool, seconds: float, rate: float | None,
    *, counter: int = 0, drain_after: float = 0.0,
) -> tuple[float, int]:
    """(CPU seconds, frames delivered) of frame rounds for about *seconds*: flat out, or
    ``round(seconds * rate)`` rounds (at least one), round k at its start + k / *rate*; each of *socks*
    sends to every other of *addresses* and drains itself.  With *drain_after*, the sockets are drained
    once more that long after the last round (frames from other workers still on their way)."""
    targets = [[(s.sendto, a) for a in addresses if a != s.getsockname()] for s in socks]
    receives = [s.recvfrom for s in socks]
    # An AEAD that seals and opens many packets cheaper than one by one (pycryptodome's fast path, as the
    # node uses it for a frame to every station and for a batch read in one go) does so here too.
    one_round = _batched_round if crypto and getattr(aead, "batched", False) else _round
    delivered = 0
    rounds = max(1, round(seconds * rate)) if rate else None
    cpu = time.process_time()
    start = time.perf_counter()
    done = 0
    while (done < rounds) if rounds is not None else (time.perf_counter() < start + seconds):
        if rate:
            delay = start + done / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
        done += 1
        counter, got = one_round(targets, receives, aead, crypto, counter)
        delivered += got
    if drain_after:
        time.sleep(drain_after)
        delivered += one_round([[] for _ in socks], receives, aead, crypto, counter)[1]
    return time.process_time() - cpu, delivered


_LEAD = bytes(4)  # the nonce's first 4 bytes (the sender's address in 5.18; constant here)


def _round(targets: list[Any], receives: list[Any], aead: Any, crypto: bool, counter: int) -> tuple[int, int]:
    """One frame from every station to every other, a seal and an open per packet (or none without crypto);
    returns (the nonce counter after it, frames delivered)."""
    seal = aead.seal_raw
    raw = open_raw(aead)
    lead = _LEAD
    plaintext = _PLAINTEXT
    delivered = 0
    for sends in targets:
        for send, address in sends:
            counter += 1
            hn = counter.to_bytes(8, "big")
            send(hn + seal(lead + hn, plaintext, None) if crypto else hn + plaintext, address)
    for recv in receives:
        while True:
            try:
                data, _ = recv(2048)
            except BlockingIOError:
                break
            if crypto:
                nonce = lead + data[:8]
                if raw is not None:
                    raw[0](nonce, data[8:], None)
                else:
                    aead.open(nonce, data[8:-16], data[-16:])
            delivered += 1
    return counter, delivered


def _batched_round(targets: list[Any], receives: list[Any], aead: Any, crypto: bool, counter: int) -> tuple[int, int]:
    """:func:`_round` with one AEAD call per station's frame to all, and one per socket's batch read."""
    lead = _LEAD
    delivered = 0
    for sends in targets:
        if not sends:
            continue
        hns = [(counter + 1 + k).to_bytes(8, "big") for k in range(len(sends))]
        counter += len(sends)
        sealed = aead.seal_raw_many([lead + hn for hn in hns], [_PLAINTEXT] * len(sends))
        for (send, address), hn, body in zip(sends, hns, sealed, strict=True):
            send(hn + body, address)
    for recv in receives:
        batch = []
        while True:
            try:
                batch.append(recv(2048)[0])
            except BlockingIOError:
                break
        if batch:
            opened = aead.open_raw_many([lead + d[:8] for d in batch], [d[8:-16] for d in batch], [d[-16:] for d in batch])
            delivered += len(opened) - opened.count(None)  # (a tag that failed is no frame)
    return counter, delivered
