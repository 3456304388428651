"""Many datagrams in one system call: Linux ``recvmmsg(2)`` and ``sendmmsg(2)`` for :class:`pianode.mesh.udp.UdpEndpoint`.

Theory of operation: draining a socket with ``recvfrom`` costs a system call and a Python method call per
datagram, and one more that fails when the socket is empty.  In a 32-station session at 60 Hz a station
reads about 31 datagrams a tick, so a node makes about 60,000 such calls a second.  ``recvmmsg`` reads
up to a batch into buffers made once, in one call; what is left per datagram is copying it out (a
``bytes``, as ``recvfrom`` makes) and naming its sender.

* The buffers: one slot of ``size`` bytes per datagram of a batch, an ``iovec`` per slot pointing at it,
  a ``sockaddr_in`` per slot for the sender, and the ``mmsghdr`` array tying them together, all made
  once per endpoint with :mod:`ctypes` (the layouts from ``<sys/socket.h>``, so their sizes and
  offsets are the platform's).
* After a call: each datagram's length is its header's ``msg_len`` (bytes copied into the slot: a
  datagram longer than the slot arrives cut to it, as ``recvfrom(size)`` cuts it); its sender is read
  from the slot's ``sockaddr_in`` and given as the ``(host, port)`` tuple ``recvfrom`` gives, one tuple
  per sender kept in a bounded table (a station hears from the same few addresses all the time).
  Lengths, senders and the datagrams themselves are read by one ``struct`` call each, made once per
  batch size (and longest length: a session's frames have one), rather than by Python steps per
  datagram; a datagram shorter than the batch's longest is then cut to its length (a batch with a
  datagram longer than ``_CUT_LIMIT`` and shorter ones is read slot by slot instead).
* Errors: an empty socket gives no datagram (no exception, unlike ``recvfrom``), and any other error
  raises ``OSError`` with its errno (an ICMP error queued on the socket is reported once, by the call that
  meets it first; datagrams read before it in the same call are returned first).

Sending is the mirror image (:class:`BatchSender`): a station sends a frame to every other station at
once, a datagram each, so one ``sendmmsg`` replaces a ``sendto`` per peer.  The datagrams are copied
one after another into one buffer and each one's destination as a ``sockaddr_in`` (made once per
address) into another; the ``iovec`` of each points at its datagram (made once per length when all have one, as a
frame to every station has).  The kernel delivers each as ``sendto`` would, in order; a call that stops
early (a full buffer, an error) is continued from where it stopped, so an error is met by the call
that starts with its datagram and reported as ``sendto`` reports it.  A batch with an address that is
not a numeric IPv4 one (a name, ``<broadcast>``) is left to ``sendto``.

Only for IPv4 datagram sockets on Linux; elsewhere (no ``recvmmsg`` in the C library, another family)
:func:`batch_receiver` and :func:`batch_sender` return None and the endpoint reads with ``recvfrom`` and
sends with ``sendto``.  ``PIANODE_RECVMMSG=0`` and ``PIANODE_SENDMMSG=0`` turn them off.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import socket
import struct
import sys
import threading
from collections.abc import Sequence
from typing import Any

__all__ = ["BatchReceiver", "BatchSender", "batch_receiver", "batch_sender"]

_MSG_DONTWAIT = 0x40  # <bits/socket.h>, Linux
_ADDRESS_TABLE_LIMIT = 4096
_LAYOUT_TABLE_LIMIT = 256
#: A batch of mixed lengths whose longest is at most this is read at that length and the others cut.
_CUT_LIMIT = 512


class _IoVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


class _SockaddrIn(ctypes.Structure):
    _fields_ = [
        ("sin_family", ctypes.c_ushort),
        ("sin_port", ctypes.c_uint16),  # network byte order
        ("sin_addr", ctypes.c_uint8 * 4),
        ("sin_zero", ctypes.c_uint8 * 8),
    ]


class _MsgHdr(ctypes.Structure):
    _fields_ = [
        ("msg_name", ctypes.c_void_p),
        ("msg_namelen", ctypes.c_uint32),  # socklen_t
        ("msg_iov", ctypes.POINTER(_IoVec)),
        ("msg_iovlen", ctypes.c_size_t),
        ("msg_control", ctypes.c_void_p),
        ("msg_controllen", ctypes.c_size_t),
        ("msg_flags", ctypes.c_int),
    ]


class _MMsgHdr(ctypes.Structure):
    _fields_ = [("msg_hdr", _MsgHdr), ("msg_len", ctypes.c_uint)]


@functools.cache
def _load_libc(name: str) -> Any:
    """The C library's ``recvmmsg`` or ``sendmmsg`` with its argument types set (looked up once), or None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = getattr(libc, name)
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_uint, ctypes.c_int] + ([ctypes.c_void_p] if name == "recvmmsg" else [])
    fn.restype = ctypes.c_int
    return fn


class _Buffers:
    """What a :class:`BatchReceiver` reads into and with: the slots, sender addresses, ``iovec`` and
    ``mmsghdr`` arrays for *slots* datagrams of *size* bytes, and the ``struct`` layouts and the sender
    table made from them.

    One per thread and (slots, size), shared by every receiver of the thread (:func:`_buffers`): a call
    fills them and copies every datagram and sender out before it returns, and a thread makes one call
    at a time, so what one receiver left in them is never read by another.  Thirty-two stations in one
    process used to keep 32 copies (128 KiB each at 64 slots of 2,049 bytes) and made the kernel write
    each tick's datagrams into lines that had left the CPU's cache since the station's last tick; now
    each tick's calls reuse the same few lines.
    """

    def __init__(self, slots: int, size: int) -> None:
        self.data = ctypes.create_string_buffer(slots * size)
        self.view = memoryview(self.data).cast("B")
        self.names = (_SockaddrIn * slots)()
        iovecs = self.iovecs = (_IoVec * slots)()
        self.headers = (_MMsgHdr * slots)()
        data, names, name_size = ctypes.addressof(self.data), ctypes.addressof(self.names), ctypes.sizeof(_SockaddrIn)
        for i in range(slots):
            iovecs[i].iov_base = data + i * size
            iovecs[i].iov_len = size
            header = self.headers[i].msg_hdr
            header.msg_name = names + i * name_size
            header.msg_namelen = name_size
            header.msg_iov = ctypes.pointer(iovecs[i])
            header.msg_iovlen = 1
        # The kernel writes each header's name length and flags back: restored from this copy before a call.
        self.template = bytes(self.headers)
        self.headers_at = ctypes.addressof(self.headers)
        record, length_at = ctypes.sizeof(_MMsgHdr), _MMsgHdr.msg_len.offset
        #: The lengths of the first n datagrams: msg_len of the first n headers, by n.
        self.lengths = [struct.Struct("=" + f"{length_at}xI{record - length_at - 4}x" * n) for n in range(slots + 1)]
        port_at, address_at = _SockaddrIn.sin_port.offset, _SockaddrIn.sin_addr.offset
        assert address_at == port_at + 2  # (sockaddr_in: the port, then the address)
        #: The senders of the first n datagrams, each as the 6 bytes of its port and address, by n.
        key_end = address_at + 4
        self.keys = [struct.Struct("=" + f"{port_at}x{key_end - port_at}s{name_size - key_end}x" * n) for n in range(slots + 1)]
        self.senders: dict[bytes, tuple[str, int]] = {}
        #: The first `length` bytes of the first n slots, by (length, n): see BatchReceiver.receive.
        self.layouts: dict[tuple[int, int], struct.Struct] = {}


_THREAD = threading.local()


def _buffers(slots: int, size: int, kind: type[Any] | None = None) -> Any:
    """This thread's buffers of *kind* (:class:`_Buffers`, the default, or :class:`_SendBuffers`) for *slots*
    datagrams of *size* bytes, made on first use."""
    kind = kind or _Buffers
    kept = getattr(_THREAD, "buffers", None)
    if kept is None:
        kept = _THREAD.buffers = {}
    found = kept.get((kind, slots, size))
    if found is None:
        found = kept[(kind, slots, size)] = kind(slots, size)
    return found


class BatchReceiver:
    """``recvfrom`` for up to *slots* datagrams of at most *size* bytes at a time, on descriptor *fd*; used
    in the thread that made it (its buffers are that thread's: ``_Buffers``), as a Trio run's endpoints are."""

    def __init__(self, fd: int, slots: int, size: int, recvmmsg: Any) -> None:
        self._fd = fd
        self._slots = slots
        self._size = size
        self._call = recvmmsg
        # The buffers and tables: this thread's for (slots, size), shared by every receiver it makes (see
        # _Buffers), each bound here as an attribute of the receiver so that a call reads them directly.
        b: _Buffers = _buffers(slots, size)
        self._data, self._view, self._names, self._headers = b.data, b.view, b.names, b.headers
        self._template, self._headers_at = b.template, b.headers_at
        self._lengths, self._keys, self._senders, self._layouts = b.lengths, b.keys, b.senders, b.layouts

    def receive(self, limit: int) -> list[tuple[bytes, tuple[str, int]]]:
        """Up to *limit* (at most the slots) waiting datagrams as ``(data, (host, port))``, none when none
        waits; raises ``OSError`` for an error the socket reports."""
        ctypes.memmove(self._headers_at, self._template, len(self._template))
        n = self._call(self._fd, self._headers_at, min(limit, self._slots), _MSG_DONTWAIT, None)
        if n <= 0:
            code = ctypes.get_errno() if n < 0 else 0
            if n == 0 or code in (0, errno.EAGAIN, errno.EWOULDBLOCK):
                return []
            raise OSError(code, os.strerror(code))
        # Copied out with a call per batch, not Python steps per datagram: n fields of the longest
        # datagram's length, the shorter then cut (a session's frames have one length, and what comes
        # between them is short); a batch with a long datagram and shorter ones slot by slot, so that
        # the short ones are not copied at the long one's length.
        lengths = self._lengths[n].unpack_from(self._headers)
        top, shortest = max(lengths), min(lengths)
        datagrams: Sequence[bytes]
        if top <= _CUT_LIMIT or shortest == top:
            datagrams = (self._layouts.get((top, n)) or self._layout(top, n)).unpack_from(self._data)
            if shortest != top:
                datagrams = [d if len(d) == length else d[:length] for d, length in zip(datagrams, lengths)]
        else:
            view, size = self._view, self._size
            datagrams = [view[i * size : i * size + length].tobytes() for i, length in enumerate(lengths)]
        keys = self._keys[n].unpack_from(self._names)
        senders = list(map(self._senders.get, keys))
        if None in senders:
            senders = [self._sender(key) if sender is None else sender for sender, key in zip(senders, keys)]
        return list(zip(datagrams, senders))

    def _layout(self, length: int, n: int) -> struct.Struct:
        """The struct that reads the first *length* bytes of n slots (kept: a session's frames have few sizes)."""
        if len(self._layouts) >= _LAYOUT_TABLE_LIMIT:
            self._layouts.clear()
        layout = self._layouts[(length, n)] = struct.Struct("=" + f"{length}s{self._size - length}x" * n)
        return layout

    def _sender(self, key: bytes) -> tuple[str, int]:
        """The ``(host, port)`` tuple of a sockaddr_in's port and address bytes, kept for the next time."""
        if len(self._senders) >= _ADDRESS_TABLE_LIMIT:
            self._senders.clear()
        sender = (socket.inet_ntoa(key[2:6]), int.from_bytes(key[:2], "big"))
        self._senders[key] = sender
        return sender


def batch_receiver(sock: socket.socket, slots: int, size: int) -> BatchReceiver | None:
    """A :class:`BatchReceiver` for *sock* (an IPv4 datagram socket), or None where ``recvmmsg`` is not
    to be had (then read with ``recvfrom``).  ``PIANODE_RECVMMSG=0`` turns it off."""
    call = _call_for(sock, "recvmmsg")
    return None if call is None else BatchReceiver(sock.fileno(), slots, size, call)


def _call_for(sock: socket.socket, name: str) -> Any:
    """The C library's *name* (``recvmmsg``, ``sendmmsg``) for *sock*, or None: not an IPv4 datagram
    socket, not to be had here, or turned off by ``PIANODE_<NAME>=0``."""
    if os.environ.get(f"PIANODE_{name.upper()}", "1") == "0":
        return None
    if sock.family != socket.AF_INET or sock.type != socket.SOCK_DGRAM:
        return None
    return _load_libc(name)


class _SendBuffers:
    """What a :class:`BatchSender` fills and hands to ``sendmmsg``: room for *slots* datagrams of *size*
    bytes one after another, a ``sockaddr_in`` per datagram, an ``iovec`` per datagram and the ``mmsghdr``
    array tying them together (header i names address i and iovec i, made once); one per thread and (slots,
    size), shared by its senders as :class:`_Buffers` is by its receivers (a call sends everything it
    was given before it returns)."""

    def __init__(self, slots: int, size: int) -> None:
        self.size = slots * size
        self.data = ctypes.create_string_buffer(self.size)
        self.data_at = ctypes.addressof(self.data)
        self.names = (_SockaddrIn * slots)()
        self.names_at = ctypes.addressof(self.names)
        self.iovecs = (_IoVec * slots)()
        self.iovecs_at = ctypes.addressof(self.iovecs)
        self.headers = (_MMsgHdr * slots)()
        self.headers_at = ctypes.addressof(self.headers)
        name_size = ctypes.sizeof(_SockaddrIn)
        for i in range(slots):
            header = self.headers[i].msg_hdr
            header.msg_name = self.names_at + i * name_size
            header.msg_namelen = name_size
            header.msg_iov = ctypes.pointer(self.iovecs[i])
            header.msg_iovlen = 1
        #: The iovecs of datagrams of one length laid one after another, by length (bytes of every slot).
        self.even: dict[int, bytes] = {}
        #: The length the iovecs hold now (-1: another layout); written only when it changes.
        self.even_now = -1
        #: Packs the iovecs of the first n datagrams of any lengths, by n.
        self.uneven = [struct.Struct("PN" * n) for n in range(slots + 1)]  # (native: a pointer and a size_t)
        #: ``sockaddr_in`` bytes by ``(host, port)``; None for an address that is not numeric IPv4.
        self.names_by_address: dict[tuple[str, int], bytes | None] = {}
        assert self.uneven[1].size == ctypes.sizeof(_IoVec)


class BatchSender:
    """``sendto`` for many datagrams at a time on descriptor *fd* (up to *slots* a call, at most *size*
    bytes on average); used in the thread that made it, as :class:`BatchReceiver` is."""

    def __init__(self, fd: int, slots: int, size: int, sendmmsg: Any) -> None:
        self._fd = fd
        self._slots = slots
        self._call = sendmmsg
        self._b: _SendBuffers = _buffers(slots, size, _SendBuffers)

    def send(self, out: Sequence[tuple[bytes, tuple[str, int]]], start: int) -> int | None:
        """Send ``out[start:]`` from its first datagram on, as many as one call takes (the slots, and the
        datagrams that fit in the buffer); returns how many went, in order: fewer when the kernel takes no
        more now (0: none), or None when they are not for this way (an address that is not numeric IPv4,
        a first datagram longer than the buffer): then send them with ``sendto``.  Raises ``OSError``
        for an error of the first datagram, as ``sendto`` would (it is not sent)."""
        b = self._b
        chunk = out[start : start + self._slots]
        datagrams = [data for data, _ in chunk]
        lengths = list(map(len, datagrams))
        shortest, longest = min(lengths), max(lengths)
        if longest * len(chunk) > b.size:
            # (they do not all fit: as many as do, one or more)
            total, n = 0, 0
            for length in lengths:
                if total + length > b.size:
                    break
                total, n = total + length, n + 1
            if n == 0:
                return None
            chunk, datagrams, lengths = chunk[:n], datagrams[:n], lengths[:n]
            shortest, longest = min(lengths), max(lengths)
        table = b.names_by_address
        names = [table.get(addr) or _address_bytes(table, addr) for _, addr in chunk]
        if None in names:
            return None
        n = len(chunk)
        joined = b"".join(datagrams)
        ctypes.memmove(b.data_at, joined, len(joined))
        joined_names = b"".join(names)  # type: ignore[arg-type]
        ctypes.memmove(b.names_at, joined_names, len(joined_names))
        if shortest == longest:
            if b.even_now != longest:
                layout = b.even.get(longest) or _even_iovecs(b, longest)
                ctypes.memmove(b.iovecs_at, layout, len(layout))
                b.even_now = longest
        else:
            at, fields = b.data_at, []
            for length in lengths:
                fields += (at, length)
                at += length
            b.uneven[n].pack_into(b.iovecs, 0, *fields)
            b.even_now = -1
        sent = self._call(self._fd, b.headers_at, n, _MSG_DONTWAIT)
        if sent >= 0:
            return sent
        code = ctypes.get_errno()
        if code in (errno.EAGAIN, errno.EWOULDBLOCK):
            return 0
        raise OSError(code, os.strerror(code))


def _even_iovecs(b: _SendBuffers, length: int) -> bytes:
    """The iovecs of every slot for datagrams of *length* bytes one after another, kept by length."""
    if len(b.even) >= _LAYOUT_TABLE_LIMIT:
        b.even.clear()
    slots = len(b.uneven) - 1
    fit = max(1, min(slots, b.size // max(1, length)))
    fields: list[int] = []
    for i in range(fit):
        fields += (b.data_at + i * length, length)
    layout = b.even[length] = b.uneven[fit].pack(*fields)
    return layout


def _address_bytes(table: dict[tuple[str, int], bytes | None], addr: tuple[str, int]) -> bytes | None:
    """The ``sockaddr_in`` bytes of *addr* (a numeric IPv4 address and a port), or None; kept in *table*."""
    try:
        host, port = addr
        packed = socket.inet_pton(socket.AF_INET, host)
        name = bytes(_SockaddrIn(socket.AF_INET, socket.htons(port), (ctypes.c_uint8 * 4)(*packed)))
    except (OSError, TypeError, ValueError, OverflowError):
        name = None
    if len(table) >= _ADDRESS_TABLE_LIMIT:
        table.clear()
    table[addr] = name
    return name


def batch_sender(sock: socket.socket, slots: int, size: int) -> BatchSender | None:
    """A :class:`BatchSender` for *sock* (an IPv4 datagram socket), or None where ``sendmmsg`` is not
    to be had (then send with ``sendto``).  ``PIANODE_SENDMMSG=0`` turns it off."""
    call = _call_for(sock, "sendmmsg")
    return None if call is None else BatchSender(sock.fileno(), slots, size, call)
