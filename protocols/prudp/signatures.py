"""Packet signatures of Nintendo PRUDP v0 and v1 (spec ../shared/spec/prudp.md §1.6, §2.5, §2.6).

The recurring rule (spec §1.6): a sender signs with the **peer's** connection
signature, and a receiver verifies with its **own**.  The access key enters as
``K = MD5(access_key)`` (the HMAC key) and, in v1, as ``sum(access_key)`` u32.

* v0, ``signature_version 0`` (3DS/Wii U games): DATA and DISCONNECT carry
  ``HMAC-MD5(K, session_key ‖ seq u16 ‖ fragment u8 ‖ payload)[:4]``; every
  other packet carries the peer's connection signature (zeros on SYN).
* v0, ``signature_version 1`` (Friends): DATA carries ``HMAC-MD5(K, payload)[:4]``,
  or ``78 56 34 12`` when the payload is empty.
* Quazal and the Rendez-Vous variant: always the peer's connection signature.
* v1: ``HMAC-MD5(K, header[6:14] ‖ session_key ‖ sum(key) u32 ‖ peer conn sig
  ‖ options ‖ payload)``, with the connection signature left out on SYN.
"""

from __future__ import annotations

import hashlib
import hmac
import struct

import attrs

from protocols.prudp.framing_v1 import encode_options, signed_header
from protocols.prudp.packet import PacketType, PrudpPacket
from protocols.prudp.variants import SignatureRule, Variant

__all__ = ["expected_signature", "nc_connection_signature_v0", "nc_connection_signature_v1", "sign"]

_EMPTY_DATA_V1 = struct.pack("<I", 0x12345678)  # spec §2.5, Friends empty DATA
_NC_V1_SIG_KEY = bytes.fromhex("26c31f381e46d6eb38e1af6ab70d11")  # spec §1.6


def _hmac_md5(key: bytes, msg: bytes) -> bytes:
    return hmac.new(key, msg, hashlib.md5).digest()


def expected_signature(
    packet: PrudpPacket,
    variant: Variant,
    access_key: bytes,
    *,
    session_key: bytes = b"",
    peer_signature: bytes | None = None,
) -> bytes:
    """The signature *packet* must carry.

    Args:
        packet: the packet (its ``signature`` field is ignored).
        variant: the PRUDP variant.
        access_key: the game's access key.
        session_key: the Kerberos session key on a secure connection, else empty.
        peer_signature: the connection signature of the packet's *receiver*
            (``None`` before it is known: SYN).
    """
    size = 16 if variant.signature_rule == SignatureRule.NEX_V1 else 4
    peer = peer_signature if peer_signature is not None else bytes(size)
    rule = variant.signature_rule
    if rule == SignatureRule.NEX_V1:
        conn = b"" if packet.type == PacketType.SYN or peer_signature is None else peer_signature
        msg = (
            signed_header(packet)
            + session_key
            + struct.pack("<I", sum(access_key) & 0xFFFFFFFF)
            + conn
            + encode_options(packet)
            + packet.payload
        )
        return _hmac_md5(hashlib.md5(access_key).digest(), msg)
    if packet.type == PacketType.SYN:
        return bytes(4) if peer_signature is None else peer
    k = hashlib.md5(access_key).digest()
    if rule == SignatureRule.NEX_V0_GAMES and packet.type in (PacketType.DATA, PacketType.DISCONNECT):
        frag = packet.fragment_id or 0
        msg = session_key + struct.pack("<HB", packet.sequence_id, frag & 0xFF) + packet.payload
        return _hmac_md5(k, msg)[:4]
    if rule == SignatureRule.NEX_V0_FRIENDS and packet.type == PacketType.DATA:
        return _hmac_md5(k, packet.payload)[:4] if packet.payload else _EMPTY_DATA_V1
    return peer


def sign(
    packet: PrudpPacket,
    variant: Variant,
    access_key: bytes,
    *,
    session_key: bytes = b"",
    peer_signature: bytes | None = None,
) -> PrudpPacket:
    """A copy of *packet* carrying :func:`expected_signature`."""
    sig = expected_signature(packet, variant, access_key, session_key=session_key, peer_signature=peer_signature)
    return attrs.evolve(packet, signature=sig)


def nc_connection_signature_v0(ip: str, port: int) -> bytes:
    """The reference client's v0 connection signature: MD5(ip ‖ port BE)[:4] reversed (spec §1.6)."""
    data = bytes(int(p) for p in ip.split(".")) + struct.pack(">H", port)
    return hashlib.md5(data).digest()[3::-1]


def nc_connection_signature_v1(ip: str, port: int) -> bytes:
    """The reference client's v1 connection signature: HMAC-MD5 with a fixed key (spec §1.6)."""
    data = bytes(int(p) for p in ip.split(".")) + struct.pack(">H", port)
    return _hmac_md5(_NC_V1_SIG_KEY, data)
