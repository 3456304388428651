"""Replay protection keyed on what AES-GCM authenticates: the nonce.

GCM in Pia has no associated data (spec §3.1, §11): the packet id and any
header byte that does not enter the nonce can be changed without breaking the
tag.  So replay decisions must not rest on them.  The 12-byte nonce is built
from the sender's identity and its 8-byte header counter (spec §3.2); a
datagram that authenticates proves its nonce, and a sender never reuses one.

:class:`NonceReplayFilter` judges the last 7 nonce bytes read as an integer
(the low 7 bytes of the sender's header counter in every era; the byte before
them is the connection id in LAN 5.x nonces, which restarts at 0 on a new
connection).  It keeps the highest value seen and a bitmap of the ``window``
values below it (bit *i*: the highest minus *i* was seen), one Python integer
shifted along as the highest moves up.  A value within the window below the
highest is new exactly when its bit is clear; a value seen before, or
``window`` or more below the highest, is a replay.  Each check is a few
integer operations; memory is one integer of ``window`` bits per peer (the
default 512: 64 bytes; that is about 16 packets of reordering when a sender
spreads its counter over 31 stations unicast, about 500 when it broadcasts
group packets; a reordered packet older than that is dropped as a replay, and
a reliable one is resent).  (A ring of ``window`` 8-byte slots, as this was
before, judged the same; but each frame wrote a slot of a 4 KiB ring per peer,
a line seldom still in the CPU's cache when a station has 31 peers: about
0.2 µs a frame in ``receive_batch`` run over 32 stations' frames, about 1 % of
a 32-station 5.18 session's CPU.)

With *floor*, nothing below the first value accepted is new either: a sender's one counter runs
over all its receivers (spec §3.2), so what it sent before its first packet to us
(the connection request, or its response to ours) went to other stations, or to
an earlier incarnation of the station at our address.  From 5.27 to 5.45 nothing
under the tag names the receiver's identity (the destination bits name an index,
which a station that joins again from the same address may hold again; before
5.27 the nonce holds the connection id the sender drew for its receiver, from 6.32
pianode's receiver-bound HN the receiver's variable id, which a new session may
draw again), so without this floor what a member sent the station before us there,
replayed to us, was new to our fresh filter whenever it lay within the window.  (A packet the sender
sent us just after its first one and that arrives before it is refused too: the
start of a link, where a reliable message is resent and a lost frame is one frame.)

*Fences* refuse the values an earlier incarnation of the station at the same
address used (:meth:`NonceReplayFilter.span`, set by ``pianode.mesh.links``):
a restarted station's counter starts anywhere, so its filter starts empty, and
what the station there sent before it restarted would otherwise pass as new.
"""

from __future__ import annotations

__all__ = [
    "NonceReplayFilter",
    "ReceiverBoundReplayFilter",
    "SenderBoundReplayFilter",
    "nonce_value",
    "receiver_bound_nonce",
    "sender_bound_nonce",
]


_EMPTY = (1 << 64) - 1  # no 7-byte value equals it


def nonce_value(nonce: bytes) -> int:
    """The part of a nonce the filter judges: its last 7 bytes as an integer."""
    return int.from_bytes(nonce[-7:], "big")


class NonceReplayFilter:
    __slots__ = ("_full", "_low", "_recent", "_top", "advanced", "fences", "floor", "window")

    def __init__(self, window: int = 1 << 9, *, floor: bool = False) -> None:
        if window <= 0 or window & (window - 1):
            raise ValueError(f"window must be a power of two, got {window}")
        self.window = window
        #: Refuse what lies below the first value accepted (see the module docstring): for nonces of
        #: one counter per sender (5.7+); not for per-connection packet ids (pianode.mesh.legacy).
        self.floor = floor
        #: Whether the last value accepted was the highest yet (always True without *floor*).  Only such a
        #: value shows its sender is still there: one below may have waited for its replay (see the module
        #: docstring), so the links count a station as heard from on these alone.
        self.advanced = True
        self._full = (1 << window) - 1
        self._top = -1
        self._low = _EMPTY
        self._recent = 0  # bit i: the value `_top - i` was accepted (i < window)
        #: Inclusive ranges of values refused whatever the window says (see the module docstring).
        self.fences: tuple[tuple[int, int], ...] = ()

    def span(self) -> tuple[int, int] | None:
        """The lowest and highest value accepted so far (None: none yet)."""
        return None if self._top < 0 else (self._low, self._top)

    def accept(self, nonce: bytes) -> bool:
        """Record an authenticated nonce; False if it was seen before or is too old."""
        return self.accept_value(int.from_bytes(nonce[-7:], "big"))  # nonce_value, inline

    def accept_value(self, value: int) -> bool:
        """:meth:`accept` for a nonce already read with :func:`nonce_value`."""
        if self.fences and any(low <= value <= high for low, high in self.fences):
            return False
        top = self._top
        if value > top:
            if top < 0:
                self._low = value
                self._recent = 1
            else:
                up = value - top
                self._recent = ((self._recent << up) | 1) & self._full if up < self.window else 1
            self._top = value
            self.advanced = True
            return True
        behind = top - value
        if behind >= self.window:
            return False
        if value < self._low and self.floor:
            return False
        bit = 1 << behind
        if self._recent & bit:
            return False
        self._recent |= bit
        if value < self._low:
            self._low = value
        self.advanced = not self.floor
        return True


#: Pia 6.32+ (M-G) messages carry no destination and the header that names the receiver is not
#: authenticated (spec §1.1, §2.1, §3.1), nor does the nonce name it (§3.2: the sender's IP, or the
#: network id XOR it, and the header nonce HN).  A datagram a station sealed for one station, replayed
#: to another from its address, authenticated there and delivered (its data, its reliable segments).
#: How a sender picks HN is not specified, only that it never repeats under the key (§3.2, §10: "only
#: uniqueness matters"); 6.x meshes are pianode's own (protocols.pia.session6).  So a 6.32+ node puts the
#: receiver in its HN, where the tag covers it: ``00 ‖ receiver variable id (u16) ‖ counter (40 bits)``,
#: the counter one per node as before (so HNs never repeat); receiver 0 for a group packet (its receivers
#: are in its encrypted footer, §1.6) and for a packet to a station whose variable id is not known yet
#: (a joiner's connection request).  The filter reads those bytes (the last 7 of every nonce).
#: Limits: the HN names the receiver, not the sender, and the nonce's prefix names the sender's IP only
#: (§3.2): of two stations behind one IP (other ports), what one sealed for a station, replayed to it from
#: the other's address, authenticates as the other's (each station has an IP of its own on LDN and in
#: pianode's runs).  And a member, which holds the key, can seal anything under any nonce: from a spoofed
#: source address it can speak for any station; nothing in the documented protocol can tell.
RECEIVER_SHIFT = 40
COUNTER_MASK = (1 << RECEIVER_SHIFT) - 1


def receiver_bound_nonce(receiver_variable_id: int, counter: int) -> bytes:
    """The 8-byte header nonce of a 6.32+ packet for *receiver_variable_id* (0: a group, or not known)."""
    return (((receiver_variable_id & 0xFFFF) << RECEIVER_SHIFT) | (counter & COUNTER_MASK)).to_bytes(8, "big")


class ReceiverBoundReplayFilter(NonceReplayFilter):
    """The replay filter of a 6.32+ peer: a nonce that names another receiver is refused (a datagram
    sealed for another station); one naming us, or none, is judged on its counter, each kind apart
    (see :func:`receiver_bound_nonce`).  Refusals return False as replays do."""

    __slots__ = ("_own", "_unbound")

    def __init__(self, own_variable_id: int, window: int = 1 << 9) -> None:
        super().__init__(window, floor=True)
        self._own = own_variable_id & 0xFFFF
        self._unbound = NonceReplayFilter(window, floor=True)

    def span(self) -> tuple[int, int] | None:
        spans = [s for s in (super().span(), self._unbound.span()) if s is not None]
        return (min(s[0] for s in spans), max(s[1] for s in spans)) if spans else None

    def accept_value(self, value: int) -> bool:
        receiver, counter = value >> RECEIVER_SHIFT, value & COUNTER_MASK
        if receiver == self._own:
            return super().accept_value(counter)
        if receiver or (self.fences and any(low <= counter <= high for low, high in self.fences)):
            return False
        if not self._unbound.accept_value(counter):
            return False
        self.advanced = self._unbound.advanced
        return True


#: Pia 6.16-6.30 (H-F, M-F) nonces name the sender by its IP at most: LAN and LDN by the IP (with the
#: network id), NPLN not at all (``network_id ‖ HN``, spec §3.2); the header's source variable id is not
#: authenticated (§3.1).  A datagram a station sealed for C, replayed to C from another member's address
#: (on NPLN, or from another port of the same IP) with that member's variable id written into the header,
#: authenticated as the member's: delivered as its data, and its replay memory jumped to the other
#: station's counter, so the member's own packets were refused until it was dropped.  HN is the sender's
#: choice (§3.2, §10: "only uniqueness matters"; 6.x meshes are pianode's own), so a 6.16-6.30 node names
#: itself in its HN, where the tag covers it: ``00 ‖ own variable id (u16) ‖ counter (40 bits)``.


def sender_bound_nonce(sender_variable_id: int, counter: int) -> bytes:
    """The 8-byte header nonce of a 6.16-6.30 packet sent by the station of *sender_variable_id*."""
    return receiver_bound_nonce(sender_variable_id, counter)


class SenderBoundReplayFilter(NonceReplayFilter):
    """The replay filter of a 6.16-6.30 peer: a nonce that names another sender than the peer's variable id
    is refused (a datagram another station sealed, replayed from the peer's address); see
    :func:`sender_bound_nonce`.  *owner* is the peer (its ``variable_id``, 0 while unknown, is read at each
    check: it is learnt during the handshake).  Refusals return False as replays do."""

    __slots__ = ("owner",)

    def __init__(self, owner: object = None, window: int = 1 << 9) -> None:
        super().__init__(window, floor=True)
        self.owner = owner

    def accept_value(self, value: int) -> bool:
        sender = getattr(self.owner, "variable_id", 0) & 0xFFFF
        if sender and value >> RECEIVER_SHIFT != sender:
            return False
        return super().accept_value(value)
