"""Per-connection Pia packet ids: the send counter and the receive-side replay filter.

Theory of operation
-------------------
Send side (spec §1.4): a packet sent with connection id 0 has packet id 0.  Every
other packet takes the next value of a per-connection counter that starts at 1 and
skips 0 when it wraps (65535 → 1).  The ids therefore run around a cycle of 65535
values, and every distance below is measured on that cycle.

Receive side: the old NintendoClients stack dropped an id more than 16 ahead of
the expected one and everything older (spec §1.4).  That rule dies for good after
17 consecutive losses, and it rejects any reordering.  We keep its idea (a packet id
is only believable close to where the peer's counter is) with a sliding replay
window in the style of IPsec/DTLS anti-replay:

* ``top`` is the highest id accepted so far; a bitmap remembers which of the
  ``window`` ids at and below ``top`` were accepted;
* an id up to ``max_ahead`` steps past ``top`` is accepted and slides the window;
* an id inside the window is accepted once, and every later copy is a duplicate;
* an id older than the window, or further ahead than ``max_ahead``, is dropped.

So a replayed datagram is never accepted twice while it is within 32768 ids of the
peer's counter.  Beyond that a 16-bit id cannot tell old from new; an encrypted
session must rely on the AEAD nonce/key lifetime there (the node re-keys on every
new connection).

Before the first packet the filter expects id 1, as a fresh connection starts there
(spec §1.4; the shared captures show every new connection id counting from 1), or it
can accept any first id (``expected=None``) for a connection joined mid-stream.
"""

from __future__ import annotations

import enum

import attrs

__all__ = ["PacketIdCounter", "PacketIdFilter", "PacketIdStatistics", "Verdict", "packet_id_distance"]

_CYCLE = 0xFFFF  # ids 1..65535


def _index(packet_id: int) -> int:
    return packet_id - 1


def packet_id_distance(a: int, b: int) -> int:
    """Signed steps from id *b* to id *a* on the 1..65535 cycle, in [-32767, 32767]."""
    d = (_index(a) - _index(b)) % _CYCLE
    return d - _CYCLE if d > _CYCLE // 2 else d


class PacketIdCounter:
    """Outgoing packet ids of one connection: 1, 2, …, 65535, 1, … (spec §1.4).

    ``next_id`` is the id the next packet takes; :func:`pianode.mesh.stream.seal_frames` advances it
    inline as :meth:`next` does (tests/pianode/mesh/test_stream.py compares the two across the wrap)."""

    __slots__ = ("next_id",)

    def __init__(self, start: int = 1) -> None:
        self.next_id = 1
        self.reset(start)

    def peek(self) -> int:
        """The id the next call to :meth:`next` returns."""
        return self.next_id

    def next(self) -> int:
        """Return the next packet id and advance, skipping 0 on rollover."""
        value = self.next_id
        self.next_id = 1 if value == 0xFFFF else value + 1
        return value

    def reset(self, start: int = 1) -> None:
        """Start counting again (a new connection id)."""
        if not 1 <= start <= 0xFFFF:
            raise ValueError(f"packet id counter must start in 1..65535, not {start}")
        self.next_id = start


#: The 8-byte header nonce counter of :class:`pianode.mesh.outbox.Outbox` wraps here.
NONCE_MASK = 0xFFFFFFFFFFFFFFFF


class Verdict(enum.Enum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    TOO_OLD = "too_old"
    TOO_FAR_AHEAD = "too_far_ahead"
    ZERO = "zero"  # id 0 belongs to connection id 0 only


@attrs.frozen
class PacketIdStatistics:
    accepted: int
    duplicate: int
    too_old: int
    too_far_ahead: int
    zero: int


class PacketIdFilter:
    """Receive-side acceptance and replay protection for one connection's packet ids.

    Args:
        window: how many ids at and below the highest accepted one are remembered
            (older ids are dropped as too old).
        max_ahead: how far past the highest accepted id a packet may jump (the
            number of consecutive losses survived).
        expected: the first id expected, or None to accept any first id.
    """

    def __init__(self, window: int = 128, max_ahead: int = 1024, *, expected: int | None = 1) -> None:
        if not 1 <= window <= 16384 or not 1 <= max_ahead <= 16384:
            raise ValueError("window and max_ahead must be in 1..16384")
        if expected is not None and not 1 <= expected <= 0xFFFF:
            raise ValueError(f"expected packet id must be in 1..65535, not {expected}")
        self.window = window
        self.max_ahead = max_ahead
        self._counts = dict.fromkeys(Verdict, 0)
        self.reset(expected)

    def reset(self, expected: int | None = 1) -> None:
        """Forget every id seen (a new connection); counters are kept."""
        # top = the id just before `expected`, with nothing marked as seen.
        self._top: int | None = None if expected is None else (expected - 2) % _CYCLE + 1
        self._seen = 0  # bit k set = id (top - k) accepted
        # Positions at and below top that belong to this connection's history; ids
        # further back (including the virtual top before the first packet) are too old.
        self._tracked = 0

    def check(self, packet_id: int) -> Verdict:
        """Classify *packet_id* without recording it."""
        if packet_id == 0:
            return Verdict.ZERO
        if not 1 <= packet_id <= 0xFFFF:
            raise ValueError(f"packet id {packet_id} out of range")
        if self._top is None:
            return Verdict.ACCEPTED
        d = packet_id_distance(packet_id, self._top)
        if d > 0:
            return Verdict.ACCEPTED if d <= self.max_ahead else Verdict.TOO_FAR_AHEAD
        back = -d
        if back >= self._tracked:
            return Verdict.TOO_OLD
        return Verdict.DUPLICATE if self._seen >> back & 1 else Verdict.ACCEPTED

    def accept(self, packet_id: int) -> Verdict:
        """Classify *packet_id* and, if accepted, record it so a copy is refused later."""
        verdict = self.check(packet_id)
        self._counts[verdict] += 1
        if verdict is not Verdict.ACCEPTED:
            return verdict
        if self._top is None:
            self._top, self._seen, self._tracked = packet_id, 1, 1
            return verdict
        d = packet_id_distance(packet_id, self._top)
        mask = (1 << self.window) - 1
        if d > 0:
            self._seen = ((self._seen << d) | 1) & mask
            self._top = packet_id
            self._tracked = min(self.window, self._tracked + d)
        else:
            self._seen |= 1 << -d
        return verdict

    @property
    def highest(self) -> int | None:
        """The highest id accepted (or the one before the expected first id)."""
        return self._top

    def statistics(self) -> PacketIdStatistics:
        c = self._counts
        return PacketIdStatistics(
            accepted=c[Verdict.ACCEPTED],
            duplicate=c[Verdict.DUPLICATE],
            too_old=c[Verdict.TOO_OLD],
            too_far_ahead=c[Verdict.TOO_FAR_AHEAD],
            zero=c[Verdict.ZERO],
        )
