"""The payload cipher of one PRUDP connection: how DATA payloads are sealed and opened (spec §2.8, §3.5, §4.4).

:class:`PayloadCipher` owns the keys and cipher state of a connection's DATA
payloads: the per-substream RC4 streams of reliable packets (NEX), the
per-packet RC4 keys of unreliable ones, Quazal's per-packet RC4, and
Rendez-Vous's AES-CBC key once the key exchange gave it.  The connection
(:mod:`pianode.prudp.connection`) calls :meth:`PayloadCipher.seal` on each
outgoing DATA packet and :meth:`PayloadCipher.open` on each inbound one.
"""

from __future__ import annotations

from collections.abc import Callable

from protocols.errors import DecodeError
from protocols.prudp.codec import quazal_open, quazal_seal
from protocols.prudp.packet import Flag, PacketType, PrudpPacket
from protocols.prudp.payload import (
    Rc4Stream,
    add_ratio,
    add_sequence_suffix,
    aes_cbc_open,
    aes_cbc_seal,
    derive_substream_key,
    strip_ratio,
    strip_sequence_suffix,
    unreliable_base_key,
    unreliable_packet_key,
)
from protocols.prudp.variants import Cipher, Variant

__all__ = ["PayloadCipher"]


class PayloadCipher:
    """Sealing and opening of one connection's DATA payloads."""

    def __init__(
        self, variant: Variant, max_substream: int, *, ratio_byte: bool, compress: bool, random_bytes: Callable[[int], bytes]
    ) -> None:
        self.variant = variant
        self._max_sub = max_substream
        self._ratio_byte = ratio_byte
        self._compress = compress
        self._random = random_bytes
        #: Rendez-Vous's AES key, from the key exchange (None before it).
        self.aes_key: bytes | None = None
        #: A Kerberos session key would go here (spec §2.9); we run auth-style.
        self.session_key = b""
        self._tx_rc4: list[Rc4Stream] = []
        self._rx_rc4: list[Rc4Stream] = []
        self.reset()

    def reset(self) -> None:
        """Start every substream's RC4 stream afresh from the session (or default) key."""
        key = self.session_key or self.variant.default_key
        self._tx_rc4, self._rx_rc4 = [], []
        for _ in range(self._max_sub + 1):
            self._tx_rc4.append(Rc4Stream(key))
            self._rx_rc4.append(Rc4Stream(key))
            # Derived per substream from a session key only (spec §2.8); without one, every substream starts
            # from the default key itself, as nintendoclients 5.0.0 (PayloadEncoder.set_session_key) and
            # nex-go (PRUDPConnection.setSessionKey) key them.
            if self.session_key:
                key = derive_substream_key(key)

    def seal(self, p: PrudpPacket, plain: bytes) -> bytes:
        """Payload transform of an outgoing DATA packet."""
        v = self.variant
        if v.cipher == Cipher.AES_CBC:
            assert self.aes_key is not None
            body = add_ratio(add_sequence_suffix(plain, p.sequence_id), compress=self._compress)
            return aes_cbc_seal(self.aes_key, body, self._random(16))
        if v.cipher == Cipher.RC4_PER_PACKET:
            return quazal_seal(plain, v, PacketType.DATA, p.source, compress=self._compress)
        if not plain:
            return b""  # NEX leaves empty payloads alone
        body = add_ratio(plain, compress=True) if self._ratio_byte else plain
        if p.flags & Flag.RELIABLE:
            return self._tx_rc4[p.substream_id].process(body)
        key = unreliable_packet_key(unreliable_base_key(self.session_key), p.sequence_id, p.session_id)
        return Rc4Stream(key).process(body)

    def open(self, p: PrudpPacket) -> bytes:
        """Inverse of :meth:`seal` for an inbound DATA packet; raises DecodeError."""
        v = self.variant
        if v.cipher == Cipher.AES_CBC:
            if self.aes_key is None:
                raise DecodeError("DATA before the key exchange")
            return strip_sequence_suffix(strip_ratio(aes_cbc_open(self.aes_key, p.payload)), p.sequence_id)
        if v.cipher == Cipher.RC4_PER_PACKET:
            return quazal_open(p.payload, v, PacketType.DATA, p.source)
        if not p.payload:
            return b""
        if p.flags & Flag.RELIABLE:
            body = self._rx_rc4[p.substream_id].process(p.payload)
        else:
            key = unreliable_packet_key(unreliable_base_key(self.session_key), p.sequence_id, p.session_id)
            body = Rc4Stream(key).process(p.payload)
        return strip_ratio(body) if self._ratio_byte else body
