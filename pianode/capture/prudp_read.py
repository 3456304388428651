"""The PRUDP part of ``pianode decode``: one captured datagram's packets and what can be said of them.

:func:`read_prudp` reads a datagram with the session's variant through
:func:`protocols.prudp.decode_datagram`.  A v0 checksum is judged only where it can be: with
the access key, or on a stream type whose checksum the variant sums without one (Quazal DO and
NAT, spec ../shared/spec/prudp.md §3.3).  No key given is not a bad checksum: those packets are
"not checked" and the row's note says why (:data:`NO_ACCESS_KEY_NOTE`), as the Wireshark
dissector shows no checksum status without its ``prudp.access_key`` preference.  v1 has no checksum at all, and
its signatures are not checked either: its rows say so (:data:`V1_NOTE`).
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
#: The note of a v1 datagram: it has no checksum, and its HMAC signatures (spec §2.6, which need the connection's
#: signatures and, on a secure connection, its session key) are not checked.
V1_NOTE = "PRUDP v1: no checksum, and its packet signatures are not checked"


def read_prudp(
    data: bytes, settings: PrudpSettings, streams: MutableMapping[Any, Any]
) -> tuple[list[PrudpPacket], bool | None, str | None, str | None]:
    """(packets, authenticated, error, note) of one datagram.

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
    if data[:2] == b"\xea\xd0":  # v1 (spec §2.3): nothing in the datagram is judged
        return packets, auth, error, V1_NOTE
    unjudged = key is None and any(p.checksum_ok is None for p in packets)
    return packets, auth, error, NO_ACCESS_KEY_NOTE if unjudged else None
