"""PRUDP, the reliable-UDP family: Nintendo v0/v1, Quazal v0 and the Rendez-Vous variant.

Sans-IO codecs (spec ../shared/spec/prudp.md).  Start with
:class:`~protocols.prudp.codec.PacketCodec` (one variant, one access key) or, for
captures, :func:`~protocols.prudp.codec.decode_datagram`.  Connection state
(sequence counters, RC4 streams, acks) lives in :mod:`pianode.prudp`.
"""

from __future__ import annotations

from protocols.prudp.codec import NexStream, PacketCodec, decode_datagram
from protocols.prudp.packet import Flag, PacketType, PrudpPacket, StreamType, flag_names, split_vport, vport
from protocols.prudp.variants import VARIANTS, Cipher, Framing, SignatureRule, Variant, nintendo_v0, variant_for

__all__ = [
    "VARIANTS",
    "Cipher",
    "Flag",
    "Framing",
    "NexStream",
    "PacketCodec",
    "PacketType",
    "PrudpPacket",
    "SignatureRule",
    "StreamType",
    "Variant",
    "decode_datagram",
    "flag_names",
    "nintendo_v0",
    "split_vport",
    "variant_for",
    "vport",
]
