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
construction (:mod:`protocols.pia.packet_fast`) for the node's common
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

from protocols.crypto.aead import gcm
from protocols.errors import (
    AuthenticationError,
    BadValue,
    ConfigError,
    DecodeError,
    EncodeError,
    ShortData,
    UnsupportedVersion,
)
from protocols.pia.header import (
    HEADER_SIZES,
    HMAC_TRAILER_SIZE,
    PacketHeader,
    decode_header,
    encode_header,
    header_decoder,
)
from protocols.pia.message import (
    Message,
    decode_messages,
    encode_messages,
    lone_message_decoder,
    lone_message_encoder,
)
from protocols.pia.packet_fast import (
    StreamOpener,
    StreamSealer,
    fast_decoder,
    fast_encoder,
    lone_opener,
    lone_sealer,
    packet_of_lone,
)
from protocols.pia.packet_values import LoneMessage, NonceBuilder, Packet, pack_footer, unpack_footer
from protocols.pia.versions import Cipher, HeaderFormat, VersionProfile

__all__ = ["LoneMessage", "NonceBuilder", "Packet", "PacketCodec", "PacketReport"]

_FF16 = b"\xff" * 16
#: H-G packet flag: the payload is a Zstandard frame (KW Pia-Protocol.md, "Packet Flags").
PACKET_FLAG_ZSTD = 0x01


def _refuse_zstd(header: PacketHeader) -> None:
    """Compressed 6.32+ payloads are not messages until inflated, which this codec cannot do."""
    if header.packet_flags & PACKET_FLAG_ZSTD:
        raise UnsupportedVersion("the payload is Zstandard-compressed (packet flag 1); its messages cannot be read")


def _footer_ids(raw: bytes) -> tuple[tuple[int, ...], DecodeError | None]:
    """The u16 receiver ids of a footer (§1.6), and the problem when its size is odd (the whole ids are kept)."""
    try:
        return unpack_footer(raw), None
    except DecodeError as e:
        return unpack_footer(raw[: len(raw) & ~1]), e


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
        "_fast_lone",
        "_gcm",
        "_hdec",
        "_hmac",
        "_hsize",
        "_lone_dec",
        "_lone_enc",
        "_lone_or_packet",
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
        self._fast_encode = fast_encoder(self)
        decoders = fast_decoder(self)
        self._fast_decode, self._fast_lone, self._lone_or_packet = decoders if decoders is not None else (None, None, None)

    @property
    def can_decrypt(self) -> bool:
        return self._gcm is not None or self._ecb is not None

    @property
    def opens_in_batches(self) -> bool:
        """Whether the AEAD seals and opens many packets in one call cheaper than one by one
        (pycryptodome's fast path): the streams' ``seal_many``/``open_many`` are then set."""
        return bool(getattr(self._gcm, "batched", False))

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
        fbytes = pack_footer(packet.footer) if packet.footer else b""
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

    def decode_lone(self, data: bytes, source: str) -> Packet | LoneMessage:
        """:meth:`decode` for a receive path that wants no values for the common packet.

        A packet of one message of the fast path's shape comes back as a
        :data:`LoneMessage` tuple, which builds no header, message or packet
        object (a third of the decode's cost); anything else as :meth:`decode`
        gives it.  Same checks, errors and ``last_nonce``.
        """
        lone = self._fast_lone
        if lone is not None:
            return lone(data, source)  # type: ignore[no-any-return]
        return self.decode(data, source)

    def lone_decoder(self) -> Callable[[bytes, str], Packet | LoneMessage]:
        """:meth:`decode_lone` as one callable, without the method's own call (for a receive loop)."""
        return self._fast_lone or self.decode  # type: ignore[no-any-return]

    def lone_sealer(self, header: PacketHeader, message: Message, source: str) -> StreamSealer | None:
        """``seal(packet_id, header_nonce, payload) -> datagram`` for a stream of packets of one message.

        The packets are those of *header* and *message* but for the three
        arguments: ``seal(i, hn, p)`` equals :meth:`encode` of ``Packet(header
        with packet_id i and nonce hn, (message with payload p,))`` from
        *source*.  Every field that does not change is checked and packed
        once, here, so a sender of a steady stream (a node's data to one
        station) seals each packet without building or reading any value.
        None when the shape is not one it knows (no key, H-A/H-B headers, a
        non-delta message format, an unusual field): encode each packet then.
        Its ``prepare``/``assemble``/``seal_many`` seal a batch in one AEAD
        call (:class:`~protocols.pia.packet_fast.StreamSealer`).
        """
        return lone_sealer(self, header, message, source)

    def lone_opener(self, lone: LoneMessage, source: str) -> StreamOpener | None:
        """``open(datagram)`` for the packets of one stream of which :meth:`decode_lone` gave *lone*.

        The stream is the packets from *source* that carry *lone*'s header and
        message fields but for the packet id, header nonce, tag and payload (a
        station's unreliable data to us).  ``open(d)`` returns:

        - None when *d* is not of the stream's header (its constant bytes differ,
          or it is too short): nothing was done, ``last_nonce`` is untouched;
        - the payload when *d* is a packet of the stream; :meth:`decode_lone`
          would have given *lone* with this payload and *d*'s id, nonce and tag;
        - otherwise :meth:`decode_lone`'s value (another message, several), from
          the one decryption.

        A bad tag raises :class:`AuthenticationError` and a bad message
        :class:`DecodeError`, as :meth:`decode_lone` would; ``last_nonce`` is set
        as it sets it.  It compares the constant bytes instead of reading the
        fields.  None when the shape is not one it knows (H-A, H-B, an encrypted
        footer, a footer on *lone*, a fixed-format message).
        """
        return lone_opener(self, lone, source)

    @staticmethod
    def packet_of(lone: LoneMessage) -> Packet:
        """The :class:`Packet` that :meth:`decode` gives for what :meth:`decode_lone` gave."""
        return packet_of_lone(lone)

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
        _refuse_zstd(header)
        if self.profile.footer == "encrypted":
            body, footer_raw = self._split_inner(body, header)
        footer = unpack_footer(footer_raw) if footer_raw else ()
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
        # A footer that is no list of u16 ids is reported, and the messages are still read (they do not depend on it).
        footer_problem: DecodeError | None = None
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
                    footer, footer_problem = _footer_ids(footer_raw)
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
                    # The header's padding and footer sizes place the footer, compressed payload or not (§1.1, §1.7).
                    body, footer_raw = self._split_inner(body, header)
                    footer, footer_problem = _footer_ids(footer_raw)
                if body is not None:
                    _refuse_zstd(header)
            if body is None:
                return PacketReport(header, auth, None, footer, footer_problem)
            return PacketReport(header, auth, decode_messages(body, profile), footer, footer_problem)
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
