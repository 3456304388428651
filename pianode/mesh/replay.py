"""Replay protection keyed on what AES-GCM authenticates: the nonce.

GCM in Pia has no associated data (spec §3.1, §11): the packet id and any
header byte that does not enter the nonce can be changed without breaking the
tag.  So replay decisions must not rest on them.  The 12-byte nonce is built
from the sender's identity and its 8-byte header counter (spec §3.2); a
datagram that authenticates proves its nonce, and a sender never reuses one.

:class:`NonceReplayFilter` judges the last 7 nonce bytes read as an integer
(the low 7 bytes of the sender's header counter in every era; the byte before
them is the connection id in LAN 5.x nonces, which restarts at 0 on a new
connection).  It keeps the highest value seen and, in a ring of ``window``
slots, the last value that fell in each slot (``value mod window``).  A value
within the window below the highest is new exactly when its slot holds
another value: any newer value sharing the slot would be at least ``window``
above it, beyond the highest.  A value seen before, or ``window`` or more below
the highest, is a replay.  Each check is a few small-integer operations;
memory is 8 bytes per slot (the default 512 slots: 4 KiB per peer; that is
about 16 packets of reordering when a sender spreads its counter over 31
stations unicast, about 500 when it broadcasts group packets; a reordered
packet older than that is dropped as a replay, and a reliable one is resent).
"""

from __future__ import annotations

import array

__all__ = ["NonceReplayFilter", "nonce_value"]


_EMPTY = (1 << 64) - 1  # no 7-byte value equals it


def nonce_value(nonce: bytes) -> int:
    """The part of a nonce the filter judges: its last 7 bytes as an integer."""
    return int.from_bytes(nonce[-7:], "big")


class NonceReplayFilter:
    __slots__ = ("_mask", "_slots", "_top", "window")

    def __init__(self, window: int = 1 << 9) -> None:
        if window <= 0 or window & (window - 1):
            raise ValueError(f"window must be a power of two, got {window}")
        self.window = window
        self._mask = window - 1
        self._top = -1
        self._slots = array.array("Q", [_EMPTY]) * window

    def accept(self, nonce: bytes) -> bool:
        """Record an authenticated nonce; False if it was seen before or is too old."""
        return self.accept_value(int.from_bytes(nonce[-7:], "big"))  # nonce_value, inline

    def accept_value(self, value: int) -> bool:
        """:meth:`accept` for a nonce already read with :func:`nonce_value`."""
        if value > self._top:
            self._top = value
            self._slots[value & self._mask] = value
            return True
        if self._top - value >= self.window:
            return False
        slot = value & self._mask
        if self._slots[slot] == value:
            return False
        self._slots[slot] = value
        return True
