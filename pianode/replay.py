"""Replay protection keyed on what AES-GCM authenticates: the nonce.

GCM in Pia has no associated data (spec §3.1, §11): the packet id and any
header byte that does not enter the nonce can be changed without breaking the
tag.  So replay decisions must not rest on them.  The 12-byte nonce is built
from the sender's identity and its 8-byte header counter (spec §3.2); a
datagram that authenticates proves its nonce, and a sender never reuses one.

:class:`NonceReplayFilter` keeps, per peer, the highest nonce value seen (the
last 7 nonce bytes read as an integer: the low 7 bytes of the sender's
header counter in every era; the byte before them is the connection id in
LAN 5.x nonces, which restarts at 0 on a new connection) and a bitmap of the ``window`` values below it.  A value seen
before, or older than the window, is a replay.  Memory is at most ``window / 4``
bytes per peer (the default 4096 values: 1 KiB, about 130 packets of reordering when
a sender spreads its counter over 31 stations).
"""

from __future__ import annotations

__all__ = ["NonceReplayFilter"]


class NonceReplayFilter:
    __slots__ = ("_bits", "_limit", "_mask", "_top", "window")

    def __init__(self, window: int = 1 << 12) -> None:
        self.window = window
        self._top = -1
        self._bits = 0  # bit i set: value top - i was seen (bits at or beyond the window are stale)
        # The bitmap is cut back to the window only once it has grown to twice
        # that: one mask per ``window`` new values instead of one per packet.
        self._limit = 2 * window
        self._mask = (1 << window) - 1

    def accept(self, nonce: bytes) -> bool:
        """Record an authenticated nonce; False if it was seen before or is too old."""
        value = int.from_bytes(nonce[-7:], "big")
        top = self._top
        if value > top:
            shift = value - top
            if shift >= self.window:
                self._bits = 1
            else:
                bits = (self._bits << shift) | 1
                if bits.bit_length() > self._limit:
                    bits &= self._mask
                self._bits = bits
            self._top = value
            return True
        age = top - value
        if age >= self.window:
            return False
        mask = 1 << age
        if self._bits & mask:
            return False
        self._bits |= mask
        return True
