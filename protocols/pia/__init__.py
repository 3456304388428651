"""Pia peer-to-peer protocol: version profiles, packet headers, messages and packets.

The packet layer is sans-IO: :class:`PacketCodec` turns :class:`Packet` values
into datagrams and back for one version and key.  See ../shared/spec/pia.md
§1-§3 and the module docstrings of :mod:`protocols.pia.header`,
:mod:`protocols.pia.message` and :mod:`protocols.pia.packet`.
"""

from __future__ import annotations

from protocols.pia.header import (
    HEADER_SIZES,
    HEADER_VERSIONS,
    MAGIC,
    PacketHeader,
    decode_header,
    encode_header,
    header_format_for_version,
    sniff_header_format,
)
from protocols.pia.message import (
    Message,
    decode_messages,
    deflate_payload,
    encode_messages,
    full_presence,
    inflate_payload,
)
from protocols.pia.packet import NonceBuilder, Packet, PacketCodec, PacketReport
from protocols.pia.versions import (
    DOCUMENTED_VERSIONS,
    Cipher,
    HeaderFormat,
    MessageFormat,
    NetworkType,
    Proto,
    VersionProfile,
    parse_version,
    profile_for,
)

__all__ = [
    "DOCUMENTED_VERSIONS",
    "HEADER_SIZES",
    "HEADER_VERSIONS",
    "MAGIC",
    "Cipher",
    "HeaderFormat",
    "Message",
    "MessageFormat",
    "NetworkType",
    "NonceBuilder",
    "Packet",
    "PacketCodec",
    "PacketHeader",
    "PacketReport",
    "Proto",
    "VersionProfile",
    "decode_header",
    "decode_messages",
    "deflate_payload",
    "encode_header",
    "encode_messages",
    "full_presence",
    "header_format_for_version",
    "inflate_payload",
    "parse_version",
    "profile_for",
    "sniff_header_format",
]
