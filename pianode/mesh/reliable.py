"""Reliable sliding window for one peer and stream: sans-IO, in order, exactly once.

Theory of operation
-------------------
Pia carries reliable traffic (Mesh port 1, the Reliable protocol, Broadcast
Reliable, ...) as *segments*: a sliding-window header plus a payload (spec §5.8,
codecs in :mod:`protocols.pia.reliable`).  :class:`ReliableWindow` is the state
machine of one direction pair (us ↔ one peer, one stream id).  It does no I/O and
reads no clock: every entry point takes ``now`` and the caller moves the segments.

Sending
    :meth:`ReliableWindow.send` cuts a message into segments of at most
    ``max_payload`` bytes (flags ``HAS_PAYLOAD``, ``FIRST_FRAGMENT`` on the first,
    ``LAST_FRAGMENT`` on the last; a message of one segment has both) and gives
    each the next 16-bit sequence id.  Queued and unacknowledged segments live in
    a bounded send buffer; when a message does not fit, ``send`` raises
    :class:`SendBufferFull` and changes nothing (:meth:`can_send` asks first).
    At most ``window_size`` segments past the lowest unacknowledged one are in
    flight.  A segment unacknowledged for one RTO is sent again (earlier, "fast",
    when ``fast_retransmit`` later segments were acknowledged and a smoothed RTT
    plus deviation has passed since it was sent); the timeout grows
    by ``backoff`` per retry up to ``max_rto``.  After ``max_retries``
    retransmissions of one segment, or ``give_up_after`` seconds without an ack
    for the oldest one, the peer is considered failed (:attr:`failed`).

Receiving
    :meth:`ReliableWindow.receive` drops sequence ids already delivered or held
    (counted as duplicates), holds early arrivals in a bounded buffer, and
    delivers complete messages in sequence order exactly once.  A receiver that
    has not heard from the peer yet starts at the header's *lowest pending* id.

Acknowledgements
    Data headers carry ``lowest_pending`` = the sender's lowest unacknowledged
    sequence id (our reading of "lowest sequence id pending ack", spec §5.8); it is
    what lets a fresh receiver start at the right place even when the first
    segments were lost.  Acks travel in segments without ``HAS_PAYLOAD`` whose
    payload is the 5.18 bulk-ack form: ``ack id`` = the highest sequence id
    delivered in order (every id up to it is acknowledged) and mask bit *i* =
    ``ack id + 1 + i`` held as an early arrival.  The spec documents 32 records; we
    send one record, for our stream, or that record repeated to the documented 32
    (``ack_records``; what records for other streams hold is undocumented).  The
    5.29+ ack payload is undocumented, so 5.29+ layouts carry the same form.  An ack is due ``ack_delay`` after data
    arrives (at once for an out-of-order or duplicate segment), and goes out early
    whenever data is being sent anyway, so the node bundles it into the same
    datagram (piggybacking at the packet level).  Flags ``INITIALIZED``, ``RESET``
    and ``RESET_ACK`` are not used: their protocol is undocumented.

The ``<=5.12`` layout (32-bit ids) works as real 3.x traffic shows (shared
captures, mgba frames; spec §5.8 NC-old): both directions start at 0xFFFFF82F, so
no start-up sync is needed; every header carries ``ack id`` = the next sequence id
expected and a 64-bit bitmap (bit *k* = ``ack id + 1 + k`` held early), so acks
ride on every data segment; a pure ack is a header with flags 0, sequence id 0 and
no payload; and a complete message carries flags 3, i.e. flag 2 marks the *end*
of a message (NC-old's reading, spec §10.1 item 8; flag 4 never appears), so a
fragment that does not end a message has flags 1.  The tests reproduce captured
segments byte for byte.

Internally sequence ids are unbounded integers; the wire value is
``(initial + n) mod 2^bits`` and incoming ids are mapped to the nearest unbounded
value, so rollover needs no special case.  The default initial id of the 16-bit
layouts, 0xF82F, is the 16-bit tail of the 3.x start value, which also makes every
long test cross the wrap.

Cost
----
A session runs one window per peer and stream, so the common states are cheap:
everything the config fixes is copied to plain attributes at construction, flags
are plain ints, nothing loops when nothing is in flight, and 16-bit segments are
encoded and decoded from plain ints (:func:`~protocols.pia.reliable.encode_segment_fields`,
:func:`~protocols.pia.reliable.decode_segment_fields`) without building header
values.  :meth:`ReliableWindow.messages_to_send` is byte-for-byte
``[encode_segment(s) for s in segments_to_send(now)]``.
"""

from __future__ import annotations

import zlib
from typing import Any

import attrs

from pianode.mesh.rtt import RttEstimator
from protocols.errors import DecodeError
from protocols.pia.reliable import (
    LegacyWindowHeader,
    Segment,
    WindowFlag,
    WindowHeader70,
    WindowHeader517,
    WindowHeader529,
    WindowLayout,
    decode_segment,
    decode_segment_fields,
    encode_ack_record,
    encode_segment,
    encode_segment_fields,
    find_ack_record,
    layout_for,
    sequence_bits,
)
from protocols.pia.versions import VersionProfile

__all__ = [
    "MessageTooLarge",
    "ReliableWindow",
    "SendBufferFull",
    "WindowConfig",
    "WindowFailed",
    "WindowStatistics",
]

_SUPPORTED = (WindowLayout.V5_12, WindowLayout.V5_17, WindowLayout.V5_29, WindowLayout.V7_0)
_MASK_BITS = 128  # width of the bulk-ack mask (spec §5.8)
_LEGACY_BITMAP_BITS = 64  # width of the <=5.12 extra-acks bitmap
_LEGACY_START = 0xFFFFF82F  # first sequence id in captured 3.x traffic (spec §5.8, §10.1 item 20)
_LEGACY_END = int(WindowFlag.FIRST_FRAGMENT)  # flag 2 ends a message in <=5.12 traffic
# The flags as plain ints: IntFlag operators cost a Python call each.
_HAS_PAYLOAD = int(WindowFlag.HAS_PAYLOAD)
_FIRST = int(WindowFlag.FIRST_FRAGMENT)
_LAST = int(WindowFlag.LAST_FRAGMENT)
_ZLIB = int(WindowFlag.ZLIB)
_V5_12 = WindowLayout.V5_12
_WHOLE = _HAS_PAYLOAD | _FIRST | _LAST  # a message of one segment (16-bit layouts)
_LEGACY_WHOLE = _HAS_PAYLOAD | _LEGACY_END  # a message of one segment (<=5.12)


class SendBufferFull(Exception):
    """The send buffer cannot take the message now; retry after acks free space."""


class MessageTooLarge(ValueError):
    """The message exceeds ``max_message_size`` (or the segment count the buffer can ever hold)."""


class WindowFailed(Exception):
    """The peer stopped acknowledging; the window gave up (see :attr:`ReliableWindow.failure`)."""


@attrs.frozen
class WindowConfig:
    """Settings of one reliable window (all times in seconds)."""

    layout: WindowLayout = WindowLayout.V5_17
    stream_id: int = 0
    max_payload: int = 1024
    window_size: int = 32
    send_buffer: int = 256
    #: early arrivals held; None = the ack mask width allows (127, or 64 for <=5.12)
    receive_buffer: int | None = None
    max_message_size: int = 1 << 20
    #: None = 0xFFFFF82F for <=5.12 (both sides must agree), 0xF82F otherwise
    initial_sequence_id: int | None = None
    initial_rto: float = 0.5
    min_rto: float = 0.1
    max_rto: float = 4.0
    backoff: float = 2.0
    max_retries: int = 10
    give_up_after: float = 30.0
    ack_delay: float = 0.0
    #: a segment is resent before its timeout once this many later ones are acknowledged
    #: and it has been out for the smoothed RTT plus its deviation (0 disables)
    fast_retransmit: int = 3
    #: records per bulk ack (16-bit layouts).  The 5.18 form documents 32; what the
    #: records for other streams hold is not, so we send ours once, or repeat it to
    #: fill the documented size when this is 32 (a copy acknowledges nothing new).
    ack_records: int = 1

    def __attrs_post_init__(self) -> None:
        if self.layout not in _SUPPORTED:
            raise ValueError(f"the reliable window runs on the 16-bit layouts {[x.value for x in _SUPPORTED]}")
        if not 1 <= self.receive_limit <= self._mask_limit:
            raise ValueError(f"receive_buffer must be 1..{self._mask_limit} (early arrivals must fit the ack mask)")
        if not 1 <= self.window_size <= self.send_buffer or self.window_size > 0x4000:
            raise ValueError("window_size must be 1..min(send_buffer, 16384)")
        if not 1 <= self.max_payload <= 0xFFFF or not 0 <= self.stream_id <= 0xFF:
            raise ValueError("max_payload must be 1..65535 and stream_id 0..255")
        if not 0 <= self.first_sequence_id < 1 << sequence_bits(self.layout):
            raise ValueError(f"initial_sequence_id does not fit the {self.layout.value} layout")
        if not 1 <= self.ack_records <= 255:
            raise ValueError("ack_records must be 1..255")
        if self.backoff < 1 or self.max_retries < 0:
            raise ValueError("backoff must be >= 1 and max_retries >= 0")

    @classmethod
    def for_version(cls, version: VersionProfile | str | tuple[int, int], **settings: Any) -> WindowConfig:
        """Settings for a Pia version: its sliding-window layout, plus any overrides."""
        layout = layout_for(version)
        if layout is WindowLayout.V5_14:
            raise ValueError("the 5.14 sliding-window header has undocumented fields; no window runs on it")
        return cls(layout=layout, **settings)

    @property
    def legacy(self) -> bool:
        return self.layout is WindowLayout.V5_12

    @property
    def _mask_limit(self) -> int:
        return _LEGACY_BITMAP_BITS if self.legacy else _MASK_BITS - 1

    @property
    def receive_limit(self) -> int:
        return self._mask_limit if self.receive_buffer is None else self.receive_buffer

    @property
    def first_sequence_id(self) -> int:
        if self.initial_sequence_id is not None:
            return self.initial_sequence_id
        return _LEGACY_START if self.legacy else 0xF82F


@attrs.frozen
class WindowStatistics:
    sent: int  # segments sent for the first time
    retransmitted: int
    fast_retransmits: int  # of which triggered by later acks rather than the timeout
    acked: int  # our segments acknowledged by the peer
    delivered: int  # messages handed to the application
    duplicates: int  # segments received again
    out_of_order: int  # segments held as early arrivals
    out_of_window: int  # segments too far ahead to hold
    acks_sent: int
    bad_acks: int  # ack payloads that were malformed or acknowledged unsent ids
    malformed: int  # fragment sequences that broke the rules, wrong stream, bad zlib
    oversized: int  # messages (reassembled or inflated) larger than max_message_size, dropped
    rtt_samples: int


@attrs.define
class _Out:
    flags: int
    payload: bytes
    first_sent: float | None = None
    sent_at: float | None = None
    deadline: float | None = None
    retries: int = 0


class ReliableWindow:
    """Reliable, ordered, exactly-once delivery with one peer on one stream (see module doc)."""

    def __init__(self, config: WindowConfig | None = None, *, rtt: RttEstimator | None = None) -> None:
        self._config = c = config if config is not None else WindowConfig()
        self.rtt = (
            rtt
            if rtt is not None
            else RttEstimator(initial_rto=c.initial_rto, min_rto=c.min_rto, max_rto=max(c.max_rto, c.initial_rto))
        )
        # What the (frozen) config fixes, as plain attributes for the hot paths.
        self._layout = c.layout
        self._legacy = legacy = c.legacy
        self._stream = c.stream_id
        self._first = c.first_sequence_id
        self._max_payload = c.max_payload
        self._window_size = c.window_size
        self._send_buffer = c.send_buffer
        self._max_message = c.max_message_size
        self._receive_limit = c.receive_limit
        self._ack_delay = c.ack_delay
        self._ack_records = c.ack_records
        self._fast = c.fast_retransmit
        self._max_rto = c.max_rto
        self._backoff = c.backoff
        self._max_retries = c.max_retries
        self._give_up = c.give_up_after
        # send side (unbounded sequence numbers; wire id = (initial + n) & 0xFFFF)
        self._out: dict[int, _Out] = {}
        self._base = 0  # lowest unacknowledged
        self._next = 0  # next to assign
        self._sent_hi = 0  # first never transmitted
        self._queued_at: float | None = None
        self._bits = sequence_bits(c.layout)
        self._mod = (1 << self._bits) - 1
        self._half = 1 << (self._bits - 1)
        # receive side.  <=5.12 peers both start at the same id; later layouts
        # learn the peer's start from its first header (lowest pending).
        self._synced = legacy
        self._origin = self._first if legacy else 0  # wire id of unbounded 0
        self._expected = 0
        self._early: dict[int, tuple[int, bytes]] = {}
        self._partial: list[bytes] = []
        self._partial_flags = 0
        self._partial_size = 0
        self._partial_open = False
        self._skipping = False  # dropping the rest of a broken message
        self._ack_due: float | None = None
        self.failure: str | None = None
        #: When the segment that made the window fail was first sent.
        self.failed_since: float | None = None
        self._stats = dict.fromkeys(attrs.fields_dict(WindowStatistics), 0)
        #: Messages dropped for their size (``statistics().oversized``), as a plain attribute the
        #: session reads after each segment.
        self.oversized = 0

    @property
    def config(self) -> WindowConfig:
        """The settings, fixed for the window's life (the hot paths keep copies)."""
        return self._config

    # -- public state ------------------------------------------------------------

    @property
    def failed(self) -> bool:
        return self.failure is not None

    @property
    def in_flight(self) -> int:
        """Segments transmitted and not yet acknowledged."""
        out = self._out
        return sum(1 for n in range(self._base, self._sent_hi) if n in out)

    @property
    def buffered(self) -> int:
        """Segments in the send buffer (queued or unacknowledged)."""
        return len(self._out)

    @property
    def held(self) -> int:
        """Early arrivals held in the receive buffer."""
        return len(self._early)

    def idle(self) -> bool:
        """True when everything we sent is acknowledged and no ack is owed."""
        return not self._out and self._ack_due is None

    def statistics(self) -> WindowStatistics:
        return WindowStatistics(**self._stats)

    # -- sending -------------------------------------------------------------------

    def _segments_for(self, size: int) -> int:
        return max(1, -(-size // self._max_payload))

    def can_send(self, size: int) -> bool:
        """True if a message of *size* bytes fits the send buffer now."""
        return (
            self.failure is None
            and size <= self._max_message
            and len(self._out) + self._segments_for(size) <= self._send_buffer
        )

    def send(self, data: bytes, now: float) -> None:
        """Queue one message for reliable delivery.

        Raises:
            MessageTooLarge: larger than ``max_message_size`` or than the whole send buffer.
            SendBufferFull: no room now (nothing was queued).
            WindowFailed: the window gave up on the peer.
        """
        if self.failure is not None:
            raise WindowFailed(self.failure)
        size = len(data)
        mp = self._max_payload
        count = 1 if size <= mp else -(-size // mp)
        out = self._out
        if size > self._max_message or count > self._send_buffer:
            raise MessageTooLarge(f"message of {size} bytes needs {count} segments")
        if len(out) + count > self._send_buffer:
            raise SendBufferFull(f"send buffer holds {len(out)} of {self._send_buffer} segments; {count} needed")
        nxt = self._next
        if count == 1:
            out[nxt] = _Out(_LEGACY_WHOLE if self._legacy else _WHOLE, bytes(data))
            nxt += 1
        else:
            for i in range(count):
                flags = _HAS_PAYLOAD
                if self._legacy:
                    if i == count - 1:
                        flags |= _LEGACY_END
                else:
                    if i == 0:
                        flags |= _FIRST
                    if i == count - 1:
                        flags |= _LAST
                out[nxt] = _Out(flags, bytes(data[i * mp : (i + 1) * mp]))
                nxt += 1
        self._next = nxt
        if self._sent_hi < self._base + self._window_size:
            queued = self._queued_at
            self._queued_at = now if queued is None else min(queued, now)

    # -- wire helpers -----------------------------------------------------------------

    def _wire(self, n: int) -> int:
        return (self._first + n) & self._mod

    def _rx_wire(self, n: int) -> int:
        return (self._origin + n) & self._mod

    def _early_mask(self, first: int) -> int:
        """Bit i set = early arrival ``first + i`` held."""
        mask = 0
        for n in self._early:
            mask |= 1 << (n - first)
        return mask

    def _header(self, flags: int, seq: int) -> LegacyWindowHeader | WindowHeader517 | WindowHeader529 | WindowHeader70:
        if self._legacy:
            # Every <=5.12 header carries the ack: next expected id + bitmap of expected+1+k.
            return LegacyWindowHeader(
                flags=flags,
                sequence_id=seq,
                ack_id=self._rx_wire(self._expected),
                ack_bitmap=self._early_mask(self._expected + 1),
            )
        low = self._wire(self._base)
        layout = self._layout
        if layout is WindowLayout.V5_17:
            return WindowHeader517(flags=flags, stream_id=self._stream, sequence_id=seq, lowest_pending=low)
        if layout is WindowLayout.V5_29:
            return WindowHeader529(flags=flags, stream_id=self._stream, sequence_id=seq, lowest_pending=low)
        return WindowHeader70(flags=flags, sequence_id=seq, lowest_pending=low)

    def _unwrap(self, wire: int, ref_wire: int, ref: int) -> int:
        """The unbounded number nearest *ref* whose wire value is *wire*."""
        half = self._half
        return ref + ((wire - ref_wire + half) & self._mod) - half

    # -- output ------------------------------------------------------------------------

    def _output(self, now: float) -> tuple[list[tuple[int, int, bytes]], bool]:
        """One output round's state changes: the data segments due, as ``(flags, n, payload)``
        (retransmissions first, then new data), and whether an ack goes out before them."""
        if self.failure is not None:
            return [], False
        data: list[tuple[int, int, bytes]] = []
        base, hi = self._base, self._sent_hi
        if base != hi:  # something in flight: give-up limits, then due retransmissions
            self.handle_timer(now)
            if self.failure is not None:
                return [], False
            out = self._out
            rto = self.rtt.rto
            for n in range(base, hi):
                seg = out.get(n)
                if seg is None or seg.deadline is None or seg.deadline > now:
                    continue
                seg.retries += 1
                seg.sent_at = now
                seg.deadline = now + min(self._max_rto, rto * self._backoff**seg.retries)
                self._stats["retransmitted"] += 1
                data.append((seg.flags, n, seg.payload))
        nxt = self._next
        if hi < nxt:
            limit = min(nxt, base + self._window_size)
            if hi < limit:
                out = self._out
                deadline = now + self.rtt.rto
                stats = self._stats
                while hi < limit:
                    seg = out[hi]
                    seg.first_sent = seg.sent_at = now
                    seg.deadline = deadline
                    stats["sent"] += 1
                    data.append((seg.flags, hi, seg.payload))
                    hi += 1
                self._sent_hi = hi
            self._queued_at = now if hi < nxt and hi < base + self._window_size else None
        else:
            self._queued_at = None
        if self._legacy and data:
            self._ack_due = None  # every <=5.12 data header just carried the ack
        # Ack when due, or early when data goes out anyway (same datagram).
        due = self._ack_due
        return data, due is not None and (due <= now or bool(data))

    def segments_to_send(self, now: float) -> list[Segment]:
        """Segments to transmit now: an ack if one is owed, retransmissions, then new data."""
        data, ack = self._output(now)
        segs = [Segment(self._header(flags, self._wire(n)), payload) for flags, n, payload in data]
        if ack:
            segs.insert(0, self._ack_segment())
        return segs

    def messages_to_send(self, now: float) -> list[bytes]:
        """:meth:`segments_to_send`, encoded: one Pia message payload each."""
        if (
            self._ack_due is None
            and self._sent_hi == self._next
            and self._base == self._sent_hi
            and self.failure is None
        ):
            self._queued_at = None  # nothing in flight or queued: the round would do only this
            return []
        data, ack = self._output(now)
        if self._legacy:
            msgs = [encode_segment(Segment(self._header(f, self._wire(n)), p), _V5_12) for f, n, p in data]
            if ack:
                msgs.insert(0, encode_segment(self._ack_segment(), _V5_12))
            return msgs
        layout, stream, first, mod = self._layout, self._stream, self._first, self._mod
        low = (first + self._base) & mod
        msgs = [encode_segment_fields(f, stream, (first + n) & mod, low, p, layout) for f, n, p in data]
        if ack:
            ack_seq = (first + self._next) & mod
            msgs.insert(0, encode_segment_fields(0, stream, ack_seq, low, self._ack_payload(), layout))
        return msgs

    def _ack_payload(self) -> bytes:
        """Bulk-ack payload of the ack now owed (16-bit layouts); it is no longer owed."""
        self._ack_due = None
        self._stats["acks_sent"] += 1
        # ack id = last delivered; mask bit i = (ack id) + 1 + i = expected + i.
        expected = self._expected
        mask = self._early_mask(expected) if self._early else 0
        return encode_ack_record(self._stream, self._rx_wire(expected - 1), mask, self._ack_records)

    def _ack_segment(self) -> Segment:
        if self._legacy:
            self._ack_due = None
            self._stats["acks_sent"] += 1
            # Captured 3.x pure acks: flags 0, sequence id 0, no payload.
            return Segment(self._header(0, 0), b"")
        payload = self._ack_payload()
        return Segment(self._header(0, self._wire(self._next)), payload)

    # -- timers ---------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """When :meth:`handle_timer` / :meth:`segments_to_send` next has work, or None."""
        if self.failure is not None:
            return None
        ack, queued = self._ack_due, self._queued_at
        base, hi = self._base, self._sent_hi
        if base == hi:  # nothing in flight
            if ack is None:
                return queued
            return ack if queued is None else min(ack, queued)
        times = [t for t in (ack, queued) if t is not None]
        oldest: float | None = None
        out = self._out
        for n in range(base, hi):
            seg = out.get(n)
            if seg is None or seg.deadline is None:
                continue
            times.append(seg.deadline)
            if oldest is None and seg.first_sent is not None:
                oldest = seg.first_sent
        if oldest is not None:
            times.append(oldest + self._give_up)
        return min(times) if times else None

    def handle_timer(self, now: float) -> None:
        """Apply the give-up limits; due retransmissions go out in :meth:`segments_to_send`."""
        if self.failure is not None or self._base == self._sent_hi:
            return
        out = self._out
        for n in range(self._base, self._sent_hi):
            seg = out.get(n)
            if seg is None or seg.first_sent is None or seg.deadline is None:
                continue
            if seg.deadline <= now and seg.retries >= self._max_retries:
                self._fail(f"sequence id {self._wire(n):#06x} unacknowledged after {seg.retries} retransmissions", seg.first_sent)
                return
            if now - seg.first_sent >= self._give_up:
                self._fail(f"sequence id {self._wire(n):#06x} unacknowledged for {now - seg.first_sent:.1f} s", seg.first_sent)
                return

    def _fail(self, reason: str, since: float | None = None) -> None:
        self.failure = reason
        self.failed_since = since
        self._ack_due = None
        self._queued_at = None

    # -- input ------------------------------------------------------------------------------

    def receive_message(self, data: bytes, now: float) -> list[bytes]:
        """Decode one Pia message payload as a segment and :meth:`receive` it.

        Raises:
            DecodeError: *data* is not a segment of the configured layout.
        """
        if self._legacy:
            seg = decode_segment(data, _V5_12)
            return self.receive(seg.header, seg.payload, now)
        flags, stream, seq, low, payload = decode_segment_fields(data, self._layout)
        return self._receive(flags, stream, seq, low, payload, now)

    def carries_data(self, data: bytes) -> bool:
        """Whether *data*, a message payload, is a segment with data (one this window would acknowledge);
        False for an ack, or bytes that are no segment of the layout (left to :meth:`receive_message`)."""
        if self._legacy:
            try:
                return bool(decode_segment(data, _V5_12).header.flags & _HAS_PAYLOAD)
            except DecodeError:
                return False
        try:
            return bool(decode_segment_fields(data, self._layout)[0] & _HAS_PAYLOAD)
        except DecodeError:
            return False

    def receive(self, header: object, payload: bytes, now: float) -> list[bytes]:
        """Process one received segment; return the messages now deliverable, in order."""
        if isinstance(header, LegacyWindowHeader) and self._legacy:
            self._on_legacy_ack(header, now)
            if not header.flags & _HAS_PAYLOAD:
                return []
            return self._on_data(header.flags, header.sequence_id, payload, now)
        if self._legacy or not isinstance(header, (WindowHeader517, WindowHeader529, WindowHeader70)):
            raise TypeError(f"{type(header).__name__} does not belong to the {self._layout.value} layout")
        stream = getattr(header, "stream_id", None)
        return self._receive(header.flags, stream, header.sequence_id, header.lowest_pending, payload, now)

    def _receive(self, flags: int, stream: int | None, seq: int, low: int, payload: bytes, now: float) -> list[bytes]:
        """A 16-bit layout segment as plain fields; *stream* None = the layout has no stream id."""
        if stream is not None and stream != self._stream:
            self._stats["malformed"] += 1
            return []
        if not self._synced:
            # A fresh receiver starts at the sender's lowest unacknowledged id.
            self._synced = True
            self._origin = low
        if not flags & _HAS_PAYLOAD:
            self._on_ack(payload, now)
            return []
        return self._on_data(flags, seq, payload, now)

    def _on_data(self, flags: int, seq_wire: int, payload: bytes, now: float) -> list[bytes]:
        expected = self._expected
        half, mod = self._half, self._mod
        n = expected + ((seq_wire - (self._origin + expected) + half) & mod) - half
        d = n - expected
        early = self._early
        if d < 0 or n in early:
            self._stats["duplicates"] += 1
            self._ack_due = now  # the peer may have missed our ack
            return []
        if d > self._receive_limit:
            self._stats["out_of_window"] += 1
            self._ack_due = now
            return []
        if d > 0:
            self._stats["out_of_order"] += 1
            early[n] = (flags, payload)
            self._ack_due = now  # tell the sender about the gap at once
            return []
        delivered: list[bytes] = []
        self._take(flags, payload, delivered)
        expected += 1
        if early:
            while expected in early:
                f, p = early.pop(expected)
                self._take(f, p, delivered)
                expected += 1
        self._expected = expected
        due = now + self._ack_delay
        self._ack_due = due if self._ack_due is None else min(self._ack_due, due)
        return delivered

    def _take(self, flags: int, payload: bytes, delivered: list[bytes]) -> None:
        """Add one in-order segment to the message being reassembled."""
        if self._legacy:
            # <=5.12: a message runs until a segment with flag 2 (see the module doc).
            ends = bool(flags & _LEGACY_END)
            if self._skipping:
                self._skipping = not ends
                return
            if not self._partial_open:
                self._partial, self._partial_flags, self._partial_size = [], flags, 0
                self._partial_open = True
        else:
            ends = bool(flags & _LAST)
            if flags & _FIRST:
                if ends and not self._partial_open:
                    # The common whole message, first and last fragment at once: the
                    # general steps below without the list (same state afterwards).
                    self._skipping = False
                    self._partial_flags = self._partial_size = 0
                    if len(payload) > self._max_message:
                        self._oversized()
                        return
                    self._deliver(flags, payload, delivered)
                    return
                if self._partial_open:
                    self._stats["malformed"] += 1  # the previous message never finished
                self._partial, self._partial_flags, self._partial_size = [], flags, 0
                self._partial_open, self._skipping = True, False
            elif self._skipping:
                self._skipping = not ends
                return
            elif not self._partial_open:
                self._stats["malformed"] += 1  # continuation without a first fragment
                self._skipping = not ends
                return
        self._partial.append(payload)
        self._partial_size += len(payload)
        if self._partial_size > self._max_message:
            self._oversized()
            self._partial, self._partial_open, self._skipping = [], False, not ends
            return
        if not ends:
            return
        self._partial_open = False
        message = b"".join(self._partial)
        first_flags = self._partial_flags
        self._partial, self._partial_flags, self._partial_size = [], 0, 0
        self._deliver(first_flags, message, delivered)

    def _deliver(self, first_flags: int, message: bytes, delivered: list[bytes]) -> None:
        """Hand over one reassembled message, inflated when its first segment says ZLIB."""
        if first_flags & _ZLIB:
            inflater = zlib.decompressobj()
            try:
                message = inflater.decompress(message, self._max_message)
            except zlib.error:
                self._stats["malformed"] += 1
                return
            if inflater.unconsumed_tail:
                self._oversized()  # it inflates beyond the bound (a zlib bomb stops here)
                return
            if not inflater.eof:
                self._stats["malformed"] += 1
                return
        self._stats["delivered"] += 1
        delivered.append(message)

    def _oversized(self) -> None:
        self._stats["oversized"] += 1
        self.oversized += 1

    def _on_ack(self, payload: bytes, now: float) -> None:
        try:
            record = find_ack_record(payload, self._stream)
        except DecodeError:
            self._stats["bad_acks"] += 1
            return
        if record is None:
            return
        ack_id, mask = record
        # Every id <= ack id is acknowledged; mask bit i acknowledges ack id + 1 + i.
        last = self._base - 1
        ack = self._unwrap(ack_id, (self._first + last) & self._mod, last)
        self._apply_ack(ack + 1, ack + 1, mask, now)

    def _on_legacy_ack(self, header: LegacyWindowHeader, now: float) -> None:
        # <=5.12: ack id = the next id the peer expects; bitmap bit k = ack id + 1 + k.
        nxt = self._unwrap(header.ack_id, self._wire(self._base), self._base)
        self._apply_ack(nxt, nxt + 1, header.ack_bitmap, now)

    def _apply_ack(self, cumulative: int, mask_base: int, mask: int, now: float) -> None:
        """Acknowledge every id below *cumulative* and ``mask_base + i`` for each mask bit *i*."""
        hi = self._sent_hi
        stats = self._stats
        if cumulative > hi:
            stats["bad_acks"] += 1  # acknowledges ids we never sent
            return
        out = self._out
        newly = [n for n in range(self._base, cumulative) if n in out]
        i = 0
        while mask >> i:
            if mask >> i & 1:
                n = mask_base + i
                if n >= hi:
                    break
                if n >= cumulative and n in out:
                    newly.append(n)
            i += 1
        sample: float | None = None
        highest = -1
        for n in newly:
            seg = out.pop(n)
            stats["acked"] += 1
            if n > highest:
                highest = n
            if seg.retries == 0 and seg.sent_at is not None:
                sample = now - seg.sent_at  # Karn: never from a retransmitted segment
        if sample is not None and sample >= 0:
            self.rtt.on_sample(sample, now)
            stats["rtt_samples"] += 1
        base, nxt = self._base, self._next
        while base < nxt and base not in out:
            base += 1
        self._base = base
        if self._fast and highest > base:
            self._fast_retransmit(highest, now)
        if hi < nxt and hi < base + self._window_size:
            self._queued_at = now

    def _fast_retransmit(self, highest: int, now: float) -> None:
        """Make holes below *highest* due now when enough later ids are acknowledged."""
        est = self.rtt
        # One smoothed RTT plus its deviation: long enough for the segment's own ack to
        # have come back, so mere reordering rarely triggers a resend.
        wait = est.rto if est.smoothed is None or est.variance is None else est.smoothed + est.variance
        later_acked = 0
        for n in range(highest, self._base - 1, -1):
            seg = self._out.get(n)
            if seg is None:
                later_acked += 1
                continue
            if (
                later_acked >= self._fast
                and seg.sent_at is not None
                and seg.deadline is not None
                and now - seg.sent_at >= wait
                and seg.deadline > now
            ):
                seg.deadline = now
                self._stats["fast_retransmits"] += 1
