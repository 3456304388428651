"""One entry point per direction for every PRUDP variant, and the capture decoder's helper.

:class:`PacketCodec` binds a :class:`~protocols.prudp.variants.Variant` and an
access key; ``decode`` splits a datagram into packets (spec
../shared/spec/prudp.md §2.1: several packets may share one datagram) and
``encode`` writes one packet, computing its checksum (v0 family).  Signatures
are values the caller computes (:mod:`protocols.prudp.signatures`), because
they need connection state.

:func:`decode_datagram` is the stateless view a capture decoder wants: it never
raises on a bad checksum (it records ``checksum_ok``), and it attaches
``plaintext`` where a payload can be recovered without connection state: Quazal
payloads (per-packet RC4 ``"CD&ML"`` + ratio byte, spec §3.5), Rendez-Vous DATA
when the AES key is supplied (spec §4.5), and unencrypted payloads (CONNECT in
NEX and Rendez-Vous, acks).  NEX DATA is a continuous RC4 stream (spec §2.8), so
its plaintext needs the connection's history: pass ``nex_streams`` to decrypt
packets in capture order.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping

import attrs

from protocols.errors import DecodeError, EncodeError
from protocols.prudp.checksum import key_byte
from protocols.prudp.framing_v0 import decode_v0, encode_v0
from protocols.prudp.framing_v1 import MAGIC, decode_v1, encode_v1
from protocols.prudp.packet import Flag, PacketType, PrudpPacket
from protocols.prudp.payload import (
    Rc4Stream,
    aes_cbc_open,
    quazal_rc4,
    strip_ratio,
    strip_sequence_suffix,
    unreliable_base_key,
    unreliable_packet_key,
)
from protocols.prudp.variants import Cipher, Framing, Variant, variant_for

__all__ = ["NexStream", "PacketCodec", "decode_datagram", "quazal_open", "quazal_seal"]


class PacketCodec:
    """Encode and decode packets of one variant with one access key."""

    def __init__(self, variant: str | Variant, access_key: bytes | str = b"") -> None:
        self.variant = variant_for(variant)
        self.access_key = access_key.encode() if isinstance(access_key, str) else bytes(access_key)
        self._key = key_byte(self.access_key)

    def decode(self, data: bytes, *, verify: bool = True) -> list[PrudpPacket]:
        """Split *data* into packets; with ``verify`` a bad checksum raises AuthenticationError."""
        if self.variant.framing == Framing.V1:
            return decode_v1(data)
        return decode_v0(data, self.variant, self._key, verify=verify)

    def encode(self, packet: PrudpPacket) -> bytes:
        if self.variant.framing == Framing.V1:
            return encode_v1(packet)
        return encode_v0(packet, self.variant, self._key)

    def encode_many(self, packets: Iterable[PrudpPacket]) -> bytes:
        """Several packets in one datagram; in the v0 family all but the last need HAS_SIZE."""
        items = list(packets)
        if self.variant.framing == Framing.V0:
            for p in items[:-1]:
                if not p.flags & Flag.HAS_SIZE:
                    raise EncodeError("only the last packet of a datagram may omit HAS_SIZE")
        return b"".join(self.encode(p) for p in items)


def _quazal_transformed(variant: Variant, packet_type: PacketType, source_vport: int) -> tuple[bool, bool]:
    """(ratio byte present, RC4 applied) for a Quazal payload (spec §3.5)."""
    st = source_vport >> 4
    if packet_type == PacketType.SYN or st in variant.raw_payload_stream_types:
        return False, False
    if packet_type == PacketType.CONNECT and not variant.transform_connect:
        return False, False
    rc4 = variant.cipher_stream_types is None or st in variant.cipher_stream_types
    return True, rc4


def quazal_open(payload: bytes, variant: Variant, packet_type: PacketType, source_vport: int) -> bytes:
    """Plaintext of a Quazal payload: RC4 ``"CD&ML"`` per packet, then the ratio byte (spec §3.5)."""
    if not payload:
        return b""
    ratio, rc4 = _quazal_transformed(variant, packet_type, source_vport)
    data = quazal_rc4(payload) if rc4 else payload
    return strip_ratio(data) if ratio else data


def quazal_seal(plain: bytes, variant: Variant, packet_type: PacketType, source_vport: int, *, compress: bool) -> bytes:
    from protocols.prudp.payload import add_ratio

    if not plain and packet_type != PacketType.DATA:
        return b""
    ratio, rc4 = _quazal_transformed(variant, packet_type, source_vport)
    data = add_ratio(plain, compress=compress) if ratio else plain
    return quazal_rc4(data) if rc4 else data


class NexStream:
    """One direction's NEX RC4 keystream as seen in a capture (spec §2.8).

    Reliable DATA must be decrypted once each, in sequence order.  The first
    packet seen fixes the starting sequence id.  A retransmitted copy gets the
    plaintext decoded the first time.  A packet that arrives early is held (its
    own plaintext cannot be returned, since the keystream offset is not known
    yet) and decrypted once the gap fills, so later packets and copies still
    decode; a gap that never fills stops decryption for that direction.
    """

    _KEEP = 1024  # recent plaintexts kept for copies, and early ciphertexts held

    def __init__(self, key: bytes) -> None:
        self._rc4 = Rc4Stream(key)
        self._next: int | None = None
        self._seen: dict[int, bytes] = {}
        self._held: dict[int, bytes] = {}

    def _take(self, sequence_id: int, payload: bytes) -> bytes:
        plain = self._rc4.process(payload)
        self._next = (sequence_id + 1) & 0xFFFF
        self._seen[sequence_id] = plain
        if len(self._seen) > self._KEEP:
            del self._seen[next(iter(self._seen))]
        return plain

    def open(self, sequence_id: int, payload: bytes) -> bytes | None:
        if sequence_id in self._seen:
            return self._seen[sequence_id]
        if self._next is None:
            self._next = sequence_id
        ahead = (sequence_id - self._next) & 0xFFFF
        if ahead >= 0x8000:
            return None  # older than where this capture's stream starts
        if ahead:
            if len(self._held) < self._KEEP:
                self._held[sequence_id] = payload
            return None
        plain = self._take(sequence_id, payload)
        while self._next in self._held:
            seq = self._next
            self._take(seq, self._held.pop(seq))
        return plain


def _maybe_ratio(data: bytes) -> bytes:
    """NEX payloads carry a ratio byte only with compression on (spec §2.8); recognise ``ratio ‖ zlib``."""
    if len(data) > 3 and data[0] and data[1] == 0x78:
        try:
            return strip_ratio(data)
        except DecodeError:
            pass
    return data


def _rendezvous_open(packet: PrudpPacket, aes_key: bytes) -> bytes:
    plain = strip_ratio(aes_cbc_open(aes_key, packet.payload))
    return strip_sequence_suffix(plain, packet.sequence_id)


def decode_datagram(
    data: bytes,
    variant: str | Variant,
    access_key: bytes | str | None = b"",
    *,
    aes_key: bytes | None = None,
    nex_streams: MutableMapping[tuple[int, int, int], NexStream] | None = None,
) -> list[PrudpPacket]:
    """Decode one captured datagram without connection state.

    Args:
        data: the UDP payload.
        variant: a variant name (``nintendo-v0``, ``nintendo-v0-friends``,
            ``nintendo-v1``, ``quazal-v0``, ``rendezvous``) or :class:`Variant`.
        access_key: the game's access key (checksums; v0 family); ``None`` when
            the reader does not know it: a checksum that needs a key is then
            not judged (``checksum_ok`` None), one of a stream type the variant
            sums without a key (Quazal DO and NAT, spec §3.3) still is.
        aes_key: the Rendez-Vous session key, if known.
        nex_streams: optional map ``(source vport, destination vport, substream) →
            NexStream``, kept by the caller per UDP flow (pass an empty dict
            first); when given, reliable NEX DATA of an auth connection (key
            ``"CD&ML"``) is decrypted in sequence order, retransmitted copies
            included (:class:`NexStream`).

    A ``nintendo-v0*`` variant also reads v1 datagrams (magic ``EA D0 01``) and
    4-byte-checksum v0 packets when those verify and the 1-byte form does not.

    Returns:
        The packets, each with ``checksum_ok`` (``None`` for v1, which has no
        checksum) and ``plaintext`` (``None`` when it cannot be recovered).

    Raises:
        DecodeError: the bytes are not PRUDP of this variant.
    """
    unknown_key = access_key is None
    codec = PacketCodec(variant, b"" if access_key is None else access_key)
    v = codec.variant
    if v.framing == Framing.V0 and v.flags_bytes == 2 and bytes(data[:3]) == MAGIC + b"\x01":
        # A NEX server accepts both versions on one socket and tells them apart by
        # "EA D0 01" (spec §2.3); no v0 packet starts so (stream type 14 does not exist).
        v = attrs.evolve(v, framing=Framing.V1, checksum_bytes=0, connection_signature_bytes=16)
        codec = PacketCodec(v, codec.access_key)
    packets = _decode_with_checksum_fallback(codec, data)
    if v.framing == Framing.V1:
        packets = [attrs.evolve(p, checksum_ok=None) for p in packets]
    out = []
    for p in packets:
        checked = p.checksum_ok if not (unknown_key and v.checksum_key_applies(p.source)) else None
        out.append(attrs.evolve(p, plaintext=_plaintext(p, v, aes_key, nex_streams), checksum_ok=checked))
    return out


_KNOWN_FLAGS = int(Flag.ACK | Flag.RELIABLE | Flag.NEED_ACK | Flag.HAS_SIZE | Flag.MULTI_ACK)


def _decode_with_checksum_fallback(codec: PacketCodec, data: bytes) -> list[PrudpPacket]:
    """Decode without raising on checksums, trying the v0 alternatives titles are known to use.

    Rendez-Vous-era titles may use the 4-byte checksum (spec §2.4, §3.3), and the
    reference client's "alt" v0 pairs it with the 1-byte type/flags form (spec
    §1.3).  When the configured reading does not verify (or does not frame the
    datagram) but an alternative verifies every packet, the alternative wins: a
    chance match of a 4-byte checksum is 2**-32 per packet.  If nothing verifies,
    the configured reading is kept, or else the first alternative that frames.
    """
    v = codec.variant
    try:
        packets = codec.decode(data, verify=False)
        error: DecodeError | None = None
    except DecodeError as exc:
        packets, error = [], exc
    if v.framing != Framing.V0 or v.checksum_bytes != 1 or (error is None and all(p.checksum_ok for p in packets)):
        return packets
    alternatives = [attrs.evolve(v, checksum_bytes=4)]
    if v.flags_bytes == 2:
        alternatives.append(attrs.evolve(v, checksum_bytes=4, flags_bytes=1))
    framed: list[PrudpPacket] = []
    verified: list[list[PrudpPacket]] = []
    for alt_variant in alternatives:
        try:
            alt_packets = PacketCodec(alt_variant, codec.access_key).decode(data, verify=False)
        except DecodeError:
            continue
        if all(p.checksum_ok for p in alt_packets):
            verified.append(alt_packets)
        framed = framed or alt_packets
    if verified:
        # The 4-byte sum covers the same bytes whichever type/flags form frames them, so
        # both readings verify; the right one uses only known flag bits (spec §1.3).
        plausible = [ps for ps in verified if all(not p.flags & ~_KNOWN_FLAGS for p in ps)]
        return (plausible or verified)[0]
    if error is not None:
        if framed:
            return framed  # the only reading that frames the datagram
        raise error
    return packets


def _plaintext(
    p: PrudpPacket,
    v: Variant,
    aes_key: bytes | None,
    nex_streams: MutableMapping[tuple[int, int, int], NexStream] | None,
) -> bytes | None:
    if not p.payload:
        return b""
    acked = bool(p.flags & (Flag.ACK | Flag.MULTI_ACK))
    try:
        if v.cipher == Cipher.RC4_PER_PACKET:
            return quazal_open(p.payload, v, p.type, p.source)
        if v.cipher == Cipher.AES_CBC:
            if p.type != PacketType.DATA or acked:
                return p.payload  # CONNECT payloads travel in the clear (spec §4.2)
            return _rendezvous_open(p, aes_key) if aes_key is not None else None
        # NEX: only non-ack DATA is encrypted (spec §2.8)
        if p.type != PacketType.DATA or acked:
            return p.payload
        if not p.flags & Flag.RELIABLE:
            # unreliable DATA: its own RC4 key from seq and session, base key all zeros
            # without a Kerberos session key (spec §2.8), so no history is needed
            key32 = unreliable_packet_key(unreliable_base_key(None), p.sequence_id, p.session_id)
            return _maybe_ratio(Rc4Stream(key32).process(p.payload))
        if nex_streams is None:
            return None
        key = (p.source, p.destination, p.substream_id)
        stream = nex_streams.get(key)
        if stream is None:
            # An auth connection's every substream starts from the default key itself: a key is derived per
            # substream from a session key only (spec §2.8; nintendoclients 5.0.0, nex-go).
            stream = nex_streams[key] = NexStream(v.default_key)
        data = stream.open(p.sequence_id, p.payload)
        if data is None:
            return None
        # the ratio byte is there only if the title enabled compression; its zlib header tells
        return _maybe_ratio(data)
    except DecodeError:
        return None
