"""The PRUDP packet value shared by every variant.

One frozen :class:`PrudpPacket` describes a packet of any PRUDP flavour (Nintendo
v0 and v1, Quazal v0, the Rendez-Vous variant of the seed documents).  Fields a
flavour does not carry keep their defaults (``None`` or empty), so a codec only
has to know which of them to put on the wire.  The packet type is the logical
NEX numbering (spec ../shared/spec/prudp.md §1.2); a variant whose wire numbering
differs (Rendez-Vous USER = 6) maps it in its codec.  Flags are the logical NEX
values of spec §1.3, whatever the wire encoding (1-byte or 2-byte form).

``payload`` is always the payload **as on the wire** (still encrypted and
compressed), because checksums and signatures cover those bytes.  Decoders may
attach two annotations that do not take part in equality: ``checksum_ok`` (when
asked not to raise on a bad checksum) and ``plaintext`` (the payload after
decryption and decompression, when the decoder had what it needed).
"""

from __future__ import annotations

import enum

import attrs

__all__ = [
    "FLAG_NAMES",
    "Flag",
    "PacketType",
    "PrudpPacket",
    "StreamType",
    "flag_names",
    "split_vport",
    "vport",
]


class PacketType(enum.IntEnum):
    """Logical packet types (NEX numbering, spec §1.2)."""

    SYN = 0
    CONNECT = 1
    DATA = 2
    DISCONNECT = 3
    PING = 4
    USER = 5
    ROUTE = 6
    RAW = 7


class Flag(enum.IntFlag):
    """Logical flag values of the 12-bit NEX flags field (spec §1.3)."""

    NONE = 0
    ACK = 0x001
    RELIABLE = 0x002
    NEED_ACK = 0x004
    HAS_SIZE = 0x008
    MULTI_ACK = 0x200


# Names in the order the capture decoder prints them.
FLAG_NAMES: tuple[tuple[Flag, str], ...] = (
    (Flag.ACK, "ACK"),
    (Flag.RELIABLE, "RELIABLE"),
    (Flag.NEED_ACK, "NEED_ACK"),
    (Flag.HAS_SIZE, "HAS_SIZE"),
    (Flag.MULTI_ACK, "MULTI_ACK"),
)


def flag_names(flags: int) -> list[str]:
    """The names of the known flags set in *flags*, in a fixed order."""
    return [name for flag, name in FLAG_NAMES if flags & flag]


class StreamType(enum.IntEnum):
    """The high nibble of a virtual port (spec §1.1)."""

    DO = 1
    RV = 2
    OLD_RV_SEC = 3
    SBMGMT = 4
    NAT = 5
    SESSION_DISCOVERY = 6
    NAT_ECHO = 7
    ROUTING = 8
    GAME = 9
    RV_SECURE = 10
    RELAY = 11


def vport(stream_type: int, port: int) -> int:
    """Pack a virtual port byte: stream type in the high nibble, port low (spec §1.1)."""
    if not (0 <= stream_type < 16 and 0 <= port < 16):
        raise ValueError(f"stream type {stream_type} / port {port} out of range 0..15")
    return (stream_type << 4) | port


def split_vport(value: int) -> tuple[int, int]:
    """``(stream_type, port)`` of a virtual port byte."""
    return value >> 4, value & 0x0F


def _hex(b: bytes | None) -> str:
    return "None" if b is None else b.hex()


@attrs.frozen
class PrudpPacket:
    """One PRUDP packet.

    Attributes:
        source: source virtual port byte, ``(stream_type << 4) | port``.
        destination: destination virtual port byte.
        type: logical packet type.
        flags: logical flags (:class:`Flag` values; unknown bits are kept).
        session_id: the sender's session id (spec §1.5).
        signature: the packet signature, 4 bytes (v0 family) or 16 (v1).
        sequence_id: u16 sequence id.
        connection_signature: SYN/CONNECT only; 4 bytes (v0 family) or 16 (v1,
            option 1).  ``None`` on other packets.
        fragment_id: DATA only (u8, or u32 in the Rendez-Vous variant; v1 option 2).
        substream_id: v1 only.
        payload: the payload as on the wire.
        supported_functions, initial_unreliable_id, max_substream, lite_signature:
            v1 options 0, 3, 4 and 0x80 (``None`` when absent).
        option_order: v1 only: option ids in wire order, for byte-exact re-encoding.
        checksum_ok: set by decoders asked not to raise on a bad checksum.
        plaintext: payload after decryption/decompression, when a decoder could.
    """

    source: int
    destination: int
    type: PacketType
    flags: Flag = Flag.NONE
    session_id: int = 0
    signature: bytes = attrs.field(default=b"\x00\x00\x00\x00", repr=_hex)
    sequence_id: int = 0
    connection_signature: bytes | None = attrs.field(default=None, repr=_hex)
    fragment_id: int | None = None
    substream_id: int = 0
    payload: bytes = attrs.field(default=b"", repr=_hex)
    supported_functions: int | None = None
    initial_unreliable_id: int | None = None
    max_substream: int | None = None
    lite_signature: bytes | None = attrs.field(default=None, repr=_hex)
    option_order: tuple[int, ...] | None = None
    checksum_ok: bool | None = attrs.field(default=None, eq=False, repr=False)
    plaintext: bytes | None = attrs.field(default=None, eq=False, repr=False)

    # -- convenience views ----------------------------------------------------
    @property
    def type_name(self) -> str:
        return self.type.name

    @property
    def flag_names(self) -> list[str]:
        return flag_names(self.flags)

    def has(self, flag: Flag) -> bool:
        return bool(self.flags & flag)

    @property
    def source_stream_type(self) -> int:
        return self.source >> 4

    @property
    def source_port(self) -> int:
        return self.source & 0x0F

    @property
    def destination_stream_type(self) -> int:
        return self.destination >> 4

    @property
    def destination_port(self) -> int:
        return self.destination & 0x0F
