"""The PRUDP part of ``pianode decode``: one captured datagram's packets and what can be said of them.

:func:`read_prudp` reads a datagram with the session's variant through
:func:`protocols.prudp.decode_datagram`.  A v0 checksum is judged only where it can be: with
the access key, or on a stream type whose checksum the variant sums without one (Quazal DO and
NAT, spec ../shared/spec/prudp.md §3.3).  No key given is not a bad checksum: those packets are
"not checked" and the row's note says why (:data:`NO_ACCESS_KEY_NOTE`), as the Wireshark
dissector shows no checksum status without its ``prudp.access_key`` preference.  v1 has no checksum at all, and
of the packet signatures only those the access key alone gives are checked (``signature_ok``; the v1 rows say so,
:data:`V1_NOTE`); the dissector, which has no MD5, checks none.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any

from pianode.capture.session_file import PrudpSettings

if TYPE_CHECKING:  # the codecs load only when a datagram needs them (pianode decode imports what it uses)
    from protocols.prudp.packet import PrudpPacket

__all__ = ["NO_ACCESS_KEY_NOTE", "V1_NOTE", "read_prudp"]

#: The note of a PRUDP datagram whose checksum needs the access key that was not given.
NO_ACCESS_KEY_NOTE = "no access key given: the checksum is not checked (--access-key)"
#: The note of a v1 datagram: it has no checksum, and its HMAC signatures (spec §2.6) need the connection's
#: signatures and, on a secure connection, its session key: only a SYN's (and SYN+ACK's) are checked.
V1_NOTE = "PRUDP v1: no checksum, and a signature is checked only where the access key alone gives it (SYN)"


def read_prudp(
    data: bytes, settings: PrudpSettings, streams: MutableMapping[Any, Any]
) -> tuple[list[PrudpPacket], list[bool | None], bool | None, str | None, str | None]:
    """(packets, whether each one's signature is right where that can be told, authenticated, error, note) of one
    datagram.

    Raises:
        DecodeError: the bytes are not PRUDP of the session's variant.
    """
    from protocols.prudp import decode_datagram

    from protocols.errors import DecodeError
    from protocols.prudp.packet import StreamType

    key = settings.access_key or None  # an empty key is none: no title's checksum is keyed so
    packets = decode_datagram(data, settings.variant, key, aes_key=settings.aes_key, nex_streams=streams)
    checks = [p.checksum_ok for p in packets if p.checksum_ok is not None]
    auth = None if not checks else all(checks)
    known = {int(t) for t in StreamType}
    if auth is not True and any(
        p.source_stream_type != p.destination_stream_type or p.source_stream_type not in known for p in packets
    ):
        # Every source shows one known stream type on both sides, and a server drops a packet of two (spec
        # prudp.md §1.1): unless its checksum vouches for it, such a datagram is something else beside the PRUDP.
        raise DecodeError("its virtual ports name two stream types, or an unknown one, and no checksum vouches for it")
    error = None if auth is not False else "checksum mismatch (wrong access key or damaged packet)"
    v1 = data[:2] == b"\xea\xd0"
    signatures = [_signature_ok(p, settings.variant, key, v1) for p in packets]
    if False in signatures:
        auth, error = False, error or "signature mismatch (wrong access key or damaged packet)"
    elif v1 and signatures and all(signatures):
        auth = True
    if v1:  # (spec §2.3: no checksum)
        return packets, signatures, auth, error, V1_NOTE
    unjudged = key is None and any(p.checksum_ok is None for p in packets)
    return packets, signatures, auth, error, NO_ACCESS_KEY_NOTE if unjudged else None


def _signature_ok(p: PrudpPacket, variant: str, key: bytes | None, v1: bool) -> bool | None:
    """Whether *p*'s signature is the one the access key alone gives (spec §2.5, §2.6), where it can be told:
    v1 SYN and SYN+ACK (no connection signature yet, no session key), Friends DATA, and a game's DATA or
    DISCONNECT of an auth connection (a secure connection's also take the Kerberos session key, so a mismatch
    there says nothing).  Every other signature takes the connection's own signatures: None."""
    from protocols.prudp.packet import PacketType
    from protocols.prudp.signatures import expected_signature
    from protocols.prudp.variants import SignatureRule, variant_for

    v = variant_for("nintendo-v1" if v1 else variant)
    rule = v.signature_rule
    if key is None or rule is SignatureRule.PEER_CONNECTION_SIGNATURE:
        return None
    if rule is SignatureRule.NEX_V1:
        return p.signature == expected_signature(p, v, key) if p.type == PacketType.SYN else None
    if rule is SignatureRule.NEX_V0_FRIENDS:
        return p.signature == expected_signature(p, v, key) if p.type == PacketType.DATA else None
    if p.type in (PacketType.DATA, PacketType.DISCONNECT) and p.signature == expected_signature(p, v, key):
        return True
    return None
