"""Whole Pia datagrams: header + (encrypted) messages + footer / HMAC trailer.

Theory of operation
-------------------
A :class:`PacketCodec` is built once per session key and turns
:class:`Packet` values into datagrams and back (spec ../shared/spec/pia.md
§1, §2.4, §3.1).  Layout per era:

* <= 5.6 (H-A): ``header(12) ‖ body ‖ HMAC-MD5(16)``.  When encrypted the body
  is AES-128-ECB over the messages 0xFF-padded to 16 bytes; the HMAC covers
  header + body and is keyed with ``hmac_key`` or else the session key.  The
  trailer is present on plain packets too (both real ≤ 5.6 fixtures carry it).
* 5.7-5.26 (H-B..H-D): ``header ‖ GCM(messages ‖ 0xFF pad to 16)`` with the
  16- or 8-byte tag in the header.
* 5.27-6.30 (H-E, H-F): as above, then the footer in plaintext after the
  ciphertext (§1.6, confirmed in §11).
* 6.32+ (H-G): the footer is encrypted with the messages.  The layout inside
  the plaintext is undocumented; we write ``messages ‖ footer ‖ 0xFF pad`` and
  put the pad length in the header's padding nibble (our choice, see §10.3).

GCM uses the 12-byte nonce from ``nonce_builder(header, source)`` and no
associated data (§3.1, §11).  Plain packets are never 0xFF-padded (the nDPI
plain packets end right after their messages).  The footer is a list of u16
receiver variable ids; ``footer_size`` counts bytes (§1.6).

The header nonce ``HN`` is the caller's: the node owns the 8-byte counter and
puts it in ``packet.header.nonce``; :meth:`PacketCodec.encode` fills in the
tag, ``footer_size`` and ``padding_size``.

Fast path: with a GCM key the codec builds one closure per direction at
construction (``_fast_encoder`` / ``_fast_decoder``) for the node's common
shape, an encrypted packet of one complete-header message and no footer.
Each runs in a single Python frame with the profile's constants in closure
cells: the message struct and pad table of
:func:`~protocols.pia.message.lone_delta_layout`, the header struct of
:func:`~protocols.pia.header.header_layout`, the nonce rule as
:class:`~protocols.pia.nonce.NonceParts` (composed inline, no builder call),
the AEAD's ``seal_raw`` / ``open_raw``, and slot-by-slot constructors of the
frozen values (attrs' own ``__init__`` stores each field through a generic
``object.__setattr__``).  The steps and checks are the general code's, in its
order; anything else, and any doubt, goes to ``_encode_general`` /
``_decode_general``, the reference that the property tests in
tests/protocols/pia/test_codec_fast_path.py compare the closures with (same
bytes or values, same error classes, same ``last_nonce``).

:meth:`PacketCodec.decode` is the node's strict path (a bad or uncheckable tag
raises :class:`~protocols.errors.AuthenticationError`);
:meth:`PacketCodec.inspect` is the capture decoder's path: it never raises a
decode error and reports header, authentication result and messages or the
error per datagram.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import struct
from collections.abc import Callable
from typing import Any

import attrs

from protocols.crypto.aead import GCM_MISMATCH, gcm, open_raw
from protocols.errors import AuthenticationError, BadValue, ConfigError, DecodeError, EncodeError, ShortData
from protocols.pia.header import (
    HEADER_SIZES,
    HMAC_TRAILER_SIZE,
    PacketHeader,
    decode_header,
    encode_header,
    header_decoder,
    header_layout,
)
from protocols.pia.message import (
    Message,
    decode_messages,
    encode_messages,
    lone_delta_layout,
    lone_message_decoder,
    lone_message_encoder,
)
from protocols.pia.nonce import nonce_parts
from protocols.pia.versions import Cipher, HeaderFormat, MessageFormat, VersionProfile

__all__ = ["NonceBuilder", "Packet", "PacketCodec", "PacketReport"]

#: ``builder(header, source_ip) -> 12-byte GCM nonce`` (protocols/pia/nonce.py).
NonceBuilder = Callable[[PacketHeader, str], bytes]

_FF16 = b"\xff" * 16
_BYTE = [bytes((i,)) for i in range(256)]
_FOOTER_STRUCTS = [struct.Struct(f">{n}H") for n in range(128)]


@attrs.frozen
class Packet:
    """A decoded datagram: its header, its messages and the footer's receiver variable ids."""

    header: PacketHeader
    messages: tuple[Message, ...]
    footer: tuple[int, ...] = ()


@attrs.frozen
class PacketReport:
    """What :meth:`PacketCodec.inspect` learned about one datagram.

    ``authenticated`` is True when the tag/HMAC verified, False when it did
    not, and None when it could not be checked (no key) or the packet carries
    none (a plain GCM-era packet).  ``messages`` is None when the body could not
    be read (encrypted without a key, failed authentication, or ``error``).
    """

    header: PacketHeader | None
    authenticated: bool | None
    messages: tuple[Message, ...] | None
    footer: tuple[int, ...] = ()
    error: DecodeError | None = attrs.field(default=None, eq=False)

    @property
    def ok(self) -> bool:
        return self.error is None


@functools.lru_cache(maxsize=64)
def _ecb_cipher(key: bytes) -> Any:
    """AES-128-ECB object for *key*; ECB is stateless, so one object serves every packet."""
    from Crypto.Cipher import AES

    return AES.new(key, AES.MODE_ECB)


@functools.lru_cache(maxsize=64)
def _hmac_base(key: bytes) -> Any:
    """HMAC-MD5 keyed once; each packet works on a copy."""
    return hmac.new(key, digestmod=hashlib.md5)


def _pack_footer(footer: tuple[int, ...]) -> bytes:
    n = len(footer)
    if n >= len(_FOOTER_STRUCTS):
        raise EncodeError(f"footer of {n} receivers does not fit the u8 footer size")
    try:
        return _FOOTER_STRUCTS[n].pack(*footer)
    except struct.error as e:
        raise EncodeError(f"footer variable ids must be u16: {e}") from None


def _unpack_footer(raw: bytes) -> tuple[int, ...]:
    n = len(raw)
    if n & 1:
        raise BadValue(f"footer of {n} bytes is not a list of u16 variable ids")
    return _FOOTER_STRUCTS[n >> 1].unpack(raw) if n else ()  # type: ignore[no-any-return]


class PacketCodec:
    """Encode and decode Pia datagrams of one version under one key.

    Args:
        profile: the Pia version's wire facts.
        session_key: 16-byte AES key (None: plain packets only).
        nonce_builder: GCM nonce builder (5.7+, needed with a session key).
        hmac_key: key of the <= 5.6 HMAC-MD5 trailer when it is not the session
            key (e.g. the 3DS Virtual Console ``b"PokemonSIO"``).
        backend: AES-GCM backend name (see :mod:`protocols.crypto.aead`).

    Raises:
        ConfigError: wrong key length, or GCM without a nonce builder.
    """

    __slots__ = (
        "_ecb",
        "_fast_decode",
        "_fast_encode",
        "_gcm",
        "_hdec",
        "_hmac",
        "_hsize",
        "_lone_dec",
        "_lone_enc",
        "_nonce",
        "_tag_len",
        "last_nonce",
        "profile",
    )

    def __init__(
        self,
        profile: VersionProfile,
        session_key: bytes | None = None,
        nonce_builder: NonceBuilder | None = None,
        *,
        hmac_key: bytes | None = None,
        backend: str | None = None,
    ) -> None:
        self.profile = profile
        self._nonce = nonce_builder
        #: The GCM nonce of the datagram :meth:`decode` last opened (replay checks key on it).
        self.last_nonce = b""
        self._tag_len = profile.tag_length
        self._gcm: Any = None
        self._ecb: Any = None
        self._hmac: Any = None
        if session_key is not None:
            key = bytes(session_key)
            if len(key) != 16:
                raise ConfigError(f"Pia session keys are 16 bytes (AES-128), got {len(key)}")
            if profile.cipher is Cipher.GCM:
                if nonce_builder is None:
                    raise ConfigError(f"Pia {profile.name} uses AES-GCM: a nonce builder is required")
                self._gcm = gcm(key, backend)
            else:
                self._ecb = _ecb_cipher(key)
        if profile.cipher is Cipher.ECB_HMAC:
            mac_key = hmac_key if hmac_key is not None else session_key
            if mac_key is not None:
                self._hmac = _hmac_base(bytes(mac_key))
        # Per-packet fast paths (GCM with a key): one closure per direction, bound once here.
        self._lone_enc = lone_message_encoder(profile)
        self._lone_dec = lone_message_decoder(profile)
        # Without them (AES-ECB era, no key): the header still decodes through its layout closure.
        self._hdec = header_decoder(profile)
        self._hsize = HEADER_SIZES[profile.header_format]
        self._fast_encode = _fast_encoder(self)
        self._fast_decode = _fast_decoder(self)

    @property
    def can_decrypt(self) -> bool:
        return self._gcm is not None or self._ecb is not None

    @property
    def can_authenticate(self) -> bool:
        """Whether authenticated packets of this version can be checked."""
        return self._gcm is not None or self._hmac is not None

    # -- encode -----------------------------------------------------------
    def encode(self, packet: Packet, source: str) -> bytes:
        """Build the datagram for *packet* sent from IP address *source*.

        ``packet.header.encrypted`` selects encryption; ``header.nonce`` must be
        the 8-byte header nonce for encrypted 5.7+ packets.  The tag (or HMAC),
        footer size and padding size are computed here.  Without an HMAC key a
        <= 5.6 packet reuses ``header.tag`` as its trailer (re-encoding a
        decoded packet).

        Raises:
            EncodeError: a field does not fit its format.
            ConfigError: encryption or signing requested without a key.
        """
        fast = self._fast_encode
        if fast is not None:
            # One closure for the common shape; it hands everything else to _encode_general.
            return fast(packet, source)  # type: ignore[no-any-return]
        return self._encode_general(packet, source)

    def _encode_general(self, packet: Packet, source: str) -> bytes:
        """:meth:`encode` for every packet: the reference the fast path must equal."""
        profile = self.profile
        h = packet.header
        body = encode_messages(packet.messages, profile)
        if profile.header_format is HeaderFormat.A:
            if packet.footer:
                raise EncodeError(f"Pia {profile.name} packets have no footer")
            if h.encrypted:
                if self._ecb is None:
                    raise ConfigError("encrypted packet requested but the codec has no session key")
                body = self._ecb.encrypt(body + _FF16[: -len(body) & 15])
            signed = encode_header(h, profile) + body
            if self._hmac is not None:
                mac = self._hmac.copy()
                mac.update(signed)
                return signed + mac.digest()  # type: ignore[no-any-return]
            if len(h.tag) != HMAC_TRAILER_SIZE:
                raise ConfigError(f"Pia {profile.name} packets need an HMAC key (or a 16-byte header.tag)")
            return signed + h.tag

        footer_where = profile.footer
        fbytes = _pack_footer(packet.footer) if packet.footer else b""
        if fbytes and footer_where == "none":
            raise EncodeError(f"Pia {profile.name} packets have no footer")
        fsize = len(fbytes)
        if not h.encrypted:
            if footer_where == "encrypted":
                return encode_header(h, profile, footer_size=fsize, padding_size=0) + body + fbytes
            return encode_header(h, profile, footer_size=fsize) + body + fbytes
        if self._gcm is None:
            raise ConfigError("encrypted packet requested but the codec has no session key")
        if len(h.nonce) != 8:
            raise EncodeError(f"encrypted packets need an 8-byte header nonce, got {len(h.nonce)} bytes")
        nonce = self._nonce(h, source)  # type: ignore[misc]
        if footer_where == "encrypted":
            # Our layout for 6.32+: messages ‖ footer ‖ 0xFF pad (padding nibble = pad length).
            pt = body + fbytes
            pad = -len(pt) & 15
            ct, tag = self._gcm.seal(nonce, pt + _FF16[:pad], self._tag_len)
            return encode_header(h, profile, tag=tag, footer_size=fsize, padding_size=pad) + ct
        # §2.4: 0xFF padding to 16 before encryption.
        ct, tag = self._gcm.seal(nonce, body + _FF16[: -len(body) & 15], self._tag_len)
        return encode_header(h, profile, tag=tag, footer_size=fsize) + ct + fbytes

    # -- decode -----------------------------------------------------------
    def decode(self, data: bytes, source: str, *, verify: bool = True) -> Packet:
        """Decode, authenticate and decrypt one datagram from IP address *source*.

        With ``verify=False`` the <= 5.6 HMAC trailer is not checked (plain
        packets whose key is unknown); a GCM tag is always checked because
        decryption needs the key anyway.

        Raises:
            AuthenticationError: bad tag/HMAC, or no key to check or decrypt it.
            DecodeError: any other malformation.
        """
        fast = self._fast_decode
        if fast is not None:
            # One closure for the common shape; it hands everything else to _decode_general.
            return fast(data, source, verify)  # type: ignore[no-any-return]
        if type(data) is not bytes:
            data = bytes(data)
        return self._decode_rest(data, self._hdec(data), self._hsize, source, verify)

    def _decode_general(self, data: bytes, source: str, *, verify: bool = True) -> Packet:
        """:meth:`decode` for every datagram: the reference the fast path must equal."""
        if type(data) is not bytes:
            data = bytes(data)
        header, off = decode_header(data, self.profile)
        return self._decode_rest(data, header, off, source, verify)

    def _decode_rest(self, data: bytes, header: PacketHeader, off: int, source: str, verify: bool) -> Packet:
        if self.profile.header_format is HeaderFormat.A:
            end = len(data) - HMAC_TRAILER_SIZE
            if verify:
                if self._hmac is None:
                    raise AuthenticationError(f"no HMAC key to check this Pia {self.profile.name} packet")
                self._check_hmac(data, end, header.tag)
            body = data[off:end]
            if header.encrypted:
                body = self._ecb_decrypt(body)
            return Packet(header, decode_messages(body, self.profile))
        body, footer_raw = self._split(data, off, header)
        if header.encrypted:
            if self._gcm is None:
                raise AuthenticationError("encrypted packet but the codec has no session key")
            nonce = self._nonce(header, source)  # type: ignore[misc]
            self.last_nonce = nonce
            body = self._gcm.open(nonce, body, header.tag)
        if self.profile.footer == "encrypted":
            body, footer_raw = self._split_inner(body, header)
        footer = _unpack_footer(footer_raw) if footer_raw else ()
        return Packet(header, decode_messages(body, self.profile), footer)

    def inspect(self, data: bytes, source: str) -> PacketReport:
        """Report on one datagram without raising :class:`DecodeError`.

        Checks what the codec's keys allow: headers always; the tag/HMAC when a
        key is present; messages when the body is plain or was decrypted.
        """
        data = bytes(data)
        profile = self.profile
        try:
            header, off = decode_header(data, profile)
        except DecodeError as e:
            return PacketReport(None, None, None, (), e)
        auth: bool | None = None
        footer: tuple[int, ...] = ()
        try:
            if profile.header_format is HeaderFormat.A:
                end = len(data) - HMAC_TRAILER_SIZE
                if self._hmac is not None:
                    try:
                        self._check_hmac(data, end, header.tag)
                    except AuthenticationError as e:
                        return PacketReport(header, False, None, (), e)
                    auth = True
                body: bytes | None = data[off:end]
                if header.encrypted:
                    body = self._ecb_decrypt(body) if self._ecb is not None else None  # type: ignore[arg-type]
            else:
                body, footer_raw = self._split(data, off, header)
                if profile.footer == "plain" and footer_raw:
                    footer = _unpack_footer(footer_raw)
                if header.encrypted:
                    if self._gcm is None:
                        body = None
                    else:
                        try:
                            body = self._gcm.open(self._nonce(header, source), body, header.tag)  # type: ignore[misc]
                        except AuthenticationError as e:
                            return PacketReport(header, False, None, footer, e)
                        auth = True
                if body is not None and profile.footer == "encrypted":
                    body, footer_raw = self._split_inner(body, header)
                    footer = _unpack_footer(footer_raw) if footer_raw else ()
            if body is None:
                return PacketReport(header, auth, None, footer)
            return PacketReport(header, auth, decode_messages(body, profile), footer)
        except DecodeError as e:
            return PacketReport(header, auth, None, footer, e)

    # -- helpers ----------------------------------------------------------
    def _check_hmac(self, data: bytes, end: int, tag: bytes) -> None:
        mac = self._hmac.copy()
        mac.update(memoryview(data)[:end])
        if not hmac.compare_digest(mac.digest(), tag):
            raise AuthenticationError("HMAC-MD5 trailer mismatch (wrong key or tampered packet)")

    def _ecb_decrypt(self, body: bytes) -> bytes:
        if self._ecb is None:
            raise AuthenticationError("encrypted packet but the codec has no session key")
        if len(body) & 15:
            raise BadValue(f"AES-ECB body of {len(body)} bytes is not a whole number of blocks")
        return self._ecb.decrypt(body)  # type: ignore[no-any-return]

    def _split(self, data: bytes, off: int, header: PacketHeader) -> tuple[bytes, bytes]:
        """Body and plaintext footer (5.27-6.30: the footer follows the ciphertext, §1.6, §11)."""
        if self.profile.footer != "plain" or not header.footer_size:
            return data[off:], b""
        end = len(data) - header.footer_size
        if end < off:
            raise ShortData(f"footer of {header.footer_size} bytes does not fit a {len(data)}-byte packet")
        return data[off:end], data[end:]

    def _split_inner(self, plaintext: bytes, header: PacketHeader) -> tuple[bytes, bytes]:
        """6.32+: strip the padding nibble's bytes, then the footer, from the plaintext's end."""
        end = len(plaintext) - header.padding_size
        start = end - header.footer_size
        if start < 0:
            raise ShortData(
                f"padding {header.padding_size} + footer {header.footer_size} bytes exceed the"
                f" {len(plaintext)}-byte plaintext"
            )
        return plaintext[:start], plaintext[start:end]


# -- per-profile one-closure fast paths --------------------------------------
#
# The node's datagrams nearly all have one shape: an encrypted GCM packet of a
# single message whose header has every field, and no footer.  For that shape
# the codec binds one closure per direction at construction, with every
# constant of the profile, key and nonce rule in closure cells: the message
# struct, the nonce parts, the AEAD call, the header struct and the final join
# run in one Python frame.  Anything else, and any doubt (a check fails or an
# operation raises), goes to _encode_general / the general decoder, so the
# result is always theirs: same bytes or value, same error.


class _Uncommon(Exception):
    """Internal: the packet is not of the common shape (never leaves the encode closure)."""


def _fast_encoder(codec: PacketCodec) -> Callable[[Packet, str], bytes] | None:
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
    hpack_st, versions, magic = header_layout(hf)
    hpack = hpack_st.pack
    default_version = profile.header_version
    inner = profile.footer == "encrypted"
    is_b = hf is HeaderFormat.B
    is_cd = hf is HeaderFormat.C or hf is HeaderFormat.D
    is_g = hf is HeaderFormat.G
    mf = profile.message_format
    layout = lone_delta_layout(profile)
    lone_enc = codec._lone_enc
    is_me = mf is MessageFormat.E
    is_mg = mf is MessageFormat.G
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

    def encode(packet: Packet, source: str) -> bytes:
        try:
            h = packet.header
            messages = packet.messages
            hn = h.nonce
            if not (h.encrypted and len(messages) == 1 and not packet.footer and len(hn) == 8):
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
                    magic, v | 0x80, h.destination_variable_id or 0, h.source_variable_id or 0, h.packet_id, 0, hn, tag
                )
            return head + out[:-16]
        except Exception:  # not the common shape, or something to report: the general path decides
            pass
        return general(packet, source)

    return encode


def _fast_decoder(codec: PacketCodec) -> Callable[..., Packet] | None:
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
    st, versions, magic = header_layout(hf)
    unpack = st.unpack_from
    hsize = st.size
    inner = profile.footer == "encrypted"
    is_b = hf is HeaderFormat.B
    is_cd = hf is HeaderFormat.C or hf is HeaderFormat.D
    is_g = hf is HeaderFormat.G
    layout = lone_delta_layout(profile)
    lone_dec = codec._lone_dec
    mf = profile.message_format
    is_me = mf is MessageFormat.E
    is_mg = mf is MessageFormat.G
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

    def decode(data: bytes, source: str, verify: bool = True) -> Packet:
        if type(data) is not bytes or len(data) < hsize:
            return general(data, source, verify=verify)
        # Header: one unpack; only an encrypted, footer-less header of the profile stays here.
        if is_cd:
            m_, b4, idv, pid, hn, tag = unpack(data)
            v = b4 & 0x7F
            if m_ != magic or b4 < 0x80 or v not in versions:
                return general(data, source, verify=verify)
            h = ph(True, pid, idv, v, None, None, None, None, 0, 0, 0, hn, tag)
        elif is_b:
            m_, b4, idv, pid, st_, dt, hn, tag = unpack(data)
            if m_ != magic or b4 != 2:
                return general(data, source, verify=verify)
            h = ph(True, pid, idv, None, st_, dt, None, None, 0, 0, 0, hn, tag)
        elif is_g:
            m_, b4, pf, dst, idv, pid, fs, hn, tag = unpack(data)
            v = b4 & 0x7F
            if m_ != magic or b4 < 0x80 or v not in versions or fs:
                return general(data, source, verify=verify)
            h = ph(True, pid, 0, v, None, None, dst, idv, 0, pf >> 4, pf & 0x0F, hn, tag)
        else:
            m_, b4, dst, idv, pid, fs, hn, tag = unpack(data)
            v = b4 & 0x7F
            if m_ != magic or b4 < 0x80 or v not in versions or fs:
                return general(data, source, verify=verify)
            h = ph(True, pid, 0, v, None, None, dst, idv, 0, 0, 0, hn, tag)
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
                nonce = builder(h, source)  # type: ignore[misc]  # raises the builder's error
            codec.last_nonce = nonce
            if raw is not None:
                # aead.open's checks hold: a 12-byte nonce, a 16-byte tag (unpacked as 16s).
                try:
                    body = decrypt(nonce, data[hsize:] + tag, None)
                except tag_error:
                    raise AuthenticationError(GCM_MISMATCH) from None
            else:
                body = open_(nonce, data[hsize:], tag)
        else:
            nonce = builder(h, source)  # type: ignore[misc]
            codec.last_nonce = nonce
            body = open_(nonce, data[hsize:], tag)
        if inner:
            pad = pf >> 4 if is_g else 0
            if pad:
                body = body[: len(body) - pad] if pad <= len(body) else split_inner(body, h)[0]
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
                    return lone_packet(h, ptype, port, body[mhsize:stop], flags, dest, src, extra, full)
            return pkt(h, decode_messages(body, profile), ())
        return pkt(h, lone_dec(body) or decode_messages(body, profile), ())

    return decode


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
    """``make(header, type, port, payload, flags, destination, source id, extra, presence) -> Packet``.

    Equal to ``Packet(header, (Message(type, port, payload, flags, destination,
    source id, None, 0, extra, presence),), ())``: a packet of one message, built
    in one call with the slot stores of :func:`_header_maker`.
    """
    msg_setters = _slot_setters(Message)
    pkt_setters = _slot_setters(Packet)
    if msg_setters is None or pkt_setters is None or len(msg_setters) != 10 or len(pkt_setters) != 3:

        def plain(h: PacketHeader, a: Any, b: Any, c: Any, d: Any, e: Any, f: Any, i: Any, j: Any) -> Packet:
            return Packet(h, (Message(a, b, c, d, e, f, None, 0, i, j),), ())

        return plain
    s0, s1, s2, s3, s4, s5, s6, s7, s8, s9 = msg_setters
    p0, p1, p2 = pkt_setters
    new = object.__new__
    msg_cls = Message
    pkt_cls = Packet

    def make(h: PacketHeader, a: Any, b: Any, c: Any, d: Any, e: Any, f: Any, i: Any, j: Any) -> Packet:
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
        p2(o, ())
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
