"""The Internet checksum (RFC 1071) for the IP and UDP headers that tests build by hand."""

from __future__ import annotations


def internet_checksum(data: bytes) -> int:
    """The ones' complement of the ones' complement sum of *data*'s 16-bit words (odd length: zero-padded)."""
    if len(data) % 2:
        data += b"\0"
    s = sum(int.from_bytes(data[i : i + 2], "big") for i in range(0, len(data), 2))
    while s > 0xFFFF:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF
