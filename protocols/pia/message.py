"""Pia messages M-A ... M-G: the bundle inside a packet's (decrypted) body.

Theory of operation
-------------------
A packet body is a run of messages; their number follows from the length
(spec ../shared/spec/pia.md §1, §2.1).  Each message is a small header and a
payload.  The header layout depends on the version:

* M-A (<= 5.4), M-B (5.6-5.10), M-C (5.11-5.12), M-D (5.14-5.17) have fixed
  headers, decoded with one precompiled :class:`struct.Struct` each.  M-C and
  M-D carry a message version byte that must be 1 and 2 (§2.1).
* M-E (5.18-5.26), M-F (5.27-6.30), M-G (6.32+) are delta encoded: a presence
  mask says which fields follow; an absent field keeps the value it had in the
  previous message of the same packet (§2.2).  The first message starts from
  all-zero fields (NintendoClients-2020's choice; §2.2, §10.3).  Mask 0x00
  therefore means "everything inherited" (confirmed on real traffic, §11) and
  bits without a field (0x20-0x80, and 0x10 in M-F) are accepted and ignored.
  The decoded mask is kept in :attr:`Message.presence` so that re-encoding is
  byte exact.  When ``presence`` is None the encoder chooses: every field for
  the first message of a packet (the safe sender policy of §2.2), only the
  changed fields for later ones.

Messages are zero-padded to 4 bytes up to 5.45 (``profile.align_messages``)
and packed back to back from 6.x (§2.4, §11).  Decoding stops at an all-0xFF
tail, the padding added before encryption (§2.4).  Payloads stay as on the
wire; :func:`inflate_payload` undoes the zlib compression flagged per version
(§2.3, §2.8).

Every read is bounds-checked against the precomputed header size before its
``unpack_from``, so any input yields messages or a
:class:`~protocols.errors.DecodeError`.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable

import attrs

from protocols.errors import BadValue, DecodeError, EncodeError, ShortData, UnsupportedVersion
from protocols.pia.versions import MessageFormat, VersionProfile

__all__ = [
    "MAX_INFLATED_SIZE",
    "Message",
    "decode_messages",
    "deflate_payload",
    "encode_messages",
    "full_presence",
    "inflate_payload",
    "lone_message_decoder",
    "lone_delta_layout",
    "lone_message_encoder",
]

# M-A: flags u8, source station index u8, payload size u16, destination u32,
# source constant id u32, protocol type u16, protocol port u16, reserved u32.
_M_A = struct.Struct(">BBHIIHHI")
# M-B: flags u8, payload size u16, destination u64, source constant id u64,
# protocol type u8, protocol port u8, three zero bytes (read as u8 + u16).
_M_B = struct.Struct(">BHQQBBBH")
# M-C: flags u8, message version u8 (1), payload size u16, protocol type u8,
# protocol port u8, destination u64, source constant id u64.
_M_C = struct.Struct(">BBHBBQQ")
# M-D: flags u8, message version u8 (2), payload size u16,
# protocol type u8 << 24 | protocol port u24 (one u32), destination u64, source constant id u64.
_M_D = struct.Struct(">BBHIQQ")
_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")

# Formats by identity (Enum.__hash__ is a Python-level call: no dict lookups per packet).
_MA, _MB, _MC, _MD = MessageFormat.A, MessageFormat.B, MessageFormat.C, MessageFormat.D
_ME, _MF, _MG = MessageFormat.E, MessageFormat.F, MessageFormat.G

# Delta header sizes (mask byte included) per low-5-bit mask value (§2.1).
# M-E/M-F: flags 1 (0x01), size 2 (0x02), type+port 4 (0x04), destination 8
# (0x08), source constant id 8 (0x10, M-E only).  M-G: flags 1, size 2, type 1,
# port 1, protocol-specific byte 1.
_WIDTHS = {
    MessageFormat.E: (1, 2, 4, 8, 8),
    MessageFormat.F: (1, 2, 4, 8, 0),
    MessageFormat.G: (1, 2, 1, 1, 1),
}
_DELTA_SIZES = {
    fmt: tuple(1 + sum(w for i, w in enumerate(ws) if m >> i & 1) for m in range(32)) for fmt, ws in _WIDTHS.items()
}
_SIZES_E, _SIZES_F, _SIZES_G = _DELTA_SIZES[_ME], _DELTA_SIZES[_MF], _DELTA_SIZES[_MG]
#: Mask with every field of a delta format present.
_FULL = {MessageFormat.E: 0x1F, MessageFormat.F: 0x0F, MessageFormat.G: 0x1F}
# Every field at once, the common first message: mask, flags, size, type<<24|port, destination[, source id].
_FULL_E = struct.Struct(">BBHIQQ")
_FULL_F = struct.Struct(">BBHIQ")
# M-G: mask, flags, size, type, port, protocol-specific byte.
_FULL_G = struct.Struct(">BBHBBB")

#: Upper bound for an inflated payload (a compressed payload cannot make us
#: allocate more; real ones fit a 1472-byte datagram many times over).
MAX_INFLATED_SIZE = 1 << 20

_FF = 0xFF
_ZEROS = (b"", b"\x00", b"\x00\x00", b"\x00\x00\x00")


@attrs.frozen
class Message:
    """One Pia message; fields a format lacks keep their defaults.

    ``payload`` is the wire payload (still compressed when the version's zlib
    flag is set).  ``presence`` is the delta mask (M-E..M-G) as decoded, or None
    to let the encoder choose.  ``reserved`` keeps M-A's reserved u32 and M-B's
    three zero bytes; ``extra`` is M-G's protocol-specific byte.
    """

    protocol_type: int
    protocol_port: int
    payload: bytes = attrs.field(repr=bytes.hex)
    flags: int = 0
    destination: int = 0
    source_constant_id: int | None = None
    source_station_index: int | None = None
    reserved: int = 0
    extra: int = 0
    presence: int | None = None


def full_presence(profile: VersionProfile) -> int | None:
    """The presence mask with every field of the profile's delta format (None if not delta)."""
    return _FULL.get(profile.message_format)


# -- decode -----------------------------------------------------------------


def _ff_tail(data: bytes, pos: int, end: int) -> bool:
    return data[pos] == _FF and data.count(_FF, pos, end) == end - pos


def decode_messages(plaintext: bytes, profile: VersionProfile) -> tuple[Message, ...]:
    """Decode every message of a packet body (decrypted, footer removed).

    Raises:
        ShortData: a header or payload runs past the end.
        UnsupportedVersion: an M-C/M-D message version byte other than 1/2.
    """
    data = plaintext if type(plaintext) is bytes else bytes(plaintext)
    fmt = profile.message_format
    if fmt is _ME or fmt is _MF or fmt is _MG:
        return _decode_delta(data, fmt, profile.align_messages)
    return _decode_fixed(data, fmt, profile.align_messages)


def _decode_fixed(data: bytes, fmt: MessageFormat, align: bool) -> tuple[Message, ...]:
    end = len(data)
    pos = 0
    out = []
    while pos < end:
        if _ff_tail(data, pos, end):
            break
        msg, pos = _decode_fixed_one(data, pos, fmt)
        out.append(msg)
        if align:
            # §2.4: zero padding to 4 bytes; tolerate a truncated pad at the very end.
            pos = min(pos + (-pos & 3), end)
    return tuple(out)


def _decode_fixed_one(data: bytes, pos: int, fmt: MessageFormat) -> tuple[Message, int]:
    """The fixed-layout (M-A..M-D) message at *pos* and the offset after its payload.

    Raises:
        ShortData, UnsupportedVersion.
    """
    st = _M_A if fmt is _MA else _M_B if fmt is _MB else _M_C if fmt is _MC else _M_D
    hsize = st.size
    end = len(data)
    if pos + hsize > end:
        raise ShortData(f"{fmt.value} message header at offset {pos}: needs {hsize} bytes, {end - pos} left")
    v = st.unpack_from(data, pos)
    station: int | None = None
    reserved = 0
    if fmt is MessageFormat.A:
        flags, station, size, dest, src, ptype, port, reserved = v
    elif fmt is MessageFormat.B:
        flags, size, dest, src, ptype, port, r_hi, r_lo = v
        reserved = r_hi << 16 | r_lo
    else:
        if fmt is MessageFormat.C:
            flags, mver, size, ptype, port, dest, src = v
            want = 1
        else:
            flags, mver, size, tp, dest, src = v
            ptype, port = tp >> 24, tp & 0xFFFFFF
            want = 2
        if mver != want:
            raise UnsupportedVersion(f"{fmt.value} message version {mver} at offset {pos} (expected {want})")
    body = pos + hsize
    if body + size > end:
        raise ShortData(f"{fmt.value} payload at offset {body}: needs {size} bytes, {end - body} left")
    return Message(ptype, port, data[body : body + size], flags, dest, src, station, reserved), body + size


def _decode_delta(data: bytes, fmt: MessageFormat, align: bool) -> tuple[Message, ...]:
    sizes = _SIZES_E if fmt is _ME else _SIZES_F if fmt is _MF else _SIZES_G
    end = len(data)
    pos = 0
    out = []
    # §2.2: initial state of the first message is all zero (NC-2020).
    flags = size = ptype = port = dest = src = extra = 0
    is_e = fmt is _ME
    is_g = fmt is _MG
    # Mask value taking the one-unpack fast path (-1: none for M-G, whose fields are single bytes).
    fast = 0x1F if is_e else 0x0F if fmt is _MF else -1
    while pos < end:
        mask = data[pos]
        if mask == _FF and _ff_tail(data, pos, end):
            break
        hsize = sizes[mask & 0x1F]
        if pos + hsize > end:
            raise ShortData(f"{fmt.value} message header at offset {pos}: needs {hsize} bytes, {end - pos} left")
        if mask == fast:
            # Every field present (the usual first message): one unpack.
            if is_e:
                _, flags, size, tp, dest, src = _FULL_E.unpack_from(data, pos)
            else:
                _, flags, size, tp, dest = _FULL_F.unpack_from(data, pos)
            ptype, port = tp >> 24, tp & 0xFFFFFF
            p = pos + hsize
        else:
            p = pos + 1
            if mask & 0x01:
                flags = data[p]
                p += 1
            if mask & 0x02:
                size = _U16.unpack_from(data, p)[0]
                p += 2
            if is_g:
                if mask & 0x04:
                    ptype = data[p]
                    p += 1
                if mask & 0x08:
                    port = data[p]
                    p += 1
                if mask & 0x10:
                    extra = data[p]
                    p += 1
            else:
                if mask & 0x04:
                    tp = _U32.unpack_from(data, p)[0]
                    ptype, port = tp >> 24, tp & 0xFFFFFF
                    p += 4
                if mask & 0x08:
                    dest = _U64.unpack_from(data, p)[0]
                    p += 8
                if is_e and mask & 0x10:
                    src = _U64.unpack_from(data, p)[0]
                    p += 8
        if p + size > end:
            raise ShortData(f"{fmt.value} payload at offset {p}: needs {size} bytes, {end - p} left")
        out.append(
            Message(
                ptype,
                port,
                data[p : p + size],
                flags,
                dest,
                src if is_e else None,
                None,
                0,
                extra,
                mask,
            )
        )
        pos = p + size
        if align:
            pos = min(pos + (-pos & 3), end)
    return tuple(out)


# -- encode -----------------------------------------------------------------


def encode_messages(messages: tuple[Message, ...] | list[Message], profile: VersionProfile) -> bytes:
    """Encode messages back to back, each padded to 4 bytes where the version aligns.

    No 0xFF padding is added; the packet codec pads before encrypting.

    Raises:
        EncodeError: a field does not fit the format, is set although the format
            lacks it, or contradicts an explicit presence mask.
    """
    fmt = profile.message_format
    align = profile.align_messages
    parts: list[bytes] = []
    try:
        if fmt is _ME or fmt is _MF or fmt is _MG:
            _encode_delta(messages, fmt, align, parts)
        else:
            for m in messages:
                head = _encode_fixed(m, fmt)
                parts.append(head)
                parts.append(m.payload)
                # §2.4: every message padded to 4, so the running offset stays aligned.
                if align:
                    pad = -(len(head) + len(m.payload)) & 3
                    if pad:
                        parts.append(_ZEROS[pad])
        return b"".join(parts)
    except EncodeError:
        raise
    except (struct.error, ValueError, OverflowError) as e:
        # struct.error from pack, ValueError from bytearray.append of a value > 255.
        raise EncodeError(f"{fmt.value} message field out of range: {e}") from None


def _encode_fixed(m: Message, fmt: MessageFormat) -> bytes:
    n = len(m.payload)
    if n > 0xFFFF:
        raise EncodeError(f"payload of {n} bytes does not fit a u16 size")
    if m.presence is not None or m.extra:
        raise EncodeError(f"{fmt.value} messages have no presence mask or protocol-specific byte")
    src = m.source_constant_id
    if src is None:
        raise EncodeError(f"{fmt.value} messages need a source_constant_id")
    if fmt is MessageFormat.A:
        if m.source_station_index is None:
            raise EncodeError("M-A messages need a source_station_index")
        return _M_A.pack(
            m.flags, m.source_station_index, n, m.destination, src, m.protocol_type, m.protocol_port, m.reserved
        )
    if m.source_station_index is not None:
        raise EncodeError(f"{fmt.value} messages carry no source station index")
    if fmt is MessageFormat.B:
        r = m.reserved
        if not 0 <= r <= 0xFFFFFF:
            raise EncodeError(f"M-B reserved field {r} does not fit 3 bytes")
        return _M_B.pack(m.flags, n, m.destination, src, m.protocol_type, m.protocol_port, r >> 16, r & 0xFFFF)
    if m.reserved:
        raise EncodeError(f"{fmt.value} messages have no reserved field")
    if fmt is MessageFormat.C:
        return _M_C.pack(m.flags, 1, n, m.protocol_type, m.protocol_port, m.destination, src)
    return _M_D.pack(m.flags, 2, n, _type_port(m), m.destination, src)


def _type_port(m: Message) -> int:
    if not (0 <= m.protocol_type <= 0xFF and 0 <= m.protocol_port <= 0xFFFFFF):
        raise EncodeError(f"protocol type {m.protocol_type} / port {m.protocol_port} do not fit u8 / u24")
    return m.protocol_type << 24 | m.protocol_port


def _encode_delta(
    messages: tuple[Message, ...] | list[Message], fmt: MessageFormat, align: bool, parts: list[bytes]
) -> None:
    is_e = fmt is _ME
    is_g = fmt is _MG
    full = 0x0F if fmt is _MF else 0x1F
    # State the receiver reconstructs (§2.2): starts all zero.
    s_flags = s_size = s_type = s_port = s_dest = s_src = s_extra = 0
    first = True
    for m in messages:
        n = len(m.payload)
        if n > 0xFFFF:
            raise EncodeError(f"payload of {n} bytes does not fit a u16 size")
        if m.source_station_index is not None or m.reserved:
            raise EncodeError(f"{fmt.value} messages carry no source station index or reserved field")
        src = m.source_constant_id
        if is_e:
            if src is None:
                raise EncodeError("M-E messages need a source_constant_id")
        elif src is not None:
            raise EncodeError(f"{fmt.value} messages carry no source constant id")
        else:
            src = 0
        flags, ptype, port, dest, extra = m.flags, m.protocol_type, m.protocol_port, m.destination, m.extra
        if is_g:
            if dest:
                raise EncodeError("M-G messages carry no destination (addressing is in the header)")
        elif extra:
            raise EncodeError(f"{fmt.value} messages have no protocol-specific byte")
        mask = m.presence
        if mask is None:
            if first:
                # §2.2 safe sender policy: the first message of a packet carries every field.
                if is_g:
                    head = _FULL_G.pack(full, flags, n, ptype, port, extra)
                elif is_e:
                    head = _FULL_E.pack(full, flags, n, _type_port(m), dest, src)
                else:
                    head = _FULL_F.pack(full, flags, n, _type_port(m), dest)
                parts.append(head)
                parts.append(m.payload)
                if align:
                    pad = -(len(head) + n) & 3
                    if pad:
                        parts.append(_ZEROS[pad])
                s_flags, s_size, s_type, s_port, s_dest, s_src, s_extra = flags, n, ptype, port, dest, src, extra
                first = False
                continue
            # Later messages: only what changed.
            mask = (flags != s_flags) | (n != s_size) << 1
            if is_g:
                mask |= (ptype != s_type) << 2 | (port != s_port) << 3 | (extra != s_extra) << 4
            else:
                mask |= (ptype != s_type or port != s_port) << 2 | (dest != s_dest) << 3
                if is_e:
                    mask |= (src != s_src) << 4
        else:
            if not 0 <= mask <= 0xFF:
                raise EncodeError(f"presence mask {mask} does not fit a byte")
            # An explicit mask must not hide a change, or the receiver would
            # reconstruct something else.
            if not mask & 0x01 and flags != s_flags:
                raise EncodeError(f"flags {flags} differ from the inherited {s_flags} but mask {mask:#x} omits them")
            if not mask & 0x02 and n != s_size:
                raise EncodeError(f"payload size {n} differs from the inherited {s_size} but mask {mask:#x} omits it")
            if is_g:
                if (
                    (not mask & 0x04 and ptype != s_type)
                    or (not mask & 0x08 and port != s_port)
                    or (not mask & 0x10 and extra != s_extra)
                ):
                    raise EncodeError(f"M-G field differs from the inherited value but mask {mask:#x} omits it")
            else:
                if not mask & 0x04 and (ptype != s_type or port != s_port):
                    raise EncodeError(f"protocol {ptype}/{port} differs from the inherited one; mask {mask:#x}")
                if not mask & 0x08 and dest != s_dest:
                    raise EncodeError(f"destination differs from the inherited one but mask {mask:#x} omits it")
                if is_e and not mask & 0x10 and src != s_src:
                    raise EncodeError(f"source constant id differs from the inherited one; mask {mask:#x}")
        first = False
        out = bytearray((mask,))
        if mask & 0x01:
            out.append(flags)
        if mask & 0x02:
            out += _U16.pack(n)
        if is_g:
            if mask & 0x04:
                out.append(ptype)
            if mask & 0x08:
                out.append(port)
            if mask & 0x10:
                out.append(extra)
        else:
            if mask & 0x04:
                out += _U32.pack(_type_port(m))
            if mask & 0x08:
                out += _U64.pack(dest)
            if is_e and mask & 0x10:
                out += _U64.pack(src)
        s_flags, s_size, s_type, s_port, s_dest, s_src, s_extra = flags, n, ptype, port, dest, src, extra
        parts.append(bytes(out))
        parts.append(m.payload)
        if align:
            pad = -(len(out) + n) & 3
            if pad:
                parts.append(_ZEROS[pad])


# -- one message per packet: per-profile fast paths -------------------------
#
# Most packets carry a single message whose header has every field (the first
# message of a delta packet with presence None or the full mask, or any
# fixed-format message).  The packet codec's closures pack and unpack the
# delta formats inline (lone_delta_layout) and call these closures for the
# fixed formats.  The encoder returns None and the decoder returns None for anything
# else (several messages, a partial or stray mask, an invalid field), and the
# caller then runs encode_messages / decode_messages, which stay the reference
# and produce the same bytes, messages or errors.  Property tests compare both.

#: ``encode(message) -> (plaintext, ff_pad) | None``.
LoneEncoder = Callable[[Message], "tuple[bytes, int] | None"]
#: ``decode(plaintext) -> (message,) | None``.
LoneDecoder = Callable[[bytes], "tuple[Message, ...] | None"]


def _tails(hsize: int, align: bool) -> list[tuple[bytes, int]]:
    """Per payload length mod 16: the zero alignment pad plus the 0xFF pad to 16 bytes (§2.4), and the 0xFF count."""
    out = []
    for r in range(16):
        base = hsize + r
        zeros = -base & 3 if align else 0
        ff = -(base + zeros) & 15
        out.append((bytes(zeros) + b"\xff" * ff, ff))
    return out


def lone_delta_layout(profile: VersionProfile) -> tuple[struct.Struct, int, list[tuple[bytes, int]]] | None:
    """For a delta format (M-E..M-G): ``(struct, mask, tails)`` of a message with every field, else None.

    *struct* packs/unpacks the mask byte and every field in wire order (M-E:
    mask, flags, size, type << 24 | port, destination, source constant id;
    M-F: the same without the source id; M-G: mask, flags, size, type, port,
    protocol-specific byte); *mask* is the every-field presence mask; and
    ``tails[len(payload) & 15]`` is ``(zero alignment pad + 0xFF pad, ff count)``
    that makes a lone message a whole number of AES blocks (§2.4).  The packet
    codec's one-message closures use it inline, with the checks of
    :func:`lone_message_encoder` / :func:`lone_message_decoder`.
    """
    fmt = profile.message_format
    if fmt is _ME or fmt is _MF or fmt is _MG:
        st = _FULL_E if fmt is _ME else _FULL_F if fmt is _MF else _FULL_G
        return st, _FULL[fmt], _tails(st.size, profile.align_messages)
    return None


def lone_message_encoder(profile: VersionProfile) -> LoneEncoder | None:
    """Encoder for a packet body of exactly one fixed-format (M-A..M-D) message, 0xFF-padded to 16 bytes.

    ``encode(m)`` returns ``(body, ff)`` where *body* equals
    ``encode_messages((m,), profile)`` followed by *ff* bytes 0xFF, and ``ff``
    makes the length a multiple of 16 (the padding before encryption, §2.4);
    or None when *m* is not of the common shape (the caller falls back to
    :func:`encode_messages`, which also reports errors).  None instead of an
    encoder for the delta formats (M-E..M-G): see :func:`lone_delta_layout`.
    """
    fmt = profile.message_format
    if fmt is _ME or fmt is _MF or fmt is _MG:
        return None  # the packet codec packs a lone delta message inline (lone_delta_layout)
    align = profile.align_messages
    join = b"".join
    st = _M_A if fmt is _MA else _M_B if fmt is _MB else _M_C if fmt is _MC else _M_D
    tails = _tails(st.size, align)

    def enc_fixed(m: Message) -> tuple[bytes, int] | None:
        try:
            payload = m.payload
            tail, ff = tails[len(payload) & 15]
            return join((_encode_fixed(m, fmt), payload, tail)), ff
        except Exception:  # whatever it is, encode_messages reports it
            return None

    return enc_fixed


def lone_message_decoder(profile: VersionProfile) -> LoneDecoder | None:
    """Decoder for a packet body holding exactly one fixed-format (M-A..M-D) message.

    ``decode(body)`` returns ``(message,)``, equal to
    ``decode_messages(body, profile)``, when *body* is one such message
    followed by nothing but its alignment pad and a 0xFF tail; otherwise None
    (the caller falls back to :func:`decode_messages`).  *body* must be bytes.
    None instead of a decoder for the delta formats (M-E..M-G): see
    :func:`lone_delta_layout`.
    """
    fmt = profile.message_format
    if fmt is _ME or fmt is _MF or fmt is _MG:
        return None  # the packet codec unpacks a lone delta message inline (lone_delta_layout)
    align = profile.align_messages
    ff_byte = _FF

    # Fixed layouts: the first byte is the flags, so a body starting with 0xFF
    # (possibly all padding) is left to the general decoder.
    def dec_fixed(data: bytes) -> tuple[Message, ...] | None:
        end = len(data)
        if not end or data[0] == ff_byte:
            return None
        try:
            m, pos = _decode_fixed_one(data, 0, fmt)
        except DecodeError:
            return None  # decode_messages reports it
        if align:
            pos += -pos & 3
        if pos >= end or (data[pos] == ff_byte and data.count(ff_byte, pos) == end - pos):
            return (m,)
        return None

    return dec_fixed


# -- compression ------------------------------------------------------------


def inflate_payload(message: Message, profile: VersionProfile, *, max_size: int = MAX_INFLATED_SIZE) -> bytes:
    """Return the message payload, inflated if the version's zlib flag is set (§2.3, §2.8).

    Raises:
        BadValue: the payload is not a complete zlib stream, has trailing bytes,
            or inflates beyond *max_size*.
    """
    zflag = profile.zlib_flag
    if zflag is None or not message.flags & zflag:
        return message.payload
    d = zlib.decompressobj()
    try:
        out = d.decompress(message.payload, max_size)
    except zlib.error as e:
        raise BadValue(f"zlib-flagged payload does not inflate: {e}") from None
    if d.unconsumed_tail:
        raise BadValue(f"zlib-flagged payload inflates beyond {max_size} bytes")
    if not d.eof:
        raise BadValue("zlib-flagged payload is truncated")
    if d.unused_data:
        raise BadValue(f"{len(d.unused_data)} bytes after the zlib stream")
    return out


def deflate_payload(payload: bytes, level: int = 6) -> bytes:
    """Compress a payload for a message whose zlib flag will be set."""
    return zlib.compress(payload, level)
