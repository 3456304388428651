"""Nintendo PRUDP v1 framing (magic ``EA D0``), spec ../shared/spec/prudp.md §2.3.

Layout (little-endian):

    EA D0 | version u8 (= 1) | options length u8 | payload size u16
    | src u8 | dst u8 | type/flags u16 (type | flags << 4) | session u8
    | substream u8 | seq u16 | signature 16 | options | payload

There is no checksum; the 16-byte signature is an HMAC-MD5 (spec §2.6, computed
in :mod:`protocols.prudp.signatures`).  The payload size is always present, so
several packets can share a datagram whatever HAS_SIZE says.

Options are ``id u8, size u8, value`` with fixed sizes (spec §2.3 table).  We
reject unknown ids, wrong sizes and duplicates, like the reference client.
Their wire order is kept in ``option_order`` when it differs from the canonical
order (0, 1, 2, 3, 4, 0x80), so re-encoding is byte-exact either way.
"""

from __future__ import annotations

import struct

from protocols.errors import BadMagic, BadValue, EncodeError, UnsupportedVersion
from protocols.prudp.packet import Flag, PacketType, PrudpPacket
from protocols.wire import Reader, Writer

__all__ = ["MAGIC", "OPTION_SIZES", "decode_v1", "encode_options", "encode_v1", "signed_header"]

MAGIC = b"\xea\xd0"
OPTION_SIZES = {0: 4, 1: 16, 2: 1, 3: 2, 4: 1, 0x80: 16}
_CANONICAL = (0, 1, 2, 3, 4, 0x80)


def _present(packet: PrudpPacket) -> dict[int, bytes]:
    values: dict[int, bytes] = {}
    if packet.supported_functions is not None:
        values[0] = struct.pack("<I", packet.supported_functions)
    if packet.connection_signature is not None:
        if len(packet.connection_signature) != 16:
            raise EncodeError("v1 connection signature must be 16 bytes")
        values[1] = packet.connection_signature
    if packet.fragment_id is not None:
        values[2] = bytes([packet.fragment_id]) if 0 <= packet.fragment_id < 256 else b""
        if not values[2]:
            raise EncodeError(f"v1 fragment id {packet.fragment_id} does not fit in a byte")
    if packet.initial_unreliable_id is not None:
        values[3] = struct.pack("<H", packet.initial_unreliable_id)
    if packet.max_substream is not None:
        if not 0 <= packet.max_substream < 256:
            raise EncodeError("max substream does not fit in a byte")
        values[4] = bytes([packet.max_substream])
    if packet.lite_signature is not None:
        if len(packet.lite_signature) != 16:
            raise EncodeError("lite signature must be 16 bytes")
        values[0x80] = packet.lite_signature
    return values


def encode_options(packet: PrudpPacket) -> bytes:
    """The options block of *packet*, in its recorded or canonical order."""
    values = _present(packet)
    order = packet.option_order if packet.option_order is not None else tuple(i for i in _CANONICAL if i in values)
    if sorted(order) != sorted(values):
        raise EncodeError(f"option_order {order} does not match the options present {sorted(values)}")
    w = Writer()
    for oid in order:
        w.u8(oid)
        w.u8(len(values[oid]))
        w.bytes(values[oid])
    return w.getvalue()


def signed_header(packet: PrudpPacket) -> bytes:
    """Header bytes 6..13 (src, dst, type/flags, session, substream, seq): the HMAC's first input (spec §2.6)."""
    w = Writer()
    w.u8(packet.source, "source vport")
    w.u8(packet.destination, "destination vport")
    if int(packet.type) > 15:
        raise EncodeError("type does not fit in 4 bits")
    w.u16_le(int(packet.type) | (int(packet.flags) << 4), "type/flags")
    w.u8(packet.session_id, "session id")
    w.u8(packet.substream_id, "substream id")
    w.u16_le(packet.sequence_id, "sequence id")
    return w.getvalue()


def encode_v1(packet: PrudpPacket) -> bytes:
    options = encode_options(packet)
    if len(options) > 255:
        raise EncodeError("options block too long")
    if len(packet.signature) != 16:
        raise EncodeError(f"v1 signature must be 16 bytes, got {len(packet.signature)}")
    w = Writer()
    w.bytes(MAGIC)
    w.u8(1)
    w.u8(len(options))
    w.u16_le(len(packet.payload), "payload size")
    w.bytes(signed_header(packet))
    w.bytes(packet.signature)
    w.bytes(options)
    w.bytes(packet.payload)
    return w.getvalue()


def _read_one(r: Reader) -> PrudpPacket:
    if r.bytes(2, "magic") != MAGIC:
        raise BadMagic("PRUDP v1 packet does not start with EA D0")
    version = r.u8("version")
    if version != 1:
        raise UnsupportedVersion(f"PRUDP v1 header version {version}, expected 1")
    opt_len = r.u8("options length")
    size = r.u16_le("payload size")
    src = r.u8("source vport")
    dst = r.u8("destination vport")
    tf = r.u16_le("type/flags")
    if tf & 0x0F > 7:
        raise BadValue(f"unknown PRUDP packet type {tf & 0x0F}")
    session = r.u8("session id")
    substream = r.u8("substream id")
    seq = r.u16_le("sequence id")
    signature = r.bytes(16, "signature")
    values: dict[int, bytes] = {}
    order: list[int] = []
    with r.restrict_to(opt_len, "options") as o:
        while not o.at_end():
            oid = o.u8("option id")
            osize = o.u8("option size")
            if oid not in OPTION_SIZES:
                raise BadValue(f"unknown v1 option id {oid}")
            if osize != OPTION_SIZES[oid]:
                raise BadValue(f"v1 option {oid} has size {osize}, expected {OPTION_SIZES[oid]}")
            if oid in values:
                raise BadValue(f"duplicate v1 option {oid}")
            values[oid] = o.bytes(osize, f"option {oid}")
            order.append(oid)
    payload = r.bytes(size, "payload")
    canonical = tuple(i for i in _CANONICAL if i in values)
    return PrudpPacket(
        source=src,
        destination=dst,
        type=PacketType(tf & 0x0F),
        flags=Flag(tf >> 4),
        session_id=session,
        signature=signature,
        sequence_id=seq,
        substream_id=substream,
        connection_signature=values.get(1),
        fragment_id=values[2][0] if 2 in values else None,
        payload=payload,
        supported_functions=struct.unpack("<I", values[0])[0] if 0 in values else None,
        initial_unreliable_id=struct.unpack("<H", values[3])[0] if 3 in values else None,
        max_substream=values[4][0] if 4 in values else None,
        lite_signature=values.get(0x80),
        option_order=None if tuple(order) == canonical else tuple(order),
    )


def decode_v1(data: bytes) -> list[PrudpPacket]:
    """Split a datagram into its v1 packets (signatures are checked by the caller, who knows the keys)."""
    r = Reader(bytes(data))
    packets = [_read_one(r)]
    while not r.at_end():
        packets.append(_read_one(r))
    return packets
