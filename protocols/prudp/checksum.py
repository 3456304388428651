"""PRUDP v0-family checksums (spec ../shared/spec/prudp.md §2.4, §3.3, §4.6).

Both forms cover every byte of the packet before the checksum, and the access
key enters only as ``sum(access_key) mod 256`` (so a single captured packet
reveals that byte, spec §2.4):

* 1-byte form (NEX default, Quazal): sum the full little-endian u32 words mod
  2**32, then add the four bytes of that sum, the 0-3 leftover bytes and the key
  byte; keep the low 8 bits.
* 4-byte form (some Rendez-Vous titles, the seed-000 variant with key byte 0):
  zero-pad to a multiple of 4, sum the u32 words plus the key byte mod 2**32.
"""

from __future__ import annotations

import struct

__all__ = ["checksum", "checksum_1", "checksum_4", "key_byte"]


def key_byte(access_key: bytes) -> int:
    """The only part of the access key the checksum uses."""
    return sum(access_key) & 0xFF


def _word_sum(data: bytes) -> int:
    words: tuple[int, ...] = struct.unpack_from(f"<{len(data) // 4}I", data)
    return sum(words) & 0xFFFFFFFF


def checksum_1(data: bytes, key: int) -> int:
    full = len(data) & ~3
    total = _word_sum(data[:full])
    return (key + sum(data[full:]) + sum(total.to_bytes(4, "little"))) & 0xFF


def checksum_4(data: bytes, key: int) -> int:
    padded = data + bytes(-len(data) % 4)
    return (key + _word_sum(padded)) & 0xFFFFFFFF


def checksum(data: bytes, key: int, size: int) -> int:
    """Checksum of *size* bytes (1 or 4) over *data* with key byte *key*."""
    return checksum_1(data, key) if size == 1 else checksum_4(data, key)
