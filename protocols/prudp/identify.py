"""Which PRUDP variant a packet that does not fit ours belongs to (spec ../shared/spec/prudp.md §7).

An endpoint that drops a datagram tells a person why: "another access key" is the
answer only when the datagram *is* of our variant.  These helpers try the other
variants of the table with the same access key:

* :func:`datagram_variants`: the variants under which a datagram that ours could not
  decode (or whose checksum failed) decodes, checksums verified (the v1 framing has
  none: its magic and layout are the test).
* :func:`signature_variants`: for a packet our variant decoded but whose signature
  failed, the variants of the same wire layout whose signature rule gives the
  signature it carries (e.g. ``nintendo-v0`` and ``nintendo-v0-friends``).

Both return names in the table's order, and an empty tuple when no other variant
fits: the datagram is then of ours with another access key (or damaged).
"""

from __future__ import annotations

from protocols.errors import DecodeError
from protocols.prudp.codec import PacketCodec
from protocols.prudp.packet import PrudpPacket
from protocols.prudp.signatures import expected_signature
from protocols.prudp.variants import VARIANTS, Variant

__all__ = ["datagram_variants", "signature_variants"]


def datagram_variants(data: bytes, access_key: bytes, ours: Variant) -> tuple[str, ...]:
    """The other variants whose codec reads *data* with *access_key* (checksums verified)."""
    out = []
    for name, variant in VARIANTS.items():
        if variant == ours:
            continue
        try:
            PacketCodec(variant, access_key).decode(data)
        except DecodeError:
            continue
        out.append(name)
    return tuple(out)


def _same_layout(a: Variant, b: Variant) -> bool:
    return (a.framing, a.flags_bytes, a.checksum_bytes, a.fragment_id_bytes, a.type_swaps) == (
        b.framing, b.flags_bytes, b.checksum_bytes, b.fragment_id_bytes, b.type_swaps)  # fmt: skip


def signature_variants(
    packet: PrudpPacket,
    ours: Variant,
    access_key: bytes,
    *,
    session_key: bytes = b"",
    peer_signature: bytes | None = None,
) -> tuple[str, ...]:
    """The other variants, laid out on the wire as *ours* is, whose rule signs *packet* as it is signed."""
    out = []
    for name, variant in VARIANTS.items():
        if variant == ours or variant.signature_rule == ours.signature_rule or not _same_layout(variant, ours):
            continue
        sig = expected_signature(packet, variant, access_key, session_key=session_key, peer_signature=peer_signature)
        if sig == packet.signature:
            out.append(name)
    return tuple(out)
