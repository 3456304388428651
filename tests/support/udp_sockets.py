"""Trio UDP sockets for the socket-layer tests (simulated network, fault injection): make, bind, drain.

Theory of operation: the sockets come from ``trio.socket.socket``, so whatever
socket factory a test installs (``SimulatedNetwork``, the fault injector)
serves them.  :func:`drain_datagrams` empties a socket's queue without
waiting, through ``recv_nowait``, which the simulated sockets provide, so a
test can look at exactly what has arrived by now on the virtual clock.
"""

from __future__ import annotations

import os

import trio
from trio import socket as tsocket


def udp() -> tsocket.SocketType:
    return tsocket.socket(tsocket.AF_INET, tsocket.SOCK_DGRAM)


async def bound_udp(ip: str, port: int, *, reuse: bool = False, broadcast: bool = False) -> tsocket.SocketType:
    """A UDP socket bound to (*ip*, *port*), with SO_REUSEADDR / SO_BROADCAST set first if asked."""
    sock = udp()
    if reuse:
        sock.setsockopt(tsocket.SOL_SOCKET, tsocket.SO_REUSEADDR, 1)
    if broadcast:
        sock.setsockopt(tsocket.SOL_SOCKET, tsocket.SO_BROADCAST, 1)
    await sock.bind((ip, port))
    return sock


def drain_datagrams(sock: tsocket.SocketType) -> list[tuple[bytes, tuple[str, int]]]:
    """Every (payload, source) queued on *sock* right now, oldest first, without waiting."""
    got = []
    while True:
        try:
            got.append(sock.recv_nowait())  # type: ignore[attr-defined]
        except trio.WouldBlock:
            return got


def in_readiness_polling(fd: int) -> bool:
    """Whether descriptor *fd* is in one of this process's epoll sets (Linux: the set's fdinfo lists
    each descriptor it watches as ``tfd:``)."""
    for entry in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{entry}") != "anon_inode:[eventpoll]":
                continue
            with open(f"/proc/self/fdinfo/{entry}") as info:
                if any(line.split()[:2] == ["tfd:", str(fd)] for line in info):
                    return True
        except OSError:
            continue
    return False

