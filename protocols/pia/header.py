"""Pia packet headers H-A ... H-G: decode, encode and format sniffing.

Theory of operation
-------------------
Every Pia datagram starts with the magic ``32 AB 98 64`` and a fixed-size,
never-encrypted header whose layout depends on the library version
(spec ../shared/spec/pia.md §1.1, fingerprint in §0.3).  The
:class:`~protocols.pia.versions.VersionProfile` names the layout; this module
maps each layout to one precompiled :class:`struct.Struct`, so decoding a
header is one length check plus one ``unpack_from`` and encoding is one
``pack`` (the node runs every datagram through here).

* H-A (<= 5.6) has no tag in the header: the 16-byte HMAC-MD5 trailer sits at
  the *end* of the datagram.  :func:`decode_header` still reports it in
  ``PacketHeader.tag`` so that a header alone says everything needed to verify
  the packet; :func:`encode_header` writes only the 12 header bytes and the
  packet codec appends the trailer (§1.1, §3.1).
* H-A/H-B byte 4 is an encryption flag (1 plain, 2 encrypted); from H-C on it
  is ``encrypted << 7 | header_version`` (§1.2).  Decoding accepts every header
  version that shares the profile's layout (3 and 4 for H-C, 11-13 for H-F,
  15-16 for H-G) because NintendoClients-2020 sent 4 for all of 5.11+ (§10.1.1);
  encoding writes ``header.version`` or, when it is None, the profile's.
* Fields a layout does not carry keep their defaults (0 / None / b""); asking
  :func:`encode_header` to write one is an :class:`EncodeError`.

:func:`sniff_header_format` guesses the layout of a datagram whose version is
unknown (a capture decoder): from byte 4, with the length rule separating the
two 1/2 layouts.
"""

from __future__ import annotations

import struct
from collections.abc import Callable

import attrs

from protocols.errors import BadMagic, BadValue, EncodeError, ShortData, UnsupportedVersion
from protocols.pia.versions import HeaderFormat, VersionProfile

__all__ = [
    "HEADER_SIZES",
    "HEADER_VERSIONS",
    "HMAC_TRAILER_SIZE",
    "MAGIC",
    "PacketHeader",
    "decode_header",
    "encode_header",
    "header_decoder",
    "header_format_for_version",
    "header_layout",
    "sniff_header_format",
]

MAGIC = b"\x32\xab\x98\x64"
_MAGIC_INT = 0x32AB9864
#: H-A's HMAC-MD5 trailer at the end of the datagram (§3.1).
HMAC_TRAILER_SIZE = 16

# H-A: magic u32, encryption u8 (1/2), connection id u8, packet id u16,
# source timer u16, destination timer u16 (§1.1).
_H_A = struct.Struct(">IBBHHH")
# H-B: H-A then the 8-byte header nonce and the 16-byte GCM tag.
_H_B = struct.Struct(">IBBHHH8s16s")
# H-C: magic, enc|version u8, connection id u8, packet id u16, nonce 8, tag 16.
_H_C = struct.Struct(">IBBH8s16s")
# H-D: as H-C with the tag truncated to 8 bytes.
_H_D = struct.Struct(">IBBH8s8s")
# H-E: magic, enc|version, dst var id u32, src var id u32, packet id u16,
# footer size u8, nonce 8, tag 8.
_H_E = struct.Struct(">IBIIHB8s8s")
# H-F: as H-E with u16 variable ids.
_H_F = struct.Struct(">IBHHHB8s8s")
# H-G: magic, enc|version, padding<<4|flags u8, dst u16, src u16, packet id u16,
# footer size u8, nonce 8, tag 8 (KW only).
_H_G = struct.Struct(">IBBHHHB8s8s")

_STRUCTS: dict[HeaderFormat, struct.Struct] = {
    HeaderFormat.A: _H_A,
    HeaderFormat.B: _H_B,
    HeaderFormat.C: _H_C,
    HeaderFormat.D: _H_D,
    HeaderFormat.E: _H_E,
    HeaderFormat.F: _H_F,
    HeaderFormat.G: _H_G,
}

#: Header size in bytes per layout (H-A excludes its 16-byte trailer).
HEADER_SIZES: dict[HeaderFormat, int] = {fmt: s.size for fmt, s in _STRUCTS.items()}

#: Header versions (low 7 bits of byte 4) per layout, from the §0.3 table.
HEADER_VERSIONS: dict[HeaderFormat, frozenset[int]] = {
    HeaderFormat.C: frozenset({3, 4}),
    HeaderFormat.D: frozenset({5}),
    HeaderFormat.E: frozenset({9}),
    HeaderFormat.F: frozenset({11, 12, 13}),
    HeaderFormat.G: frozenset({15, 16}),
}
_FORMAT_BY_VERSION: dict[int, HeaderFormat] = {v: f for f, vs in HEADER_VERSIONS.items() for v in vs}

# Layouts bound to module names for identity tests on the per-packet path.
_A, _B, _C, _D, _E, _F, _G = (
    HeaderFormat.A,
    HeaderFormat.B,
    HeaderFormat.C,
    HeaderFormat.D,
    HeaderFormat.E,
    HeaderFormat.F,
    HeaderFormat.G,
)
_NO_VERSIONS: frozenset[int] = frozenset()
_V_C, _V_D, _V_E, _V_F, _V_G = (HEADER_VERSIONS[f] for f in (_C, _D, _E, _F, _G))

_ZERO8 = bytes(8)


@attrs.frozen
class PacketHeader:
    """One Pia packet header; fields a layout lacks keep their defaults."""

    encrypted: bool
    packet_id: int
    connection_id: int = 0  # H-A..H-D (0 where absent)
    version: int | None = None  # low 7 bits of byte 4 for H-C..H-G; None for H-A/H-B
    source_timer: int | None = None  # H-A/H-B
    destination_timer: int | None = None  # H-A/H-B
    destination_variable_id: int | None = None  # H-E..H-G
    source_variable_id: int | None = None  # H-E..H-G
    footer_size: int = 0  # H-E..H-G, in bytes
    padding_size: int = 0  # H-G high nibble
    packet_flags: int = 0  # H-G low nibble
    nonce: bytes = attrs.field(default=b"", repr=bytes.hex)  # 8-byte header nonce "HN" (H-B..H-G)
    tag: bytes = attrs.field(default=b"", repr=bytes.hex)  # GCM tag (16/8) or H-A's HMAC-MD5 trailer


def header_format_for_version(version: int) -> HeaderFormat | None:
    """The layout that carries header *version* (low 7 bits of byte 4), or None."""
    return _FORMAT_BY_VERSION.get(version)


def _layout(fmt: HeaderFormat) -> tuple[struct.Struct, frozenset[int]]:
    # Identity tests: Enum.__hash__ is a Python-level call, too slow per packet.
    if fmt is _A:
        return _H_A, _NO_VERSIONS
    if fmt is _B:
        return _H_B, _NO_VERSIONS
    if fmt is _C:
        return _H_C, _V_C
    if fmt is _D:
        return _H_D, _V_D
    if fmt is _E:
        return _H_E, _V_E
    if fmt is _F:
        return _H_F, _V_F
    return _H_G, _V_G


def header_layout(fmt: HeaderFormat) -> tuple[struct.Struct, frozenset[int], int]:
    """``(struct, header versions, magic as u32)`` of a layout, for per-profile closures that pack inline.

    The struct's fields are in wire order (see the layout comments above); the
    versions set is empty for H-A/H-B, whose byte 4 is the 1/2 encryption flag.
    """
    st, versions = _layout(fmt)
    return st, versions, _MAGIC_INT


def decode_header(data: bytes, profile: VersionProfile) -> tuple[PacketHeader, int]:
    """Decode the header at the start of a datagram.

    Args:
        data: the whole UDP payload.
        profile: the version whose header layout to apply.

    Returns:
        ``(header, offset)`` where *offset* is the first byte after the header.
        For H-A the messages end 16 bytes before the end of *data* (the HMAC
        trailer, returned in ``header.tag``).

    Raises:
        ShortData, BadMagic, BadValue, UnsupportedVersion.
    """
    fmt = profile.header_format
    st, versions = _layout(fmt)
    size = st.size
    n = len(data)
    if n < size:
        raise ShortData(f"Pia {fmt.value} header: needs {size} bytes, got {n}")
    v = st.unpack_from(data)
    if v[0] != _MAGIC_INT:
        raise BadMagic(f"not a Pia packet: starts {bytes(data[:4]).hex()}, expected 32ab9864")
    b4 = v[1]
    # Positional construction below follows PacketHeader's field order:
    # encrypted, packet_id, connection_id, version, source_timer, destination_timer,
    # destination_variable_id, source_variable_id, footer_size, padding_size,
    # packet_flags, nonce, tag.
    if fmt is _A or fmt is _B:
        # §1.2: byte 4 is 1 (plain) or 2 (encrypted) up to 5.10.
        if b4 != 1 and b4 != 2:
            raise BadValue(f"Pia {fmt.value} encryption byte {b4} (expected 1 or 2)")
        if fmt is _A:
            if n < size + HMAC_TRAILER_SIZE:
                raise ShortData(f"Pia H-A packet of {n} bytes has no room for its 16-byte HMAC trailer")
            tag = bytes(data[n - HMAC_TRAILER_SIZE :])
            return PacketHeader(b4 == 2, v[3], v[2], None, v[4], v[5], None, None, 0, 0, 0, b"", tag), size
        return PacketHeader(b4 == 2, v[3], v[2], None, v[4], v[5], None, None, 0, 0, 0, v[6], v[7]), size
    version = b4 & 0x7F
    if version not in versions:
        raise UnsupportedVersion(
            f"Pia header version {version} is not a {fmt.value} version (profile {profile.name} expects"
            f" {profile.header_version})"
        )
    enc = b4 >= 0x80
    if fmt is _C or fmt is _D:
        return PacketHeader(enc, v[3], v[2], version, None, None, None, None, 0, 0, 0, v[4], v[5]), size
    if fmt is _G:
        pf = v[2]
        return PacketHeader(enc, v[5], 0, version, None, None, v[3], v[4], v[6], pf >> 4, pf & 0x0F, v[7], v[8]), size
    # H-E / H-F
    return PacketHeader(enc, v[4], 0, version, None, None, v[2], v[3], v[5], 0, 0, v[6], v[7]), size


def _fixed(value: bytes, size: int, what: str) -> bytes:
    if not value:
        return _ZERO8 if size == 8 else bytes(size)
    if len(value) != size:
        raise EncodeError(f"{what} must be {size} bytes, got {len(value)}")
    return value


def encode_header(
    header: PacketHeader,
    profile: VersionProfile,
    *,
    tag: bytes | None = None,
    footer_size: int | None = None,
    padding_size: int | None = None,
) -> bytes:
    """Encode *header* in the profile's layout (for H-A: the 12 bytes without trailer).

    An empty ``nonce``/``tag`` is written as zeros.  The keyword arguments
    replace the header's own ``tag``, ``footer_size`` and ``padding_size``
    without building a new header (the packet codec knows them only after
    encrypting).

    Raises:
        EncodeError: a field does not fit, or is set although the layout lacks it.
    """
    fmt = profile.header_format
    h = header
    if tag is None:
        tag = h.tag
    if footer_size is None:
        footer_size = h.footer_size
    if padding_size is None:
        padding_size = h.padding_size
    st, versions = _layout(fmt)
    try:
        if fmt is _A or fmt is _B:
            if h.version is not None or h.destination_variable_id is not None or h.source_variable_id is not None:
                raise EncodeError(f"Pia {fmt.value} headers carry no version or variable ids")
            if footer_size or padding_size or h.packet_flags:
                raise EncodeError(f"Pia {fmt.value} headers carry no footer, padding or packet flags")
            b4 = 2 if h.encrypted else 1
            if fmt is _A:
                if h.nonce:
                    raise EncodeError("Pia H-A headers carry no nonce")
                return _H_A.pack(
                    _MAGIC_INT, b4, h.connection_id, h.packet_id, h.source_timer or 0, h.destination_timer or 0
                )
            return _H_B.pack(
                _MAGIC_INT,
                b4,
                h.connection_id,
                h.packet_id,
                h.source_timer or 0,
                h.destination_timer or 0,
                _fixed(h.nonce, 8, "nonce"),
                _fixed(tag, 16, "tag"),
            )
        version = h.version
        if version is None:
            version = profile.header_version
        elif version not in versions:
            raise EncodeError(f"header version {version} is not a {fmt.value} version")
        if h.source_timer is not None or h.destination_timer is not None:
            raise EncodeError(f"Pia {fmt.value} headers carry no timers")
        b4 = version | 0x80 if h.encrypted else version
        nonce = h.nonce
        if len(nonce) != 8:
            nonce = _fixed(nonce, 8, "nonce")
        if fmt is _C or fmt is _D:
            if h.destination_variable_id is not None or h.source_variable_id is not None:
                raise EncodeError(f"Pia {fmt.value} headers carry no variable ids")
            if footer_size or padding_size or h.packet_flags:
                raise EncodeError(f"Pia {fmt.value} headers carry no footer, padding or packet flags")
            tag = _fixed(tag, 16 if fmt is _C else 8, "tag")
            return st.pack(_MAGIC_INT, b4, h.connection_id, h.packet_id, nonce, tag)
        if h.connection_id:
            raise EncodeError(f"Pia {fmt.value} headers carry no connection id (use variable ids)")
        dst = h.destination_variable_id or 0
        src = h.source_variable_id or 0
        if len(tag) != 8:
            tag = _fixed(tag, 8, "tag")
        if fmt is _G:
            if not (0 <= padding_size <= 15 and 0 <= h.packet_flags <= 15):
                raise EncodeError("H-G padding size and packet flags are 4-bit fields")
            pf = padding_size << 4 | h.packet_flags
            return _H_G.pack(_MAGIC_INT, b4, pf, dst, src, h.packet_id, footer_size, nonce, tag)
        if padding_size or h.packet_flags:
            raise EncodeError(f"Pia {fmt.value} headers carry no padding size or packet flags")
        return st.pack(_MAGIC_INT, b4, dst, src, h.packet_id, footer_size, nonce, tag)
    except struct.error as e:
        raise EncodeError(f"Pia {fmt.value} header field out of range: {e}") from None


# -- per-profile fast paths --------------------------------------------------
#
# header_decoder returns a closure for one profile's layout that handles the
# well-formed case with one unpack and hands everything else (errors included)
# to decode_header, which stays the reference; a property test checks both give
# the same result or the same error class.  Without a GCM key (the AES-ECB era,
# or no key) the codec decodes headers with it; the per-packet closures of
# protocols/pia/packet_fast.py pack and unpack inline with header_layout().


def header_decoder(profile: VersionProfile) -> Callable[[bytes], PacketHeader]:
    """``decode(data) -> header`` equal to ``decode_header(data, profile)[0]``.

    The header ends at ``HEADER_SIZES[profile.header_format]``.  *data* must be
    ``bytes`` (the H-A trailer is sliced from it).
    """
    fmt = profile.header_format
    st, versions = _layout(fmt)
    unpack = st.unpack_from
    size = st.size
    magic = _MAGIC_INT
    ph = PacketHeader

    def slow(data: bytes) -> PacketHeader:
        return decode_header(data, profile)[0]

    # Positional PacketHeader arguments: encrypted, packet_id, connection_id,
    # version, source_timer, destination_timer, destination_variable_id,
    # source_variable_id, footer_size, padding_size, packet_flags, nonce, tag.
    if fmt is _A:
        trailer = size + HMAC_TRAILER_SIZE

        def dec_a(data: bytes) -> PacketHeader:
            n = len(data)
            if n >= trailer:
                m, b4, cid, pid, st_, dt = unpack(data)
                if m == magic and (b4 == 1 or b4 == 2):
                    return ph(b4 == 2, pid, cid, None, st_, dt, None, None, 0, 0, 0, b"", data[n - HMAC_TRAILER_SIZE :])
            return slow(data)

        return dec_a
    if fmt is _B:

        def dec_b(data: bytes) -> PacketHeader:
            if len(data) >= size:
                m, b4, cid, pid, st_, dt, hn, tag = unpack(data)
                if m == magic and (b4 == 1 or b4 == 2):
                    return ph(b4 == 2, pid, cid, None, st_, dt, None, None, 0, 0, 0, hn, tag)
            return slow(data)

        return dec_b
    if fmt is _C or fmt is _D:

        def dec_cd(data: bytes) -> PacketHeader:
            if len(data) >= size:
                m, b4, cid, pid, hn, tag = unpack(data)
                v = b4 & 0x7F
                if m == magic and v in versions:
                    return ph(b4 >= 0x80, pid, cid, v, None, None, None, None, 0, 0, 0, hn, tag)
            return slow(data)

        return dec_cd
    if fmt is _G:

        def dec_g(data: bytes) -> PacketHeader:
            if len(data) >= size:
                m, b4, pf, dst, src, pid, fs, hn, tag = unpack(data)
                v = b4 & 0x7F
                if m == magic and v in versions:
                    return ph(b4 >= 0x80, pid, 0, v, None, None, dst, src, fs, pf >> 4, pf & 0x0F, hn, tag)
            return slow(data)

        return dec_g

    def dec_ef(data: bytes) -> PacketHeader:
        if len(data) >= size:
            m, b4, dst, src, pid, fs, hn, tag = unpack(data)
            v = b4 & 0x7F
            if m == magic and v in versions:
                return ph(b4 >= 0x80, pid, 0, v, None, None, dst, src, fs, 0, 0, hn, tag)
        return slow(data)

    return dec_ef


# -- sniffing ---------------------------------------------------------------

# M-A (<= 5.4) and M-B (5.6-5.10) message header sizes and the offset of their
# u16 payload size (§2.1), used to walk plain H-A/H-B packets.
_WALKS = ((20, 2), (24, 1))


def _walks(data: bytes, start: int, end: int) -> bool:
    """Whether fixed-header messages, each padded to 4 bytes, tile data[start:end] exactly.

    *end* may lie past the bytes a capture kept (its snap length): the messages then fit as far as they were kept.
    """
    for hsize, off in _WALKS:
        pos = start
        while pos + hsize <= end:
            if pos + off + 2 > len(data):
                return True
            pos += hsize + int.from_bytes(data[pos + off : pos + off + 2], "big")
            if pos == end:
                return True
            pos += -(pos - start) % 4
            if pos == end:
                return True
    return False


def sniff_header_format(data: bytes, size: int | None = None) -> HeaderFormat | None:
    """Guess the header layout of a datagram of unknown Pia version.

    Byte 4 decides: ``0x80 | v`` or ``v`` with a known header version ``v``
    maps through :data:`HEADER_VERSIONS`; 1/2 means H-A or H-B.  Those two are
    told apart by length: an encrypted H-A packet is ``12 + 16k + 16`` bytes and
    an encrypted H-B packet ``36 + 16k``; a plain packet is H-A when its
    messages end exactly 16 bytes before the end (the HMAC trailer), H-B when
    they end at the end.  Returns None for anything else (not Pia, or a layout
    the length rule rejects).  *size* is the datagram's length when *data* is only the part a capture kept (its
    snap length): the rule is on the datagram's length.
    """
    if len(data) < 5 or bytes(data[:4]) != MAGIC:
        return None
    b4 = data[4]
    n = len(data) if size is None else size
    if b4 == 2:
        if n >= 12 + 16 + 16 and (n - 12 - 16) % 16 == 0:
            return HeaderFormat.A
        if n >= 36 + 16 and (n - 36) % 16 == 0:
            return HeaderFormat.B
        return None
    if b4 == 1:
        if n >= 12 + 16 and _walks(data, 12, n - 16):
            return HeaderFormat.A
        if n >= 36 and _walks(data, 36, n):
            return HeaderFormat.B
        return None
    fmt = _FORMAT_BY_VERSION.get(b4 & 0x7F)
    if fmt is None or n < HEADER_SIZES[fmt]:
        return None
    return fmt
