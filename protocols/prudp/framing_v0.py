"""The v0-family framing: Nintendo v0, Quazal v0 and the Rendez-Vous variant.

Layout (spec ../shared/spec/prudp.md §2.1, §3.1, §4.1; little-endian):

    src u8 | dst u8 | type/flags (u16: type | flags << 4, or u8: type | flags << 3)
    | session u8 | signature 4 | seq u16
    | [connection signature 4: SYN and CONNECT only]
    | [fragment id: DATA only, u8, or u32 in the Rendez-Vous variant]
    | [payload size u16: only with HAS_SIZE]
    | payload | checksum (1 or 4 bytes, over every preceding byte of this packet)

A datagram may hold several packets back to back; every packet but the last
must then carry HAS_SIZE, because without it the payload runs to the end of the
datagram minus the checksum (spec §2.1).

In the 1-byte form only five flag bits exist: ACK 0x08, RELIABLE 0x10,
NEED_ACK 0x20, HAS_SIZE 0x40 and bit 0x80, which we read as MULTI_ACK (spec
§1.3, §4.1).
"""

from __future__ import annotations

from protocols.errors import AuthenticationError, BadValue, EncodeError, ShortData
from protocols.prudp.checksum import checksum
from protocols.prudp.packet import Flag, PacketType, PrudpPacket
from protocols.prudp.variants import Variant
from protocols.wire import Reader, Writer

__all__ = ["decode_v0", "encode_v0", "flags_from_byte", "flags_to_byte"]

_ONE_BYTE_FLAGS = int(Flag.ACK | Flag.RELIABLE | Flag.NEED_ACK | Flag.HAS_SIZE | Flag.MULTI_ACK)


def flags_from_byte(five_bits: int) -> Flag:
    """1-byte form: the fifth flag bit (0x10) stands for MULTI_ACK (spec §1.3)."""
    return Flag((five_bits & 0x0F) | (int(Flag.MULTI_ACK) if five_bits & 0x10 else 0))


def flags_to_byte(flags: int) -> int:
    if flags & ~_ONE_BYTE_FLAGS:
        raise EncodeError(f"flags 0x{flags:03x} cannot be written in the 1-byte type/flags form")
    return (flags & 0x0F) | (0x10 if flags & Flag.MULTI_ACK else 0)


def _read_one(data: bytes, r: Reader, variant: Variant, key: int, verify: bool) -> PrudpPacket:
    start = r.pos
    src = r.u8("source vport")
    dst = r.u8("destination vport")
    if variant.flags_bytes == 2:
        tf = r.u16_le("type/flags")
        wire_type, flags = tf & 0x0F, Flag(tf >> 4)
        if wire_type > 7:
            raise BadValue(f"unknown PRUDP packet type {wire_type}")
    else:
        tf = r.u8("type/flags")
        wire_type, flags = tf & 0x07, flags_from_byte(tf >> 3)
    ptype = variant.type_from_wire(wire_type)
    session = r.u8("session id")
    signature = r.bytes(4, "packet signature")
    seq = r.u16_le("sequence id")
    conn_sig = None
    if ptype in (PacketType.SYN, PacketType.CONNECT):
        conn_sig = r.bytes(variant.connection_signature_bytes, "connection signature")
    frag = None
    if ptype == PacketType.DATA:
        frag = r.uint(variant.fragment_id_bytes, "fragment id", le=True)
    if flags & Flag.HAS_SIZE:
        size = r.u16_le("payload size")
        payload = r.bytes(size, "payload")
    else:
        n = r.remaining() - variant.checksum_bytes
        if n < 0:
            raise ShortData(f"packet ends before its {variant.checksum_bytes}-byte checksum")
        payload = r.bytes(n, "payload")
    body = data[start : r.pos]
    got = r.uint(variant.checksum_bytes, "checksum", le=True)
    k = key if variant.checksum_key_applies(src) else 0
    ok = checksum(body, k, variant.checksum_bytes) == got
    if verify and not ok:
        raise AuthenticationError(f"PRUDP checksum mismatch (got 0x{got:x}); wrong access key or damaged packet")
    return PrudpPacket(
        source=src,
        destination=dst,
        type=ptype,
        flags=flags,
        session_id=session,
        signature=signature,
        sequence_id=seq,
        connection_signature=conn_sig,
        fragment_id=frag,
        payload=payload,
        checksum_ok=ok,
    )


def decode_v0(data: bytes, variant: Variant, key: int, *, verify: bool = True) -> list[PrudpPacket]:
    """Split a datagram into its packets.

    Args:
        data: the UDP payload.
        variant: a v0-family variant.
        key: the access-key byte (:func:`protocols.prudp.checksum.key_byte`).
        verify: raise :class:`AuthenticationError` on a bad checksum; when false,
            record the result in ``checksum_ok`` instead.

    Raises:
        DecodeError: the bytes are not a well-formed packet sequence.
    """
    data = bytes(data)
    r = Reader(data)
    packets = [_read_one(data, r, variant, key, verify)]
    while not r.at_end():
        if not packets[-1].flags & Flag.HAS_SIZE:
            raise BadValue("a packet without HAS_SIZE must be the last in its datagram")
        packets.append(_read_one(data, r, variant, key, verify))
    return packets


def encode_v0(packet: PrudpPacket, variant: Variant, key: int) -> bytes:
    """Encode one packet, computing its checksum."""
    w = Writer()
    w.u8(packet.source, "source vport")
    w.u8(packet.destination, "destination vport")
    wire_type = variant.type_to_wire(int(packet.type))
    if variant.flags_bytes == 2:
        w.u16_le(wire_type | (int(packet.flags) << 4), "type/flags")
    else:
        if wire_type > 7:
            raise EncodeError(f"type {wire_type} does not fit the 1-byte form")
        w.u8(wire_type | (flags_to_byte(int(packet.flags)) << 3), "type/flags")
    w.u8(packet.session_id, "session id")
    if len(packet.signature) != 4:
        raise EncodeError(f"v0 packet signature must be 4 bytes, got {len(packet.signature)}")
    w.bytes(packet.signature)
    w.u16_le(packet.sequence_id, "sequence id")
    if packet.type in (PacketType.SYN, PacketType.CONNECT):
        sig = packet.connection_signature
        if sig is None or len(sig) != variant.connection_signature_bytes:
            raise EncodeError(f"{packet.type.name} needs a {variant.connection_signature_bytes}-byte connection signature")
        w.bytes(sig)
    elif packet.connection_signature is not None:
        raise EncodeError(f"{packet.type.name} has no connection-signature field")
    if packet.type == PacketType.DATA:
        if packet.fragment_id is None:
            raise EncodeError("DATA needs a fragment id")
        w.uint(packet.fragment_id, variant.fragment_id_bytes, "fragment id", le=True)
    elif packet.fragment_id is not None:
        raise EncodeError(f"{packet.type.name} has no fragment-id field")
    if packet.flags & Flag.HAS_SIZE:
        w.u16_le(len(packet.payload), "payload size")
    w.bytes(packet.payload)
    body = w.getvalue()
    k = key if variant.checksum_key_applies(packet.source) else 0
    return body + checksum(body, k, variant.checksum_bytes).to_bytes(variant.checksum_bytes, "little")
