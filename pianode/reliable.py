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
"""

from __future__ import annotations

import zlib
from typing import Any

import attrs

from pianode.rtt import RttEstimator
from protocols.errors import DecodeError
from protocols.pia.reliable import (
    AckRecord,
    BulkAck,
    LegacyWindowHeader,
    Segment,
    WindowFlag,
    WindowHeader70,
    WindowHeader517,
    WindowHeader529,
    WindowLayout,
    decode_bulk_ack,
    decode_segment,
    encode_bulk_ack,
    encode_segment,
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
        self.config = c = config if config is not None else WindowConfig()
        self.rtt = (
            rtt
            if rtt is not None
            else RttEstimator(initial_rto=c.initial_rto, min_rto=c.min_rto, max_rto=max(c.max_rto, c.initial_rto))
        )
        # send side (unbounded sequence numbers; wire id = (initial + n) & 0xFFFF)
        self._out: dict[int, _Out] = {}
        self._base = 0  # lowest unacknowledged
        self._next = 0  # next to assign
        self._sent_hi = 0  # first never transmitted
        self._queued_at: float | None = None
        self._bits = sequence_bits(c.layout)
        self._mod = (1 << self._bits) - 1
        # receive side.  <=5.12 peers both start at the same id; later layouts
        # learn the peer's start from its first header (lowest pending).
        self._synced = c.legacy
        self._origin = c.first_sequence_id if c.legacy else 0  # wire id of unbounded 0
        self._expected = 0
        self._early: dict[int, tuple[int, bytes]] = {}
        self._partial: list[bytes] = []
        self._partial_flags = 0
        self._partial_size = 0
        self._partial_open = False
        self._skipping = False  # dropping the rest of a broken message
        self._ack_due: float | None = None
        self.failure: str | None = None
        self._stats = dict.fromkeys(attrs.fields_dict(WindowStatistics), 0)

    # -- public state ------------------------------------------------------------

    @property
    def failed(self) -> bool:
        return self.failure is not None

    @property
    def in_flight(self) -> int:
        """Segments transmitted and not yet acknowledged."""
        return sum(1 for n in range(self._base, self._sent_hi) if n in self._out)

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
        return max(1, -(-size // self.config.max_payload))

    def can_send(self, size: int) -> bool:
        """True if a message of *size* bytes fits the send buffer now."""
        return (
            not self.failed
            and size <= self.config.max_message_size
            and len(self._out) + self._segments_for(size) <= self.config.send_buffer
        )

    def send(self, data: bytes, now: float) -> None:
        """Queue one message for reliable delivery.

        Raises:
            MessageTooLarge: larger than ``max_message_size`` or than the whole send buffer.
            SendBufferFull: no room now (nothing was queued).
            WindowFailed: the window gave up on the peer.
        """
        c = self.config
        if self.failure is not None:
            raise WindowFailed(self.failure)
        count = self._segments_for(len(data))
        if len(data) > c.max_message_size or count > c.send_buffer:
            raise MessageTooLarge(f"message of {len(data)} bytes needs {count} segments")
        if len(self._out) + count > c.send_buffer:
            raise SendBufferFull(f"send buffer holds {len(self._out)} of {c.send_buffer} segments; {count} needed")
        for i in range(count):
            flags = WindowFlag.HAS_PAYLOAD
            if c.legacy:
                if i == count - 1:
                    flags |= _LEGACY_END
            else:
                if i == 0:
                    flags |= WindowFlag.FIRST_FRAGMENT
                if i == count - 1:
                    flags |= WindowFlag.LAST_FRAGMENT
            self._out[self._next] = _Out(int(flags), bytes(data[i * c.max_payload : (i + 1) * c.max_payload]))
            self._next += 1
        if self._window_open():
            self._queued_at = now if self._queued_at is None else min(self._queued_at, now)

    # -- wire helpers -----------------------------------------------------------------

    def _wire(self, n: int) -> int:
        return (self.config.first_sequence_id + n) & self._mod

    def _rx_wire(self, n: int) -> int:
        return (self._origin + n) & self._mod

    def _early_mask(self, first: int) -> int:
        """Bit i set = early arrival ``first + i`` held."""
        mask = 0
        for n in self._early:
            mask |= 1 << (n - first)
        return mask

    def _header(self, flags: int, seq: int) -> LegacyWindowHeader | WindowHeader517 | WindowHeader529 | WindowHeader70:
        c = self.config
        if c.legacy:
            # Every <=5.12 header carries the ack: next expected id + bitmap of expected+1+k.
            return LegacyWindowHeader(
                flags=flags,
                sequence_id=seq,
                ack_id=self._rx_wire(self._expected),
                ack_bitmap=self._early_mask(self._expected + 1),
            )
        low = self._wire(self._base)
        if c.layout is WindowLayout.V5_17:
            return WindowHeader517(flags=flags, stream_id=c.stream_id, sequence_id=seq, lowest_pending=low)
        if c.layout is WindowLayout.V5_29:
            return WindowHeader529(flags=flags, stream_id=c.stream_id, sequence_id=seq, lowest_pending=low)
        return WindowHeader70(flags=flags, sequence_id=seq, lowest_pending=low)

    def _unwrap(self, wire: int, ref_wire: int, ref: int) -> int:
        """The unbounded number nearest *ref* whose wire value is *wire*."""
        half = 1 << (self._bits - 1)
        return ref + ((wire - ref_wire + half) & self._mod) - half

    # -- output ------------------------------------------------------------------------

    def segments_to_send(self, now: float) -> list[Segment]:
        """Segments to transmit now: an ack if one is owed, retransmissions, then new data."""
        self.handle_timer(now)
        if self.failure is not None:
            return []
        c = self.config
        data: list[Segment] = []
        for n in range(self._base, self._sent_hi):
            seg = self._out.get(n)
            if seg is None or seg.deadline is None or seg.deadline > now:
                continue
            seg.retries += 1
            seg.sent_at = now
            seg.deadline = now + min(c.max_rto, self.rtt.rto * c.backoff**seg.retries)
            self._stats["retransmitted"] += 1
            data.append(Segment(self._header(seg.flags, self._wire(n)), seg.payload))
        while self._sent_hi < self._next and self._sent_hi < self._base + c.window_size:
            n = self._sent_hi
            seg = self._out[n]
            seg.first_sent = seg.sent_at = now
            seg.deadline = now + self.rtt.rto
            self._sent_hi += 1
            self._stats["sent"] += 1
            data.append(Segment(self._header(seg.flags, self._wire(n)), seg.payload))
        self._queued_at = now if self._sent_hi < self._next and self._window_open() else None
        out: list[Segment] = []
        if c.legacy and data:
            self._ack_due = None  # every <=5.12 data header just carried the ack
        # Ack when due, or early when data goes out anyway (same datagram).
        if self._ack_due is not None and (self._ack_due <= now or data):
            out.append(self._ack_segment())
        return out + data

    def messages_to_send(self, now: float) -> list[bytes]:
        """:meth:`segments_to_send`, encoded: one Pia message payload each."""
        return [encode_segment(s, self.config.layout) for s in self.segments_to_send(now)]

    def _window_open(self) -> bool:
        return self._sent_hi < self._base + self.config.window_size

    def _ack_segment(self) -> Segment:
        self._ack_due = None
        self._stats["acks_sent"] += 1
        if self.config.legacy:
            # Captured 3.x pure acks: flags 0, sequence id 0, no payload.
            return Segment(self._header(0, 0), b"")
        # ack id = last delivered; mask bit i = (ack id) + 1 + i = expected + i.
        record = AckRecord(self.config.stream_id, self._rx_wire(self._expected - 1), self._early_mask(self._expected))
        payload = encode_bulk_ack(BulkAck((record,) * self.config.ack_records))
        return Segment(self._header(0, self._wire(self._next)), payload)

    # -- timers ---------------------------------------------------------------------------

    def get_timer(self) -> float | None:
        """When :meth:`handle_timer` / :meth:`segments_to_send` next has work, or None."""
        if self.failure is not None:
            return None
        times = [t for t in (self._ack_due, self._queued_at) if t is not None]
        oldest: float | None = None
        for n in range(self._base, self._sent_hi):
            seg = self._out.get(n)
            if seg is None or seg.deadline is None:
                continue
            times.append(seg.deadline)
            if oldest is None and seg.first_sent is not None:
                oldest = seg.first_sent
        if oldest is not None:
            times.append(oldest + self.config.give_up_after)
        return min(times) if times else None

    def handle_timer(self, now: float) -> None:
        """Apply the give-up limits; due retransmissions go out in :meth:`segments_to_send`."""
        if self.failure is not None:
            return
        c = self.config
        for n in range(self._base, self._sent_hi):
            seg = self._out.get(n)
            if seg is None or seg.first_sent is None or seg.deadline is None:
                continue
            if seg.deadline <= now and seg.retries >= c.max_retries:
                self._fail(f"sequence id {self._wire(n):#06x} unacknowledged after {seg.retries} retransmissions")
                return
            if now - seg.first_sent >= c.give_up_after:
                self._fail(f"sequence id {self._wire(n):#06x} unacknowledged for {now - seg.first_sent:.1f} s")
                return

    def _fail(self, reason: str) -> None:
        self.failure = reason
        self._ack_due = None
        self._queued_at = None

    # -- input ------------------------------------------------------------------------------

    def receive_message(self, data: bytes, now: float) -> list[bytes]:
        """Decode one Pia message payload as a segment and :meth:`receive` it.

        Raises:
            DecodeError: *data* is not a segment of the configured layout.
        """
        seg = decode_segment(data, self.config.layout)
        return self.receive(seg.header, seg.payload, now)

    def receive(self, header: object, payload: bytes, now: float) -> list[bytes]:
        """Process one received segment; return the messages now deliverable, in order."""
        if isinstance(header, LegacyWindowHeader) and self.config.legacy:
            self._on_legacy_ack(header, now)
            if not header.flags & WindowFlag.HAS_PAYLOAD:
                return []
            return self._on_data(header.flags, header.sequence_id, payload, now)
        if self.config.legacy or not isinstance(header, (WindowHeader517, WindowHeader529, WindowHeader70)):
            raise TypeError(f"{type(header).__name__} does not belong to the {self.config.layout.value} layout")
        stream = getattr(header, "stream_id", self.config.stream_id)
        if stream != self.config.stream_id:
            self._stats["malformed"] += 1
            return []
        if not self._synced:
            # A fresh receiver starts at the sender's lowest unacknowledged id.
            self._synced = True
            self._origin = header.lowest_pending
        if not header.flags & WindowFlag.HAS_PAYLOAD:
            self._on_ack(payload, now)
            return []
        return self._on_data(header.flags, header.sequence_id, payload, now)

    def _on_data(self, flags: int, seq_wire: int, payload: bytes, now: float) -> list[bytes]:
        n = self._unwrap(seq_wire, self._rx_wire(self._expected), self._expected)
        d = n - self._expected
        if d < 0 or n in self._early:
            self._stats["duplicates"] += 1
            self._ack_due = now  # the peer may have missed our ack
            return []
        if d > self.config.receive_limit:
            self._stats["out_of_window"] += 1
            self._ack_due = now
            return []
        if d > 0:
            self._stats["out_of_order"] += 1
            self._early[n] = (flags, payload)
            self._ack_due = now  # tell the sender about the gap at once
            return []
        delivered: list[bytes] = []
        self._take(flags, payload, delivered)
        self._expected += 1
        while self._expected in self._early:
            f, p = self._early.pop(self._expected)
            self._take(f, p, delivered)
            self._expected += 1
        due = now + self.config.ack_delay
        self._ack_due = due if self._ack_due is None else min(self._ack_due, due)
        return delivered

    def _take(self, flags: int, payload: bytes, delivered: list[bytes]) -> None:
        """Add one in-order segment to the message being reassembled."""
        c = self.config
        if c.legacy:
            # <=5.12: a message runs until a segment with flag 2 (see the module doc).
            ends = bool(flags & _LEGACY_END)
            if self._skipping:
                self._skipping = not ends
                return
            if not self._partial_open:
                self._partial, self._partial_flags, self._partial_size = [], flags, 0
                self._partial_open = True
        else:
            ends = bool(flags & WindowFlag.LAST_FRAGMENT)
            if flags & WindowFlag.FIRST_FRAGMENT:
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
        if self._partial_size > c.max_message_size:
            self._stats["malformed"] += 1
            self._partial, self._partial_open, self._skipping = [], False, not ends
            return
        if not ends:
            return
        self._partial_open = False
        message = b"".join(self._partial)
        first_flags = self._partial_flags
        self._partial, self._partial_flags, self._partial_size = [], 0, 0
        if first_flags & WindowFlag.ZLIB:
            inflater = zlib.decompressobj()
            try:
                message = inflater.decompress(message, self.config.max_message_size)
            except zlib.error:
                self._stats["malformed"] += 1
                return
            if inflater.unconsumed_tail or not inflater.eof:
                self._stats["malformed"] += 1
                return
        self._stats["delivered"] += 1
        delivered.append(message)

    def _on_ack(self, payload: bytes, now: float) -> None:
        try:
            record = decode_bulk_ack(payload).for_stream(self.config.stream_id)
        except DecodeError:
            self._stats["bad_acks"] += 1
            return
        if record is None:
            return
        # Every id <= ack id is acknowledged; mask bit i acknowledges ack id + 1 + i.
        ack = self._unwrap(record.ack_id, self._wire(self._base - 1), self._base - 1)
        self._apply_ack(ack + 1, ack + 1, record.mask, now)

    def _on_legacy_ack(self, header: LegacyWindowHeader, now: float) -> None:
        # <=5.12: ack id = the next id the peer expects; bitmap bit k = ack id + 1 + k.
        nxt = self._unwrap(header.ack_id, self._wire(self._base), self._base)
        self._apply_ack(nxt, nxt + 1, header.ack_bitmap, now)

    def _apply_ack(self, cumulative: int, mask_base: int, mask: int, now: float) -> None:
        """Acknowledge every id below *cumulative* and ``mask_base + i`` for each mask bit *i*."""
        if cumulative > self._sent_hi:
            self._stats["bad_acks"] += 1  # acknowledges ids we never sent
            return
        newly = [n for n in range(self._base, cumulative) if n in self._out]
        i = 0
        while mask >> i:
            if mask >> i & 1:
                n = mask_base + i
                if n >= self._sent_hi:
                    break
                if n >= cumulative and n in self._out:
                    newly.append(n)
            i += 1
        sample: float | None = None
        highest = max(newly, default=-1)
        for n in newly:
            seg = self._out.pop(n)
            self._stats["acked"] += 1
            if seg.retries == 0 and seg.sent_at is not None:
                sample = now - seg.sent_at  # Karn: never from a retransmitted segment
        if sample is not None and sample >= 0:
            self.rtt.on_sample(sample, now)
            self._stats["rtt_samples"] += 1
        while self._base < self._next and self._base not in self._out:
            self._base += 1
        if self.config.fast_retransmit and highest > self._base:
            self._fast_retransmit(highest, now)
        if self._sent_hi < self._next and self._window_open():
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
                later_acked >= self.config.fast_retransmit
                and seg.sent_at is not None
                and seg.deadline is not None
                and now - seg.sent_at >= wait
                and seg.deadline > now
            ):
                seg.deadline = now
                self._stats["fast_retransmits"] += 1
