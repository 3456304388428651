"""PRUDP payload transforms: the zlib ratio byte, RC4 (NEX and Quazal), AES-128-CBC (Rendez-Vous).

Send order is fragment → (suffix) → compress → encrypt; receive order is the
reverse (spec ../shared/spec/prudp.md §2.8, §3.5, §4.4-§4.5).

* Ratio byte: ``ratio ‖ zlib(fragment)``, ratio 0 meaning "stored".  We send
  ``⌊plain/compressed⌋ + 1`` (the value the reference client checks, spec §2.8)
  and fall back to ratio 0 when zlib does not shrink the data or the ratio would
  not fit a byte.  Receivers only test for zero (spec §3.5, §6.10 item 6).
* NEX RC4: one continuous keystream per direction and substream
  (:class:`Rc4Stream`); substream n > 0 derives its key from n-1; unreliable v1
  DATA uses a per-packet key (spec §2.8).
* Quazal RC4: ``"CD&ML"`` freshly keyed for every payload (spec §3.5).
* Rendez-Vous: ``IV ‖ AES-128-CBC(k, IV, PKCS#7(data))`` (spec §4.4-§4.5), and a
  u16 sequence-id suffix after each fragment (spec §4.4 step 2).
"""

from __future__ import annotations

import hashlib
import struct
import zlib

from Crypto.Cipher import AES, ARC4

from protocols.errors import BadValue, ConfigError, DecodeError, ShortData

__all__ = [
    "QUAZAL_KEY",
    "Rc4Stream",
    "add_ratio",
    "add_sequence_suffix",
    "aes_cbc_open",
    "aes_cbc_seal",
    "derive_substream_key",
    "quazal_rc4",
    "strip_ratio",
    "strip_sequence_suffix",
    "unreliable_base_key",
    "unreliable_packet_key",
]

QUAZAL_KEY = b"CD&ML"
_UNRELIABLE_SALTS = (bytes.fromhex("18d8233437e4e3fe"), bytes.fromhex("233e600123cdab80"))  # spec §2.8
MAX_INFLATE = 1 << 20  # bound for one fragment's decompression (zip-bomb guard, spec §4.5 step 6)


def add_ratio(data: bytes, *, compress: bool = True, level: int = -1) -> bytes:
    """Prefix the ratio byte, compressing *data* when that helps."""
    if compress and data:
        packed = zlib.compress(data, level)
        ratio = len(data) // len(packed) + 1
        if len(packed) < len(data) and ratio <= 255:
            return bytes([ratio]) + packed
    return b"\x00" + data


def strip_ratio(data: bytes, limit: int = MAX_INFLATE) -> bytes:
    """Undo :func:`add_ratio`: ratio 0 → stored, otherwise zlib (bounded by *limit*)."""
    if not data:
        raise ShortData("payload has no compression-ratio byte")
    if data[0] == 0:
        return data[1:]
    d = zlib.decompressobj()
    try:
        out = d.decompress(data[1:], limit)
    except zlib.error as exc:
        raise BadValue(f"zlib payload does not inflate: {exc}") from None
    if d.unconsumed_tail:
        raise BadValue(f"zlib payload inflates beyond {limit} bytes")
    if not d.eof:
        raise BadValue("zlib payload is truncated")
    if d.unused_data:
        raise BadValue("bytes after the end of the zlib stream")
    return out


class Rc4Stream:
    """One RC4 keystream that carries over from packet to packet (NEX reliable DATA)."""

    def __init__(self, key: bytes) -> None:
        if not 1 <= len(key) <= 256:
            raise ConfigError(f"RC4 key must be 1..256 bytes, got {len(key)}")
        self._rc4 = ARC4.new(key)

    def process(self, data: bytes) -> bytes:
        return self._rc4.encrypt(data) if data else b""


def quazal_rc4(data: bytes, key: bytes = QUAZAL_KEY) -> bytes:
    """Quazal's per-payload RC4 (encryption and decryption are the same operation)."""
    return ARC4.new(key).encrypt(data) if data else b""


def derive_substream_key(key: bytes) -> bytes:
    """The RC4 key of substream n+1 from that of substream n (spec §2.8)."""
    out = bytearray(key)
    half = len(key) // 2
    for i in range(half):
        out[i] = (out[i] + half + 1 - i) & 0xFF
    return bytes(out)


def unreliable_base_key(session_key: bytes | None) -> bytes:
    """The 32-byte base key of v1 unreliable DATA; all zeros before a session key exists (spec §2.8)."""
    if not session_key:
        return bytes(32)
    return b"".join(hashlib.md5(session_key + salt).digest() for salt in _UNRELIABLE_SALTS)


def unreliable_packet_key(base: bytes, sequence_id: int, session_id: int) -> bytes:
    key = bytearray(base)
    key[0] = (key[0] + (sequence_id & 0xFF)) & 0xFF
    key[1] = (key[1] + (sequence_id >> 8)) & 0xFF
    key[31] = (key[31] + session_id) & 0xFF
    return bytes(key)


def aes_cbc_seal(key: bytes, plaintext: bytes, iv: bytes) -> bytes:
    """``IV ‖ AES-128-CBC(key, IV, PKCS#7(plaintext))`` (spec §4.4 step 4)."""
    if len(key) != 16 or len(iv) != 16:
        raise ConfigError("AES-128-CBC needs a 16-byte key and a 16-byte IV")
    pad = 16 - len(plaintext) % 16
    return iv + AES.new(key, AES.MODE_CBC, iv).encrypt(plaintext + bytes([pad]) * pad)


def aes_cbc_open(key: bytes, data: bytes) -> bytes:
    """Undo :func:`aes_cbc_seal`; bad lengths or padding raise :class:`DecodeError` (spec §4.5)."""
    if len(key) != 16:
        raise ConfigError("AES-128-CBC needs a 16-byte key")
    if len(data) < 32 or len(data) % 16:
        raise BadValue(f"AES-CBC payload of {len(data)} bytes is not IV + a positive number of blocks")
    plain = AES.new(key, AES.MODE_CBC, data[:16]).decrypt(data[16:])
    pad = plain[-1]
    if not 1 <= pad <= 16 or plain[-pad:] != bytes([pad]) * pad:
        raise DecodeError("bad PKCS#7 padding: wrong key or damaged payload")
    return plain[:-pad]


def add_sequence_suffix(fragment: bytes, sequence_id: int) -> bytes:
    """Rendez-Vous: each fragment is followed by its packet's u16 sequence id (spec §4.4 step 2)."""
    return fragment + struct.pack("<H", sequence_id)


def strip_sequence_suffix(data: bytes, sequence_id: int) -> bytes:
    if len(data) < 2:
        raise ShortData("fragment shorter than its sequence-id suffix")
    (suffix,) = struct.unpack_from("<H", data, len(data) - 2)
    if suffix != sequence_id:
        raise BadValue(f"fragment suffix {suffix} does not match the packet's sequence id {sequence_id}")
    return data[:-2]
