"""One-closure fast paths of :class:`protocols.pia.packet.PacketCodec` for the node's common packet shape.

Theory of operation
-------------------
The node's datagrams nearly all have one shape: an encrypted GCM packet of a
single message whose header has every field, and no footer, or (5.27-6.30) a
plaintext footer of receivers after the ciphertext: a group frame (spec §1.6).
For that shape the codec binds one closure per direction at construction
(:func:`fast_encoder`, :func:`fast_decoder`), with every constant of the
profile, key and nonce rule in closure cells, so the message struct, the
nonce parts, the AEAD call, the header struct and the final join run in one
Python frame.  Anything else, and any doubt (a check fails or an operation
raises), goes to ``PacketCodec._encode_general`` / ``_decode_general``, so
the result is always theirs: same bytes or value, same error.  The property
tests in tests/protocols/pia/test_codec_fast_path.py compare the two.

The decoding closure stops short of building values: for a packet of one
message it returns the fields as a :data:`~protocols.pia.packet.LoneMessage`
tuple.  ``PacketCodec.decode`` builds the :class:`Packet` from it (with the
slot-storing constructors below); ``PacketCodec.decode_lone`` hands the tuple
to a receive path that reads a few fields and would throw the values away.

Kept apart from :mod:`protocols.pia.packet` so that module stays the readable
reference of the wire layout (spec §1, §2.4, §3.1).
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from typing import Any, Protocol

import attrs

from protocols.crypto.aead import GCM_MISMATCH, open_raw
from protocols.errors import AuthenticationError
from protocols.pia.header import PacketHeader, header_layout
from protocols.pia.message import Message, decode_messages, lone_delta_layout
from protocols.pia.nonce import nonce_parts
from protocols.pia.stream_plan import OpenPlan, SealPlan, open_by_plan, seal_by_plan
from protocols.pia.packet_values import LoneMessage, Packet, new_named, pack_footer, unpack_footer
from protocols.pia.versions import HeaderFormat, MessageFormat, VersionProfile



class PacketCodec(Protocol):
    """What the closures read of :class:`protocols.pia.packet.PacketCodec`, which builds them at its construction."""

    profile: VersionProfile
    last_nonce: bytes
    _gcm: Any
    _nonce: Callable[[PacketHeader, str], bytes] | None
    _lone_enc: Any
    _lone_dec: Any
    _lone_or_packet: Any

    def encode(self, packet: Packet, source: str) -> bytes: ...
    def decode_lone(self, data: bytes, source: str) -> Packet | LoneMessage: ...
    def _encode_general(self, packet: Packet, source: str) -> bytes: ...
    def _decode_general(self, data: bytes, source: str, *, verify: bool = True) -> Packet: ...
    def _split_inner(self, plaintext: bytes, header: PacketHeader) -> tuple[bytes, bytes]: ...

__all__ = ["OpenPlan", "SealPlan", "StreamOpener", "StreamSealer", "fast_decoder", "fast_encoder", "lone_opener", "lone_sealer", "packet_of_lone"]


class StreamSealer(Protocol):
    """What :func:`lone_sealer` returns: ``sealer(packet_id, header_nonce, payload)`` is the datagram.

    Where the AEAD seals many packets in one call cheaper than one by one
    (``seal_many`` is not None: pycryptodome's fast path), a batch of them is
    ``prepare`` (nonce and plaintext, or None: use the call) for each, one
    ``seal_many(nonces, plaintexts)``, then ``assemble(packet_id,
    header_nonce, len(payload), sealed)`` for each; the same bytes.
    """

    prepare: Callable[[int, bytes, bytes], tuple[bytes, bytes] | None]
    assemble: Callable[[int, bytes, int, bytes], bytes]
    seal_many: Callable[[list[bytes], list[bytes]], list[bytes]] | None
    plan: SealPlan | None

    def __call__(self, packet_id: int, header_nonce: bytes, payload: bytes) -> bytes: ...


class StreamOpener(Protocol):
    """What :func:`lone_opener` returns: ``opener(datagram)`` is the stream's payload,
    another decoded value, or None (not the stream's).

    In two steps for a batch (``open_many`` not None): ``prepare(datagram)``
    gives ``(nonce, ciphertext, tag)`` or None (not the stream's); one
    ``open_many(nonces, ciphertexts, tags)`` gives each plaintext or None (the
    tag failed); ``complete(datagram, plaintext)`` is what ``opener`` returns.
    """

    prepare: Callable[[bytes], tuple[bytes, bytes, bytes] | None]
    complete: Callable[[bytes, bytes], Any]
    open_many: Callable[[list[bytes], list[bytes], list[bytes]], list[bytes | None]] | None
    plan: OpenPlan | None

    def __call__(self, data: bytes) -> Any: ...

_BYTE = [bytes((i,)) for i in range(256)]



def _shape(profile: VersionProfile) -> tuple[Any, ...]:
    """What both closures read of the profile: header struct, versions and magic, then
    footer-inside, header format B, C/D, G, the lone-message layout, message format E, G."""
    hf = profile.header_format
    mf = profile.message_format
    st, versions, magic = header_layout(hf)
    return (
        st, versions, magic, profile.footer == "encrypted",
        hf is HeaderFormat.B, hf is HeaderFormat.C or hf is HeaderFormat.D, hf is HeaderFormat.G,
        lone_delta_layout(profile), mf is MessageFormat.E, mf is MessageFormat.G,
    )  # fmt: skip


class _Uncommon(Exception):
    """Internal: the packet is not of the common shape (never leaves the encode closure)."""


def fast_encoder(codec: PacketCodec) -> Callable[[Packet, str], bytes] | None:
    profile = codec.profile
    aead = codec._gcm
    hf = profile.header_format
    if aead is None or hf is HeaderFormat.A:
        return None
    tag_len = profile.tag_length
    if tag_len != (16 if hf is HeaderFormat.B or hf is HeaderFormat.C else 8):
        return None  # the header's tag field would not take the tag: encode_header reports it
    general = codec._encode_general
    seal = aead.seal_raw
    hpack_st, versions, magic, inner, is_b, is_cd, is_g, layout, is_me, is_mg = _shape(profile)
    hpack = hpack_st.pack
    default_version = profile.header_version
    lone_enc = codec._lone_enc
    if layout is not None:
        mpack = layout[0].pack
        full = layout[1]
        tails = layout[2]
    join = b"".join
    tag_part = slice(-16, -16 + tag_len if tag_len < 16 else None)  # of ciphertext || 16-byte tag
    builder = codec._nonce
    parts = nonce_parts(builder) if builder is not None else None
    inline_nonce = parts is not None
    if parts is not None:
        lookup, learn, fixed, skip, middle = parts.lookup, parts.learn, parts.fixed, parts.skip, parts.middle
        id_kind = 0 if parts.id_field is None else 1 if parts.id_field == "connection_id" else 2
        if (id_kind == 2 and parts.id_field != "source_variable_id") or (id_kind == 0 and middle):
            inline_nonce = False
        if id_kind and middle:
            id_kind += 2  # 3, 4: the id byte is followed by fixed bytes (NEX)
    byte = _BYTE
    plain_footer = profile.footer == "plain"
    # The last footer packed: a station's group frames name the same receivers
    # until its membership changes (a tuple held here cannot be reused by another).
    packed: list[Any] = [(), b""]

    def encode(packet: Packet, source: str) -> bytes:
        try:
            h = packet.header
            messages = packet.messages
            hn = h.nonce
            if not (h.encrypted and len(messages) == 1 and len(hn) == 8):
                raise _Uncommon
            footer = packet.footer
            if not footer:
                fbytes = b""
            elif plain_footer:
                if footer is packed[0]:
                    fbytes = packed[1]
                else:
                    fbytes = pack_footer(footer)  # too many or not u16: the general path reports it
                    packed[0], packed[1] = footer, fbytes
            else:
                raise _Uncommon
            # Message: the checks of encode_messages for a lone complete header.
            m = messages[0]
            if layout is not None:
                payload = m.payload
                n = len(payload)
                p = m.presence
                # (A size over 0xFFFF fails the u16 pack below: encode_messages refuses it too.)
                if not (
                    (p is None or (p == full and type(p) is int)) and m.source_station_index is None and not m.reserved
                ):
                    raise _Uncommon
                tail, ff = tails[n & 15]
                if is_mg:
                    if m.source_constant_id is not None or m.destination:
                        raise _Uncommon
                    pt = join((mpack(full, m.flags, n, m.protocol_type, m.protocol_port, m.extra), payload, tail))
                else:
                    ptype = m.protocol_type
                    port = m.protocol_port
                    src_id = m.source_constant_id
                    # With the port in range, packing ptype << 24 | port as a u32
                    # fails exactly when the type is not a u8 (encode_messages' check).
                    if m.extra or not 0 <= port <= 0xFFFFFF:
                        raise _Uncommon
                    if is_me:
                        if src_id is None:
                            raise _Uncommon
                        head = mpack(full, m.flags, n, ptype << 24 | port, m.destination, src_id)
                    else:
                        if src_id is not None:
                            raise _Uncommon
                        head = mpack(full, m.flags, n, ptype << 24 | port, m.destination)
                    pt = join((head, payload, tail))
            else:
                got = lone_enc(m)
                if got is None:
                    raise _Uncommon
                pt, ff = got
            # Header: the checks of encode_header, before any crypto.
            padding = ff if inner else h.padding_size
            if is_b:
                if not (
                    h.version is None
                    and h.destination_variable_id is None
                    and h.source_variable_id is None
                    and not padding
                    and not h.packet_flags
                ):
                    raise _Uncommon
            else:
                v = h.version
                if v is None:
                    v = default_version
                if not (v in versions and h.source_timer is None and h.destination_timer is None):
                    raise _Uncommon
                if is_cd:
                    if not (
                        h.destination_variable_id is None
                        and h.source_variable_id is None
                        and not padding
                        and not h.packet_flags
                    ):
                        raise _Uncommon
                elif h.connection_id:
                    raise _Uncommon
                elif is_g:
                    flags = h.packet_flags
                    if not (0 <= padding <= 15 and 0 <= flags <= 15):
                        raise _Uncommon
                elif padding or h.packet_flags:
                    raise _Uncommon
            # Nonce: the builder's rule from its parts (protocols/pia/nonce.py).
            if inline_nonce:
                if lookup is not None:
                    lead = lookup(source) or learn(source)
                else:
                    lead = fixed
                if id_kind == 1:
                    lead += byte[h.connection_id & 0xFF]
                elif id_kind == 2:
                    lead += byte[h.source_variable_id & 0xFF]
                elif id_kind == 3:
                    lead += byte[h.connection_id & 0xFF] + middle
                elif id_kind == 4:
                    lead += byte[h.source_variable_id & 0xFF] + middle
                nonce = lead + hn[1:] if skip else lead + hn
                if len(nonce) != 12:
                    raise _Uncommon  # the builder's error
            else:
                nonce = builder(h, source)  # type: ignore[misc]
                if type(nonce) is not bytes or len(nonce) != 12:
                    raise _Uncommon
            out = seal(nonce, pt, None)  # ciphertext || 16-byte tag
            tag = out[tag_part]
            if is_cd:
                head = hpack(magic, v | 0x80, h.connection_id, h.packet_id, hn, tag)
            elif is_b:
                head = hpack(
                    magic, 2, h.connection_id, h.packet_id, h.source_timer or 0, h.destination_timer or 0, hn, tag
                )
            elif is_g:
                head = hpack(
                    magic,
                    v | 0x80,
                    padding << 4 | flags,
                    h.destination_variable_id or 0,
                    h.source_variable_id or 0,
                    h.packet_id,
                    0,
                    hn,
                    tag,
                )
            else:
                head = hpack(
                    magic,
                    v | 0x80,
                    h.destination_variable_id or 0,
                    h.source_variable_id or 0,
                    h.packet_id,
                    len(fbytes),
                    hn,
                    tag,
                )
                if fbytes:
                    return head + out[:-16] + fbytes
            return head + out[:-16]
        except Exception:  # not the common shape, or something to report: the general path decides
            pass
        return general(packet, source)

    return encode


def _nonce_lead(builder: Callable[..., bytes], header: PacketHeader, source: str) -> tuple[bytes, int] | None:
    """``(lead, skip)`` such that the builder's nonce for *header* with any header
    nonce ``hn`` is ``lead + hn[skip:]``; None if it is not of that form."""
    probes = (bytes(range(1, 9)), bytes(range(0xF8, 0xF0, -1)))
    try:
        nonces = [builder(attrs.evolve(header, nonce=hn), source) for hn in probes]
    except Exception:
        return None
    for skip in (0, 1):
        cut = 12 - (8 - skip)
        lead = nonces[0][:cut]
        if all(type(n) is bytes and n == lead + hn[skip:] for n, hn in zip(nonces, probes, strict=True)):
            return lead, skip
    return None


def lone_sealer(codec: PacketCodec, header: PacketHeader, message: Message, source: str) -> StreamSealer | None:
    """See :meth:`protocols.pia.packet.PacketCodec.lone_sealer`."""
    profile = codec.profile
    aead = codec._gcm
    builder = codec._nonce
    hf = profile.header_format
    if aead is None or builder is None or hf is HeaderFormat.A or hf is HeaderFormat.B:
        return None  # (H-B headers carry timers that change with every packet)
    hpack_st, _, magic, inner, _, is_cd, is_g, layout, is_me, is_mg = _shape(profile)
    if layout is None or not header.encrypted or header.version is None or (inner and not is_g):
        return None
    found = _nonce_lead(builder, header, source)
    if found is None:
        return None
    lead, skip = found
    seal = aead.seal_raw
    join = b"".join
    hpack = hpack_st.pack
    mpack = layout[0].pack
    full = layout[1]
    tails = layout[2]
    tag_len = profile.tag_length
    tag_part = slice(-16, -16 + tag_len if tag_len < 16 else None)  # of ciphertext || 16-byte tag
    # What every packet shares: the message's fields but its size, the header's but id and nonce.
    flags, dest, src, extra = message.flags, message.destination, message.source_constant_id, message.extra
    ptype, port = message.protocol_type, message.protocol_port
    tp = ptype << 24 | port
    vb = header.version | 0x80
    conn, dvid, svid = header.connection_id, header.destination_variable_id or 0, header.source_variable_id or 0
    g_flags = header.packet_flags

    def sealer(packet_id: int, hn: bytes, payload: bytes) -> bytes:
        try:
            if len(hn) != 8:
                raise _Uncommon
            n = len(payload)
            tail, ff = tails[n & 15]
            if is_mg:
                head = mpack(full, flags, n, ptype, port, extra)
            elif is_me:
                head = mpack(full, flags, n, tp, dest, src)
            else:
                head = mpack(full, flags, n, tp, dest)
            out = seal(lead + hn[skip:] if skip else lead + hn, join((head, payload, tail)), None)
            if is_cd:
                return hpack(magic, vb, conn, packet_id, hn, out[tag_part]) + out[:-16]
            if is_g:
                padding = ff if inner else header.padding_size
                return hpack(magic, vb, padding << 4 | g_flags, dvid, svid, packet_id, 0, hn, out[tag_part]) + out[:-16]
            return hpack(magic, vb, dvid, svid, packet_id, 0, hn, out[tag_part]) + out[:-16]
        except Exception:  # a payload or id out of range: the codec reports it
            pass
        packet = Packet(attrs.evolve(header, packet_id=packet_id, nonce=hn), (attrs.evolve(message, payload=payload),))
        return codec.encode(packet, source)

    # The same packet in two steps, for a batch of packets sealed in one AEAD
    # call (StreamSealer): the nonce and plaintext first, the datagram from the
    # sealed bytes after.  Checked below against the codec, as sealer is.
    def prepare(packet_id: int, hn: bytes, payload: bytes) -> tuple[bytes, bytes] | None:
        if len(hn) != 8 or not 0 <= packet_id <= 0xFFFF:
            return None
        n = len(payload)
        try:
            if is_mg:
                head = mpack(full, flags, n, ptype, port, extra)
            elif is_me:
                head = mpack(full, flags, n, tp, dest, src)
            else:
                head = mpack(full, flags, n, tp, dest)
        except struct.error:
            return None  # too long: sealer gives it to the codec
        return (lead + hn[skip:] if skip else lead + hn), join((head, payload, tails[n & 15][0]))

    def assemble(packet_id: int, hn: bytes, size: int, out: bytes) -> bytes:
        if is_cd:
            return hpack(magic, vb, conn, packet_id, hn, out[tag_part]) + out[:-16]
        if is_g:
            padding = tails[size & 15][1] if inner else header.padding_size
            return hpack(magic, vb, padding << 4 | g_flags, dvid, svid, packet_id, 0, hn, out[tag_part]) + out[:-16]
        return hpack(magic, vb, dvid, svid, packet_id, 0, hn, out[tag_part]) + out[:-16]

    many = aead.seal_raw_many if getattr(aead, "batched", False) else None  # type: ignore[attr-defined]

    def in_two_steps(packet_id: int, hn: bytes, payload: bytes) -> bytes:
        prepared = prepare(packet_id, hn, payload)
        assert prepared is not None
        return assemble(packet_id, hn, len(payload), seal(prepared[0], prepared[1], None))

    # Trust it only where it gives the codec's own bytes (size tails, ids, nonces).
    for packet_id, hn, payload in ((1, bytes(8), b""), (0xFFFF, bytes(range(9, 17)), bytes(range(37)))):
        packet = Packet(attrs.evolve(header, packet_id=packet_id, nonce=hn), (attrs.evolve(message, payload=payload),))
        try:
            want = codec.encode(packet, source)
            if sealer(packet_id, hn, payload) != want:
                return None
            if many is not None and in_two_steps(packet_id, hn, payload) != want:
                many = None  # (never seen: the steps are sealer's own lines)
        except Exception:
            return None
    plan = None
    if is_cd and not is_mg:
        fields = (full, flags, tp, dest, src) if is_me else (full, flags, tp, dest)
        plan = SealPlan(lead, skip, seal if many is None else None, many, mpack, fields, tuple(t[0] for t in tails),
                        hpack, magic, vb, conn, tag_part)  # fmt: skip
        # Trust it only where it gives the sealer's bytes.
        for packet_id, hn, payload in ((1, bytes(8), b""), (0xFFFF, bytes(range(9, 17)), bytes(range(37)))):
            if seal_by_plan(plan, packet_id, hn, payload) != sealer(packet_id, hn, payload):
                plan = None
                break
    sealer.prepare = prepare  # type: ignore[attr-defined]
    sealer.assemble = assemble  # type: ignore[attr-defined]
    sealer.seal_many = many  # type: ignore[attr-defined]
    sealer.plan = plan  # type: ignore[attr-defined]
    return sealer  # type: ignore[return-value]


def _field_offsets(st: struct.Struct) -> list[int]:
    """The byte offset of each field of a big-endian struct, in order."""
    offsets, pos = [], 0
    for count, code in re.findall(r"(\d*)([a-zA-Z])", st.format.lstrip("<>!=@")):
        offsets.append(pos)
        pos += struct.calcsize(">" + count + code)
    return offsets


def lone_opener(codec: PacketCodec, lone: LoneMessage, source: str) -> StreamOpener | None:
    """See :meth:`protocols.pia.packet.PacketCodec.lone_opener`."""
    profile = codec.profile
    aead = codec._gcm
    builder = codec._nonce
    finish = codec._lone_or_packet
    hf = profile.header_format
    known = hf is HeaderFormat.C or hf is HeaderFormat.D or hf is HeaderFormat.E or hf is HeaderFormat.F
    if aead is None or builder is None or finish is None or not known:
        return None  # (H-A/H-B: no constant lead; H-G: an encrypted footer, its padding varies)
    st, _, _, inner, _, is_cd, _, layout, is_me, is_mg = _shape(profile)
    h, ptype, port, _, flags, dest, src, extra, full, footer = lone[:10]
    if layout is None or inner or footer or not h[0] or type(source) is not str:
        return None
    header = _make_header(*h)
    found = _nonce_lead(builder, header, source)
    if found is None:
        return None
    lead, skip = found
    # Where the fields are: the packet id ends the constant lead; the footer size (E/F)
    # follows it; the header nonce and the tag end the header.
    offsets = _field_offsets(st)
    pid_at = offsets[3] if is_cd else offsets[4]
    fs_at = 0 if is_cd else offsets[5]
    hn_at, tag_at = offsets[-2], offsets[-1]
    nonce_at = hn_at + skip  # the nonce is lead + the header nonce from byte skip on
    hsize = st.size
    tag_len = hsize - tag_at
    raw = open_raw(aead) if tag_len == 16 else None
    if raw is not None:
        decrypt, tag_error = raw
    open_ = aead.open
    mstruct, _, tail_pairs = layout
    mhsize = mstruct.size
    if is_mg:
        mhead = mstruct.pack(full, flags, 0, ptype, port, extra)
    elif is_me:
        mhead = mstruct.pack(full, flags, 0, ptype << 24 | port, dest, src)
    else:
        mhead = mstruct.pack(full, flags, 0, ptype << 24 | port, dest)
    # The message's bytes but its size (bytes 2-3), and what follows a payload of each length mod 16.
    mfirst, mrest = mhead[:2], mhead[4:]
    tails = [pair[0] for pair in tail_pairs]
    tail_lens = [len(t) for t in tails]
    template = list(h)
    probe = Packet(attrs.evolve(header, packet_id=1, nonce=bytes(8), tag=b""), (packet_of_lone(lone).messages[0],))
    try:
        prefix = codec.encode(probe, source)[:pid_at]
    except Exception:
        return None

    # What an opened body gives: the stream's payload, or the codec's value of another message.
    def complete(data: bytes, body: bytes) -> bytes | Packet | LoneMessage | None:
        if body.startswith(mfirst) and body.startswith(mrest, 4):
            size = body[2] << 8 | body[3]
            stop = mhsize + size
            k = size & 15
            if len(body) == stop + tail_lens[k] and body.endswith(tails[k]):
                return body[mhsize:stop]
        h2 = template.copy()
        h2[1] = int.from_bytes(data[pid_at : pid_at + 2], "big")
        h2[11] = data[hn_at:tag_at]
        h2[12] = data[tag_at:hsize]
        return finish(tuple(h2), body, ())

    def opener(data: bytes) -> bytes | Packet | LoneMessage | None:
        if type(data) is not bytes or len(data) < hsize or not data.startswith(prefix) or (fs_at and data[fs_at]):
            return None
        nonce = lead + data[nonce_at:tag_at]
        codec.last_nonce = nonce
        if raw is not None:
            try:
                body = decrypt(nonce, data[hsize:] + data[tag_at:hsize], None)
            except tag_error:
                raise AuthenticationError(GCM_MISMATCH) from None
        else:
            body = open_(nonce, data[hsize:], data[tag_at:hsize])
        return complete(data, body)

    # The same in two steps, for a batch opened in one AEAD call (StreamOpener):
    # what to open first, then what the opened body gives.
    many = aead.open_raw_many if getattr(aead, "batched", False) else None  # type: ignore[attr-defined]

    def prepare(data: bytes) -> tuple[bytes, bytes, bytes] | None:
        if type(data) is not bytes or len(data) < hsize or not data.startswith(prefix) or (fs_at and data[fs_at]):
            return None
        return lead + data[nonce_at:tag_at], data[hsize:], data[tag_at:hsize]

    def in_two_steps(data: bytes) -> bytes | Packet | LoneMessage | None:
        prepared = prepare(data)
        if prepared is None:
            return None
        body = open_(*prepared)
        codec.last_nonce = prepared[0]
        return complete(data, body)

    # Trust it only where it agrees with decode_lone: the stream's packets (two ids,
    # nonces and payload lengths) give their payload, another message decode_lone's value.
    other = attrs.evolve(probe.messages[0], protocol_port=port ^ 1, payload=b"x")
    for packet_id, hn, payload in ((1, bytes(8), b""), (0xFFFF, bytes(range(9, 17)), bytes(range(37)))):
        head = attrs.evolve(header, packet_id=packet_id, nonce=hn, tag=b"")
        for message, ours in ((attrs.evolve(probe.messages[0], payload=payload), True), (other, False)):
            try:
                data = codec.encode(Packet(head, (message,)), source)
                want = codec.decode_lone(data, source)
                got = opener(data)
            except Exception:
                return None
            if type(want) is not LoneMessage or (want.protocol_type, want.protocol_port) != ((ptype, port) if ours else (ptype, port ^ 1)):
                return None
            if ours:
                if got != payload or want.payload != payload or want[4:10] != lone[4:10] or want.header != (*h[:1], packet_id, *h[2:11], hn, want.header[12]):
                    return None
            elif got != want:
                return None
            if many is not None and in_two_steps(data) != got:
                many = None  # (never seen: the steps are opener's own lines)
    plan: OpenPlan | None = OpenPlan(
        prefix, hsize, fs_at, lead, nonce_at, tag_at, open_, decrypt if raw is not None else None,
        tag_error if raw is not None else AuthenticationError, many, mfirst, mrest, mhsize, tuple(tails), tuple(tail_lens),
    )  # fmt: skip
    # Trust it only where it gives the opener's payloads (and refuses what the opener does not call ours).
    for packet_id, hn, payload in ((1, bytes(8), b""), (0xFFFF, bytes(range(9, 17)), bytes(range(37)))):
        head = attrs.evolve(header, packet_id=packet_id, nonce=hn, tag=b"")
        for message in (attrs.evolve(probe.messages[0], payload=payload), other):
            data = codec.encode(Packet(head, (message,)), source)
            got = opener(data)
            if open_by_plan(plan, data) != (got if type(got) is bytes else None):
                plan = None
                break
        if plan is None:
            break
    opener.prepare = prepare  # type: ignore[attr-defined]
    opener.complete = complete  # type: ignore[attr-defined]
    opener.open_many = many  # type: ignore[attr-defined]
    opener.plan = plan  # type: ignore[attr-defined]
    return opener  # type: ignore[return-value]


def fast_decoder(
    codec: PacketCodec,
) -> tuple[Callable[..., Packet], Callable[..., Packet | LoneMessage], Callable[..., Packet | LoneMessage]] | None:
    """``(decode, decode_lone, lone_or_packet)`` closures of *codec*, or None.

    ``decode_lone`` is :meth:`PacketCodec.decode_lone`; ``lone_or_packet(h,
    body, footer)`` is its last step, the messages of a decrypted body, which
    :func:`lone_opener` shares.
    """
    profile = codec.profile
    aead = codec._gcm
    hf = profile.header_format
    if aead is None or hf is HeaderFormat.A:
        return None
    general = codec._decode_general
    open_ = aead.open
    # Full 16-byte tags on a backend with an unchecked decrypt: no Python frame for the AEAD.
    raw = open_raw(aead) if profile.tag_length == 16 else None
    if raw is not None:
        decrypt, tag_error = raw
    st, versions, magic, inner, is_b, is_cd, is_g, layout, is_me, is_mg = _shape(profile)
    unpack = st.unpack_from
    hsize = st.size
    lone_dec = codec._lone_dec
    align = profile.align_messages
    if layout is not None:
        munpack = layout[0].unpack_from
        mhsize = layout[0].size
        full = layout[1]
    builder = codec._nonce
    parts = nonce_parts(builder) if builder is not None else None
    inline_nonce = parts is not None
    if parts is not None:
        lookup, learn, fixed, skip, middle = parts.lookup, parts.learn, parts.fixed, parts.skip, parts.middle
        id_field = parts.id_field
        # The id byte comes from the unpacked header: the connection id (H-B..H-D) or source variable id (H-E..H-G).
        if id_field is None:
            inline_nonce = not middle
        else:
            inline_nonce = id_field == ("connection_id" if is_b or is_cd else "source_variable_id")
    byte = _BYTE
    ph = _header_maker()
    lone_packet = _lone_packet_maker()
    pkt = _packet_maker()
    split_inner = codec._split_inner
    plain_footer = profile.footer == "plain"

    def decode_lone(data: bytes, source: str, verify: bool = True, named: bool = True) -> Packet | LoneMessage | tuple[Any, ...]:
        if type(data) is not bytes or len(data) < hsize:
            return general(data, source, verify=verify)
        # Header: one unpack; only an encrypted header of the profile stays here, with at
        # most a plaintext footer.
        if is_cd:
            m_, b4, idv, pid, hn, tag = unpack(data)
            v = b4 & 0x7F
            if m_ != magic or b4 < 0x80 or v not in versions:
                return general(data, source, verify=verify)
            h = (True, pid, idv, v, None, None, None, None, 0, 0, 0, hn, tag)
            fs = 0
        elif is_b:
            m_, b4, idv, pid, st_, dt, hn, tag = unpack(data)
            if m_ != magic or b4 != 2:
                return general(data, source, verify=verify)
            h = (True, pid, idv, None, st_, dt, None, None, 0, 0, 0, hn, tag)
            fs = 0
        elif is_g:
            m_, b4, pf, dst, idv, pid, fs, hn, tag = unpack(data)
            v = b4 & 0x7F
            if m_ != magic or b4 < 0x80 or v not in versions or fs or pf & 1:  # 1: ZSTD payload
                return general(data, source, verify=verify)
            h = (True, pid, 0, v, None, None, dst, idv, 0, pf >> 4, pf & 0x0F, hn, tag)
        else:
            m_, b4, dst, idv, pid, fs, hn, tag = unpack(data)
            v = b4 & 0x7F
            if m_ != magic or b4 < 0x80 or v not in versions:
                return general(data, source, verify=verify)
            if fs:
                # A plaintext footer after the ciphertext (5.27-6.30, spec §1.6).  One
                # that does not fit or is not u16s: the general decoder's error.
                end = len(data) - fs
                if fs & 1 or end < hsize or not plain_footer:
                    return general(data, source, verify=verify)
            h = (True, pid, 0, v, None, None, dst, idv, fs, 0, 0, hn, tag)
        # From here on every step is the general decoder's, errors included.
        if inline_nonce:
            if lookup is not None:
                lead = lookup(source) or learn(source)
            else:
                lead = fixed
            if id_field is not None:
                lead += byte[idv & 0xFF] + middle
            nonce = lead + hn[1:] if skip else lead + hn
            if len(nonce) != 12:
                nonce = builder(ph(*h), source)  # type: ignore[misc]  # raises the builder's error
            codec.last_nonce = nonce
            if raw is not None:
                # aead.open's checks hold: a 12-byte nonce, a 16-byte tag (unpacked as 16s).
                try:
                    body = decrypt(nonce, (data[hsize:end] if fs else data[hsize:]) + tag, None)
                except tag_error:
                    raise AuthenticationError(GCM_MISMATCH) from None
            else:
                body = open_(nonce, data[hsize:end] if fs else data[hsize:], tag)
        else:
            nonce = builder(ph(*h), source)  # type: ignore[misc]
            codec.last_nonce = nonce
            body = open_(nonce, data[hsize:end] if fs else data[hsize:], tag)
        footer = unpack_footer(data[end:]) if fs else ()
        if inner:
            pad = pf >> 4 if is_g else 0
            if pad:
                body = body[: len(body) - pad] if pad <= len(body) else split_inner(body, ph(*h))[0]
        return lone_or_packet(h, body, footer, named)

    def lone_or_packet(
        h: tuple[Any, ...], body: bytes, footer: tuple[int, ...], named: bool = True
    ) -> Packet | LoneMessage | tuple[Any, ...]:
        """The end of :func:`decode_lone`: the messages of a decrypted *body* (footer trimmed) under header *h*."""
        if layout is not None:
            # One message with every field, then only its alignment pad and 0xFF padding (§2.4).
            end = len(body)
            if end >= mhsize and body[0] == full:
                if is_mg:
                    _, flags, size, ptype, port, extra = munpack(body)
                    dest = 0
                    src = None
                else:
                    extra = 0
                    if is_me:
                        _, flags, size, tp, dest, src = munpack(body)
                    else:
                        _, flags, size, tp, dest = munpack(body)
                        src = None
                    ptype = tp >> 24
                    port = tp & 0xFFFFFF
                stop = mhsize + size
                if stop < end:
                    pos = stop + (-stop & 3) if align else stop
                    lone = pos >= end or (body[pos] == 0xFF and body.count(0xFF, pos) == end - pos)
                else:
                    lone = stop == end
                if lone:
                    if named:
                        # What the receive loop reads: named fields (one tuple copy, no frame).
                        return new_named(
                            LoneMessage, (h, ptype, port, body[mhsize:stop], flags, dest, src, extra, full, footer, h[1], h[2], h[7])
                        )
                    return (h, ptype, port, body[mhsize:stop], flags, dest, src, extra, full, footer)
            return pkt(ph(*h), decode_messages(body, profile), footer)
        return pkt(ph(*h), lone_dec(body) or decode_messages(body, profile), footer)

    def decode(data: bytes, source: str, verify: bool = True) -> Packet:
        got = decode_lone(data, source, verify, False)
        if type(got) is tuple:  # the plain fields: no named tuple for a value built at once
            return lone_packet(ph(*got[0]), *got[1:])  # packet_of_lone, inline
        return got  # type: ignore[return-value]

    return decode, decode_lone, lone_or_packet


def _slot_setters(cls: type) -> tuple[Callable[[Any, Any], None], ...] | None:
    """The slot setters of a frozen slotted attrs class, in field order; None if its __init__ does more than store."""
    fields = attrs.fields(cls)
    if "__slots__" not in cls.__dict__ or hasattr(cls, "__attrs_post_init__") or hasattr(cls, "__attrs_pre_init__"):
        return None
    if any(f.validator is not None or f.converter is not None or not f.init for f in fields):
        return None
    return tuple(cls.__dict__[f.name].__set__ for f in fields)


def _header_maker() -> Callable[..., PacketHeader]:
    """``make(13 values in field order) -> PacketHeader``, equal to ``PacketHeader(*values)``, without attrs' __init__.

    A frozen attrs __init__ stores each field through ``object.__setattr__``;
    storing through the slot descriptors directly skips a lookup per field.
    """
    setters = _slot_setters(PacketHeader)
    if setters is None or len(setters) != 13:
        return PacketHeader
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9, s10, s11, s12 = setters
    new = object.__new__
    cls = PacketHeader

    def make(
        a: Any, b: Any, c: Any, d: Any, e: Any, f: Any, g: Any, h: Any, i: Any, j: Any, k: Any, m: Any, n: Any
    ) -> PacketHeader:
        o = new(cls)
        s0(o, a)
        s1(o, b)
        s2(o, c)
        s3(o, d)
        s4(o, e)
        s5(o, f)
        s6(o, g)
        s7(o, h)
        s8(o, i)
        s9(o, j)
        s10(o, k)
        s11(o, m)
        s12(o, n)
        return o

    return make


def _lone_packet_maker() -> Callable[..., Packet]:
    """``make(header, type, port, payload, flags, destination, source id, extra, presence, footer) -> Packet``.

    Equal to ``Packet(header, (Message(type, port, payload, flags, destination,
    source id, None, 0, extra, presence),), footer)``: a packet of one message, built
    in one call with the slot stores of :func:`_header_maker`.
    """
    msg_setters = _slot_setters(Message)
    pkt_setters = _slot_setters(Packet)
    if msg_setters is None or pkt_setters is None or len(msg_setters) != 10 or len(pkt_setters) != 3:

        def plain(
            h: PacketHeader, a: Any, b: Any, c: Any, d: Any, e: Any, f: Any, i: Any, j: Any, k: tuple[int, ...]
        ) -> Packet:
            return Packet(h, (Message(a, b, c, d, e, f, None, 0, i, j),), k)

        return plain
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9 = msg_setters
    p0, p1, p2 = pkt_setters
    new = object.__new__
    msg_cls = Message
    pkt_cls = Packet

    def make(
        h: PacketHeader, a: Any, b: Any, c: Any, d: Any, e: Any, f: Any, i: Any, j: Any, k: tuple[int, ...]
    ) -> Packet:
        m = new(msg_cls)
        s0(m, a)
        s1(m, b)
        s2(m, c)
        s3(m, d)
        s4(m, e)
        s5(m, f)
        s6(m, None)
        s7(m, 0)
        s8(m, i)
        s9(m, j)
        o = new(pkt_cls)
        p0(o, h)
        p1(o, (m,))
        p2(o, k)
        return o

    return make


def _packet_maker() -> Callable[[PacketHeader, tuple[Message, ...], tuple[int, ...]], Packet]:
    """``make(header, messages, footer) -> Packet``, equal to ``Packet(...)`` (see :func:`_header_maker`)."""
    setters = _slot_setters(Packet)
    if setters is None or len(setters) != 3:
        return Packet
    s0, s1, s2 = setters
    new = object.__new__
    cls = Packet

    def make(header: PacketHeader, messages: tuple[Message, ...], footer: tuple[int, ...]) -> Packet:
        o = new(cls)
        s0(o, header)
        s1(o, messages)
        s2(o, footer)
        return o

    return make


_make_header = _header_maker()
_make_lone_packet = _lone_packet_maker()


def packet_of_lone(lone: LoneMessage) -> Packet:
    """The :class:`Packet` of a :data:`~protocols.pia.packet.LoneMessage` (see ``PacketCodec.decode_lone``)."""
    return _make_lone_packet(_make_header(*lone.header), *lone[1:10])
