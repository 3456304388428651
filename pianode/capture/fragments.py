"""IP fragment reassembly for the capture reader: a UDP datagram larger than the path MTU arrives as several
IPv4 (RFC 791 §3.2) or IPv6 (RFC 8200 §4.5) fragments, and tshark shows the whole datagram in the frame of its
last fragment.  :class:`Reassembler` does the same, in bounded memory: at most :data:`MAX_PENDING` datagrams and
:data:`MAX_HELD` bytes wait for their missing fragments (the oldest is given up first), so a capture of stray or
hostile fragments cannot make the reader grow.

Overlapping fragments are accepted (the later bytes win, as a host that does not drop overlaps keeps them); a
fragment cut short by the snap length leaves a hole that only its captured bytes fill, and the datagram is given
with the captured prefix and the length the fragments claim, so the UDP layer reports it cut short.
"""

from __future__ import annotations

import collections
from typing import Any

__all__ = ["MAX_HELD", "MAX_PENDING", "Fragment", "Reassembler"]

#: Datagrams waiting for fragments at once; a new one beyond this gives up the oldest.
MAX_PENDING = 256
#: Bytes of fragment payload held at once, over all waiting datagrams.
MAX_HELD = 1 << 22
#: Fragments one datagram may have (a 65,535-byte datagram in 8-byte pieces is 8,192; no real sender does that).
MAX_PIECES = 128
#: The largest reassembled datagram (the IPv4 total length and the IPv6 payload length are 16 bits).
MAX_SIZE = 0xFFFF


class Fragment(Exception):
    """Raised by the IP layer for one fragment: what the reassembler needs.  (An exception, so that the frame
    path that has no reassembler treats it as any other frame without a whole UDP datagram.)"""

    def __init__(self, key: Any, offset: int, more: bool, data: bytes, claimed: int,
                 proto: int, src: str, dst: str, v6: bool) -> None:
        super().__init__("ip-fragment")
        self.key, self.offset, self.more, self.data, self.claimed = key, offset, more, data, claimed
        self.proto, self.src, self.dst, self.v6 = proto, src, dst, v6


class _Pending:
    __slots__ = ("end", "held", "pieces", "first")

    def __init__(self) -> None:
        self.end: int | None = None  # the datagram's length, once its last fragment came
        self.held = 0
        self.pieces: list[tuple[int, bytes, int]] = []  # offset, captured bytes, claimed length
        self.first: Fragment | None = None  # the fragment at offset 0 (its next header, for IPv6)


class Reassembler:
    """Collects fragments; :meth:`add` returns the whole datagram when its last missing fragment arrives."""

    def __init__(self) -> None:
        self._pending: collections.OrderedDict[Any, _Pending] = collections.OrderedDict()
        self._held = 0
        #: Datagrams given up before they were whole (out of bounds, or a fragment that cannot belong).
        self.given_up = 0

    def incomplete(self) -> int:
        """Datagrams given up, and those still waiting for a fragment (at the end of a capture: never whole)."""
        return self.given_up + len(self._pending)

    def add(self, frag: Fragment) -> tuple[Fragment, bytes, int] | None:
        """``(first fragment, captured bytes from offset 0, claimed length)`` once complete, else None.

        The captured bytes are shorter than the claimed length when a fragment was cut short by the snap
        length.  A fragment that cannot belong to any datagram (beyond 65,535 bytes, a second last fragment
        that disagrees) gives up its datagram.
        """
        if frag.offset + frag.claimed > MAX_SIZE or (frag.more and frag.claimed % 8):
            self._drop(frag.key)  # RFC 791/8200: all but the last fragment are multiples of 8 bytes
            return None
        entry = self._pending.get(frag.key)
        if entry is None:
            entry = self._pending[frag.key] = _Pending()
            while len(self._pending) > MAX_PENDING:
                self._drop(next(iter(self._pending)))
        if not frag.more:
            end = frag.offset + frag.claimed
            if entry.end is not None and entry.end != end:
                self._drop(frag.key)
                return None
            entry.end = end
        if frag.offset == 0:
            entry.first = frag
        if len(entry.pieces) >= MAX_PIECES:
            self._drop(frag.key)
            return None
        entry.pieces.append((frag.offset, frag.data, frag.claimed))
        entry.held += len(frag.data)
        self._held += len(frag.data)
        while self._held > MAX_HELD and self._pending:
            oldest = next(iter(self._pending))
            self._drop(oldest)
            if oldest == frag.key:
                return None
        return self._complete(frag.key, entry)

    def _complete(self, key: Any, entry: _Pending) -> tuple[Fragment, bytes, int] | None:
        if entry.end is None or entry.first is None:
            return None
        covered = 0  # claimed bytes from 0 that some fragment covers
        for offset, _data, claimed in sorted(entry.pieces, key=lambda p: p[0]):
            if offset > covered:
                return None
            covered = max(covered, offset + claimed)
        if covered < entry.end:
            return None
        whole = bytearray(entry.end)
        have = bytearray(entry.end)  # 1 where a captured byte was written
        for offset, data, _claimed in entry.pieces:  # in arrival order: later bytes win
            data = data[: max(0, entry.end - offset)]
            whole[offset : offset + len(data)] = data
            have[offset : offset + len(data)] = b"\x01" * len(data)
        self._drop(key, whole=True)
        gap = have.find(0)
        captured = bytes(whole if gap < 0 else whole[:gap])
        return entry.first, captured, entry.end

    def _drop(self, key: Any, whole: bool = False) -> None:
        entry = self._pending.pop(key, None)
        if entry is not None:
            self._held -= entry.held
            self.given_up += not whole
