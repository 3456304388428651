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
    stations: int, backend: str | None, seconds: float, *, rate: float | None = None, first_address: str = "127.0.0.1"
) -> dict[str, Any]:
    """``{"cpu_us_per_frame", "socket_us_per_frame", "frames", "backend", "rate"}`` of the bare loop (see the
    module): *stations* sockets on *first_address* and the addresses after it, rounds at *rate* a second
    (None: flat out)."""
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
        full_us, frames = _loop(socks, aead, True, seconds, rate)
        socket_us, _ = _loop(socks, aead, False, seconds / 2, rate)
    finally:
        for s in socks:
            s.close()
    return {"cpu_us_per_frame": full_us, "socket_us_per_frame": socket_us, "frames": frames, "backend": backend,
            "rate": rate}  # fmt: skip


def _loop(socks: list[socket.socket], aead: Any, crypto: bool, seconds: float, rate: float | None) -> tuple[float, int]:
    """(CPU µs per delivered frame, frames delivered) of frame rounds for about *seconds*: flat out, or
    ``round(seconds * rate)`` rounds (at least one), round k at its start + k / *rate*."""
    addresses = [s.getsockname() for s in socks]
    targets = [[(s.sendto, a) for a in addresses if a != s.getsockname()] for s in socks]
    receives = [s.recvfrom for s in socks]
    # An AEAD that seals and opens many packets cheaper than one by one (pycryptodome's fast path, as the
    # node uses it for a frame to every station and for a batch read in one go) does so here too.
    one_round = _batched_round if crypto and getattr(aead, "batched", False) else _round
    counter = 0
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
    used = time.process_time() - cpu
    return (1e6 * used / delivered if delivered else float("nan")), delivered


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
