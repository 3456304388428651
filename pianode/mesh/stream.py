"""A connected peer's stream of unreliable data, in and out: the bulk of a real-time session.

Theory of operation
-------------------
A game sends a frame to every station many times a second; each is a packet of
one unreliable message whose bytes differ from the last only in the packet id,
the header nonce, the tag and the payload.  The codec's stream closures
(``PacketCodec.lone_sealer`` / ``lone_opener``) handle such a packet with the
constant bytes compared or copied, not read field by field; their plans
(:mod:`protocols.pia.stream_plan`) spell the same steps out as fields, so that a
loop over a whole batch runs them without a call per packet.

* :func:`receive_batch`: what the driver read in one go.  A datagram from a
  connected peer whose :class:`Inbound` is current is opened here and its
  payload delivered; anything else (another shape, a bad tag, another
  message) goes through ``MeshSession.receive_datagram``, which judges it in
  full.  Where the AEAD opens many packets in one call cheaper than one by one
  (pycryptodome's fast path), the batch's stream datagrams are opened first in
  one call (:func:`_open_together`), and each is then judged in its turn.
* :func:`seal_frames`: a frame to every member, one loop over their
  :class:`Outbound` records, for ``Outbox.seal_unreliable_each``.
* :func:`seal_lone`: a packet of one other message (an ack, a reliable
  segment, an RTT message) to such a peer, by its Outbound's plan with the
  message's protocol type and port, for ``Outbox._flush``.

An ``Inbound`` or ``Outbound`` is made from the peer's opener or sealer once
they are made for its identity (``made_for``), and is forgotten when an
identity field of the peer is set (:class:`~pianode.mesh.peer.Peer`'s
properties); each also names the codec it was made under, and is used only
while the session's is the same.  The replay filter, the counters and the
delivery are the same calls the general path makes.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Any

from pianode.mesh.config import MAX_DATAGRAM
from pianode.mesh.packet_ids import NONCE_MASK
from pianode.mesh.events import DataReceived
from pianode.mesh.peer import Peer
from pianode.mesh.stats import DropReason
from protocols.errors import AuthenticationError, DecodeError
from protocols.pia.packet_fast import StreamOpener
from protocols.pia.message import Message
from protocols.pia.stream_plan import OpenPlan, SealPlan, payload_end, seal_by_plan

__all__ = ["Inbound", "Outbound", "oversized", "receive_batch", "seal_frames", "seal_lone"]


#: Equal constants of many streams (nonce leads, message headers, padding), kept once: see :func:`_shared`.
_SHARED: dict[bytes, bytes] = {}
_SHARED_LIMIT = 4096
_LONE_SHAPES = 64  # message shapes an Outbound remembers (see seal_lone)


def _shared(value: bytes) -> bytes:
    """*value*, or an equal bytes object already kept.  The streams of a process's stations often hold
    equal constants (a sender's nonce lead is the same at every receiver, a receiver's message header the
    same from every sender, padding the same everywhere); read as one object by every stream it stays
    in the CPU's cache between frames, where as many copies as streams would not."""
    kept = _SHARED.get(value)
    if kept is None:
        if len(_SHARED) >= _SHARED_LIMIT:
            _SHARED.clear()
        kept = _SHARED[value] = value
    return kept


class Inbound:
    """A connected peer's stream to us, opened inline (see the module): its :class:`OpenPlan`'s fields,
    and what they were made for."""

    __slots__ = ("opener", "codec", "index", "replay", "complete", "plan", "prefix", "header_size", "footer_at", "nonce_lead", "nonce_at",
                 "tag_at", "open_one", "decrypt", "tag_error", "open_many", "message_header_size",
                 "frame")  # fmt: skip

    def __init__(
        self, opener: tuple[tuple[object, ...], StreamOpener | None], codec: object, index: int, replay: Any, plan: OpenPlan
    ) -> None:
        self.opener, self.codec, self.index, self.plan = opener, codec, index, plan
        self.replay = replay  # (the peer's replay filter, made with the peer and never replaced: Links.new_peer)
        #: ``complete(datagram, body)``: what the opener gives for an opened body that is not the stream's
        #: message (a reliable segment, an ack, an RTT message: ``codec.decode_lone``'s value); None: not known.
        self.complete = getattr(opener[1], "complete", None)
        # What the receive loop reads per datagram, as slots of one object.
        self.prefix, self.header_size, self.footer_at = plan.prefix, plan.header_size, plan.footer_at
        self.nonce_lead, self.nonce_at, self.tag_at = _shared(plan.nonce_lead), plan.nonce_at, plan.tag_at
        self.open_one, self.decrypt, self.tag_error, self.open_many = plan.open_one, plan.decrypt, plan.tag_error, plan.open_many
        self.message_header_size = plan.message_header_size
        #: The last frame's shape: ``(length, head, tail, start, stop)``, its body's length, its message header
        #: (size included), its padding, and where its payload starts and ends; a body of that length, head
        #: and end passes the plan's message checks.
        self.frame: tuple[int, bytes, bytes, int, int] = (-1, b"", b"", 0, 0)


def _inbound(peer: Peer, codec: object) -> Inbound | None:
    """The peer's :class:`Inbound`, made now if its opener is current and has a plan; else None."""
    stream = peer.opener
    if stream is None or stream[1] is None or not peer.connected or peer.index is None:
        return None
    plan = getattr(stream[1], "plan", None)
    if plan is None or stream[0] != (codec, peer.index, peer.peer_conn_id, peer.variable_id, peer.constant_id):
        return None
    peer.inbound = Inbound(stream, codec, peer.index, peer.replay, plan)
    return peer.inbound


def receive_batch(session: Any, batch: Sequence[tuple[bytes, tuple[str, int]]], now: float) -> None:
    """``MeshSession.receive_datagram`` for each of *batch* in order (what the driver read in one go);
    a connected peer's frames are opened and delivered here (see the module)."""
    peers = session.peers
    membership = session.membership
    counters = session.counters
    offset = session._group_offset
    codec = session.codec
    closed = codec is None or membership.closed
    # An AEAD that opens many packets in one call cheaper than one by one (pycryptodome's fast path):
    # the stream datagrams are opened first, and each is then judged in its turn (below).
    opened = _open_together(session, batch, codec) if session._open_in_batches and not closed and len(batch) > 1 else None
    delivered = 0
    try:
        for i, (data, addr) in enumerate(batch):
            peer = None if closed else peers.get(addr)
            if peer is not None and (offset is None or len(data) <= offset or not data[offset]):
                ib = peer.inbound
                if ib is None or ib.codec is not codec or ib.opener is not peer.opener:
                    ib = _inbound(peer, codec)
                # OpenPlan, inline: the stream's shape, the tag, then the message.
                if (ib is not None and ib.header_size <= len(data) <= MAX_DATAGRAM and data.startswith(ib.prefix)
                        and not (ib.footer_at and data[ib.footer_at])):  # fmt: skip
                    tag_at = ib.tag_at
                    header_nonce = data[ib.nonce_at : tag_at]
                    # Opened with the others by this very Inbound's plan, or now.  (A tag that fails:
                    # judged in full below, and dropped there as a bad tag.)
                    if opened is not None and (got := opened.get(i)) is not None and got[0] is ib:
                        body = got[1] or b""
                    elif ib.decrypt is not None:
                        try:
                            body = ib.decrypt(ib.nonce_lead + header_nonce, data[ib.header_size :] + data[tag_at : ib.header_size], None)
                        except ib.tag_error:
                            body = b""
                    else:
                        try:
                            body = ib.open_one(ib.nonce_lead + header_nonce, data[ib.header_size :], data[tag_at : ib.header_size])
                        except AuthenticationError:
                            body = b""
                    # The message: the stream's (the constant bytes, the size, the padding), of the last
                    # frame's size as most are (Inbound.frame: the same checks, made once per size).
                    length, head, tail, start, stop = ib.frame
                    if not (len(body) == length and body.startswith(head) and body.endswith(tail)):
                        stop = _frame_stop(ib, body)
                        start = ib.message_header_size
                    if stop:
                        # _receive_lone's steps for unreliable data but those the constant bytes took
                        replay = ib.replay
                        if not replay.accept_value(int.from_bytes(header_nonce[-7:], "big")):
                            session._tally.drop(DropReason.REPLAYED)
                            continue
                        if replay.advanced:  # (see Links.fresh)
                            peer.last_heard = now
                        peer.packets_received += 1
                        delivered += 1
                        handler = session.data_handler
                        if handler is not None:
                            handler(ib.index, body[start:stop], False)
                        else:
                            session.emit(DataReceived(ib.index, body[start:stop], False))
                        continue
                    if body and ib.complete is not None:
                        # Another message of the peer's, authentic (a reliable segment, an ack, an RTT message):
                        # read from the body as the opener reads it, not opened a second time.
                        codec.last_nonce = ib.nonce_lead + header_nonce
                        try:
                            got = ib.complete(data, body)
                        except DecodeError:
                            session._tally.drop(DropReason.MALFORMED)
                            continue
                        session.receive_decoded(peer, got, data, addr, now)
                        codec = session.codec  # (what it did may have changed them)
                        closed = codec is None or membership.closed
                        continue
            if len(data) > MAX_DATAGRAM and oversized(session, data):
                continue
            session.receive_datagram(data, addr, now)
            codec = session.codec  # (what it did may have changed them)
            closed = codec is None or membership.closed
    finally:
        counters["packets_received"] += delivered
        counters["unreliable_delivered"] += delivered


def _frame_stop(ib: Inbound, body: bytes) -> int:
    """Where the payload of the stream's message in *body* ends (OpenPlan's message checks), or 0 when
    *body* is not the stream's message; a message of the stream's shape becomes the Inbound's frame shape."""
    stop = payload_end(ib.plan, body)
    if not stop:
        return 0
    start = ib.message_header_size
    ib.frame = (len(body), _shared(body[:start]), _shared(body[stop:]), start, stop)
    return stop


def _open_together(session: Any, batch: Sequence[tuple[bytes, tuple[str, int]]], codec: object) -> dict[int, tuple[Inbound, bytes | None]]:
    """The stream datagrams of *batch* opened in one AEAD call (``OpenPlan.open_many``): position in
    *batch* -> (the Inbound whose plan read it, its body or None for a tag that fails).  Opening is
    pure, so doing it first changes nothing: :func:`receive_batch` still judges each datagram in its
    turn, and takes the body only if that Inbound is still the peer's then."""
    peers = session.peers
    offset = session._group_offset
    where: list[tuple[int, Inbound]] = []
    nonces: list[bytes] = []
    cts: list[bytes] = []
    tags: list[bytes] = []
    for i, (data, addr) in enumerate(batch):
        peer = peers.get(addr)
        if peer is None or len(data) > MAX_DATAGRAM or (offset is not None and len(data) > offset and data[offset]):
            continue
        ib = peer.inbound
        if ib is None or ib.codec is not codec or ib.opener is not peer.opener:
            ib = _inbound(peer, codec)
        if ib is None or ib.open_many is None:
            continue
        hsize, tag_at = ib.header_size, ib.tag_at
        if len(data) >= hsize and data.startswith(ib.prefix) and not (ib.footer_at and data[ib.footer_at]):
            where.append((i, ib))
            nonces.append(ib.nonce_lead + data[ib.nonce_at : tag_at])
            cts.append(data[hsize:])
            tags.append(data[tag_at:hsize])
    if not where:
        return {}
    bodies = where[0][1].open_many(nonces, cts, tags)  # (one codec, so one key for all of them)
    return {i: (ib, body) for (i, ib), body in zip(where, bodies, strict=True)}


def oversized(session: Any, data: bytes) -> bool:
    """Whether *data* is longer than a node takes (``MAX_DATAGRAM``; the driver reads one byte
    more, so a longer datagram arrives cut, and would otherwise fail as a bad tag): dropped."""
    if len(data) <= MAX_DATAGRAM:
        return False
    session._tally.drop(DropReason.OVERSIZED)
    return True


class Outbound:
    """Our stream to a connected peer, sealed inline (see the module): the per-peer fields of its sealer's
    :class:`SealPlan`, and what they were made for."""

    __slots__ = ("sealer", "codec", "own", "peer", "tx_ids", "address", "nonce_lead", "nonce_skip", "seal", "message_fields",
                 "connection_id", "plan", "head_size", "head", "lone")  # fmt: skip

    def __init__(self, sealer: tuple[tuple[object, ...], Any], codec: object, own: tuple[int, int], peer: Peer, plan: SealPlan) -> None:
        self.sealer, self.codec, self.own, self.peer, self.address, self.plan = sealer, codec, own, peer, peer.address, plan
        self.tx_ids = peer.tx_ids  # (the peer's own counter, never replaced: Peer.tx_ids)
        self.nonce_lead, self.nonce_skip, self.seal = _shared(plan.nonce_lead), plan.nonce_skip, plan.seal
        self.message_fields, self.connection_id = plan.message_fields, plan.connection_id
        # The message header of the last frame's size (SealPlan: the fields but the size, packed once per size).
        self.head_size, self.head = -1, b""
        #: Shapes of other messages (their fields but the payload) and whether the plan seals them as the
        #: codec does (see :func:`seal_lone`).
        self.lone: dict[tuple[object, ...], bool] = {}

    def message_head(self, n: int) -> bytes:
        """The stream's message header for a payload of *n* bytes (``SealPlan.message_pack``), packed now and
        kept as the frame size's (the loop takes ``head`` itself while ``head_size`` is *n*)."""
        fields = self.message_fields
        self.head, self.head_size = _shared(self.plan.message_pack(fields[0], fields[1], n, *fields[2:])), n
        return self.head


def _outbound(peer: Peer, codec: object, own: tuple[int, int]) -> Outbound | None:
    """The peer's :class:`Outbound`, made now if its sealer is current and has a plan; else None."""
    sealer = peer.sealer
    if sealer is None or sealer[1] is None or sealer[0] != (codec, peer.index, peer.variable_id, peer.own_conn_id, *own):
        return None
    plan = getattr(sealer[1], "plan", None)
    if plan is None:
        return None
    peer.outbound = Outbound(sealer, codec, own, peer, plan)
    return peer.outbound


def _current_outbound(peer: Peer, codec: object, own: tuple[int, int]) -> Outbound | None:
    """The peer's :class:`Outbound` if it was made for *codec*, the peer's sealer and our ids *own*, else
    one made now (:func:`_outbound`; None where none can be)."""
    ob = peer.outbound
    if ob is None or ob.codec is not codec or ob.sealer is not peer.sealer or ob.own != own:
        return _outbound(peer, codec, own)
    return ob


def seal_frames(outbox: Any, peers: Sequence[Peer], data: bytes, now: float) -> list[tuple[bytes, tuple[str, int]]] | None:
    """``Outbox.seal_unreliable_each(peers, data, now)`` in one loop over the peers' :class:`Outbound`
    records; None (nothing done) unless every peer has one (the outbox's loop then makes their sealers),
    or where header nonces name a station (6.16+: ``Outbox._bind_*``) or a tap watches."""
    codec = outbox.codec
    if outbox._bind_receiver or outbox._bind_sender or outbox.tap is not None or not peers:
        return None
    own = (outbox.variable_id, outbox.message_source_id)
    streams = []
    for peer in peers:
        ob = peer.outbound  # (_current_outbound, inline: once per peer a frame)
        if ob is None or ob.codec is not codec or ob.sealer is not peer.sealer or ob.own != own:
            ob = _outbound(peer, codec, own)
            if ob is None:
                return None
        streams.append(ob)
    plan = streams[0].plan  # (the constants every packet of the codec shares: SealPlan)
    n = len(data)
    if n > 0xFFFF:
        return None  # (the outbox's loop reports it)
    header_pack, tag_part = plan.header_pack, plan.tag_part
    magic, version_byte = plan.magic, plan.version_byte
    rest = data + plan.tails[n & 15]  # (the payload and its padding: the same in every packet)
    counter = outbox._nonce_counter
    out = []
    append = out.append
    if plan.seal is None:
        # One AEAD call for all of them (pycryptodome's fast path): nonces and plaintexts first.
        ids_and_nonces = []
        nonces = []
        bodies = []
        for ob in streams:
            counter = (counter + 1) & NONCE_MASK
            header_nonce = counter.to_bytes(8, "big")
            ids_and_nonces.append((ob.tx_ids.next(), header_nonce))
            nonces.append(ob.nonce_lead + header_nonce[ob.nonce_skip :])
            bodies.append((ob.head if ob.head_size == n else ob.message_head(n)) + rest)
        for ob, (packet_id, header_nonce), sealed in zip(streams, ids_and_nonces, plan.seal_many(nonces, bodies), strict=True):
            append((header_pack(magic, version_byte, ob.connection_id, packet_id, header_nonce, sealed[tag_part]) + sealed[:-16], ob.address))
            peer = ob.peer
            peer.packets_sent += 1
            peer.last_sent = now
    else:
        for ob in streams:
            counter = (counter + 1) & NONCE_MASK
            header_nonce = counter.to_bytes(8, "big")
            ids = ob.tx_ids
            packet_id = ids.next_id
            ids.next_id = 1 if packet_id == 0xFFFF else packet_id + 1  # PacketIdCounter.next, inline
            sealed = ob.seal(ob.nonce_lead + header_nonce[ob.nonce_skip :], (ob.head if ob.head_size == n else ob.message_head(n)) + rest, None)
            append((header_pack(magic, version_byte, ob.connection_id, packet_id, header_nonce, sealed[tag_part]) + sealed[:-16], ob.address))
            peer = ob.peer
            peer.packets_sent += 1
            peer.last_sent = now
    outbox._nonce_counter = counter
    outbox._counters["packets_sent"] += len(out)
    return out


def seal_lone(outbox: Any, peer: Peer, message: Message, now: float) -> bytes | None:
    """The datagram ``Outbox._packet_unsent(peer, (message,), now)`` gives, sealed by the peer's stream plan:
    a packet of one message that is not a frame (a reliable segment or ack, an RTT or keep-alive message)
    to a peer with an :class:`Outbound`; None (nothing done) where the plan is not to seal it.

    The plan packs the stream's message header with the message's protocol type and port.  Whether that
    is the codec's packet for a message of this shape (its fields but the payload) is found out the first
    time the shape goes to the peer: the codec seals that packet (with the id and nonce the plan would
    take) and the plan's bytes are compared with it; a shape they differ for stays the codec's.  In a
    32-station session such packets (about 2,300 a second) cost several times a frame's work each."""
    if (outbox._bind_receiver or outbox._bind_sender or outbox.tap is not None or len(message.payload) > 0xFFFF
            or not peer.connected or peer.index is None):  # (else the codec's header has packet id 0: wire.make_header)
        return None
    ob = _current_outbound(peer, outbox.codec, (outbox.variable_id, outbox.message_source_id))
    if ob is None:
        return None
    shape = (message.protocol_type, message.protocol_port, message.flags, message.destination, message.source_constant_id,
             message.source_station_index, message.reserved, message.extra, message.presence)  # fmt: skip
    trusted = ob.lone.get(shape)
    if trusted is False:
        return None
    # The nonce and packet id the packet takes (Outbox.next_header_nonce, with no binding here; PacketIdCounter),
    # taken below once it is sealed.
    hn = ((outbox._nonce_counter + 1) & NONCE_MASK).to_bytes(8, "big")
    try:
        data = seal_by_plan(ob.plan, ob.tx_ids.peek(), hn, message.payload, type_port=message.protocol_type << 24 | message.protocol_port)
    except struct.error:  # a field out of the plan's range: the codec reports it as it does
        return None
    if trusted is None:
        # (the codec takes the same nonce and packet id: Outbox.next_header_nonce, wire.make_header)
        general = outbox._packet_unsent(peer, (message,), now)[0]
        if len(ob.lone) >= _LONE_SHAPES:
            ob.lone.clear()
        ob.lone[shape] = general == data
        return general
    outbox.next_header_nonce()
    ob.tx_ids.next()
    return data
