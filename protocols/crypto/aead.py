"""AES-128-GCM behind one small interface, with two interchangeable backends.

* ``pycryptodome`` is always installed (a runtime dependency).
* ``cryptography`` is the optional fast backend (``pip install pianode[fast]``);
  :func:`gcm` picks it automatically when it can be imported.

Both produce identical bytes and accept the truncated 8-byte tags of Pia 5.23+
(an ordinary MSB-truncated GCM tag; spec §3.1).  Per-key state is built once in
the constructor and reused for every packet.  A wrong key, nonce or tampered
byte raises :class:`~protocols.errors.AuthenticationError`, never garbage.
"""

from __future__ import annotations

import hmac
from typing import Protocol

from protocols.errors import AuthenticationError, ConfigError

__all__ = ["BACKENDS", "Gcm", "available_backends", "default_backend", "gcm"]


class Gcm(Protocol):
    """AES-GCM with a fixed key; 12-byte nonces, no associated data by default."""

    backend: str

    def seal(self, nonce: bytes, plaintext: bytes, tag_length: int = 16, aad: bytes = b"") -> tuple[bytes, bytes]:
        """Encrypt; return ``(ciphertext, tag[:tag_length])``."""
        ...

    def open(self, nonce: bytes, ciphertext: bytes, tag: bytes, aad: bytes = b"") -> bytes:
        """Decrypt and verify a tag of 8 to 16 bytes; raise AuthenticationError."""
        ...


class _PycryptodomeGcm:
    backend = "pycryptodome"

    def __init__(self, key: bytes) -> None:
        from Crypto.Cipher import AES

        self._aes = AES
        self._key = bytes(key)

    def seal(self, nonce: bytes, plaintext: bytes, tag_length: int = 16, aad: bytes = b"") -> tuple[bytes, bytes]:
        c = self._aes.new(self._key, self._aes.MODE_GCM, nonce=nonce, mac_len=16)
        if aad:
            c.update(aad)
        ct, tag = c.encrypt_and_digest(plaintext)
        return ct, tag[:tag_length]

    def open(self, nonce: bytes, ciphertext: bytes, tag: bytes, aad: bytes = b"") -> bytes:
        if not 4 <= len(tag) <= 16:
            raise AuthenticationError(f"GCM tag of {len(tag)} bytes")
        c = self._aes.new(self._key, self._aes.MODE_GCM, nonce=nonce, mac_len=len(tag))
        if aad:
            c.update(aad)
        try:
            return c.decrypt_and_verify(ciphertext, tag)  # type: ignore[no-any-return]
        except ValueError:
            raise AuthenticationError("GCM tag mismatch (wrong key or tampered packet)") from None


class _CryptographyGcm:
    backend = "cryptography"

    def __init__(self, key: bytes) -> None:
        from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        self._aesgcm = AESGCM(bytes(key))
        # Keystream source for truncated tags: CTR blocks from counter 2 (J0 + 1).
        self._ecb = Cipher(algorithms.AES(bytes(key)), modes.ECB()).encryptor()
        self._invalid_tag: type[Exception]
        from cryptography.exceptions import InvalidTag

        self._invalid_tag = InvalidTag

    def seal(self, nonce: bytes, plaintext: bytes, tag_length: int = 16, aad: bytes = b"") -> tuple[bytes, bytes]:
        out = self._aesgcm.encrypt(nonce, plaintext, aad or None)
        return out[:-16], out[-16 : len(out) - 16 + tag_length]

    def open(self, nonce: bytes, ciphertext: bytes, tag: bytes, aad: bytes = b"") -> bytes:
        n = len(tag)
        if n == 16:
            try:
                return self._aesgcm.decrypt(nonce, ciphertext + tag, aad or None)
            except self._invalid_tag:
                raise AuthenticationError("GCM tag mismatch (wrong key or tampered packet)") from None
        if not 4 <= n < 16:
            raise AuthenticationError(f"GCM tag of {n} bytes")
        # AESGCM.decrypt only takes full tags.  Decrypt with the CTR keystream,
        # re-seal the recovered plaintext (same key and nonce give the same
        # ciphertext) and compare the tag prefix in constant time.
        plaintext = self._ctr(nonce, ciphertext)
        full = self._aesgcm.encrypt(nonce, plaintext, aad or None)
        if not hmac.compare_digest(full[-16 : len(full) - 16 + n], tag):
            raise AuthenticationError("GCM tag mismatch (wrong key or tampered packet)")
        return plaintext

    def _ctr(self, nonce: bytes, data: bytes) -> bytes:
        if len(nonce) != 12:
            raise AuthenticationError("GCM nonce must be 12 bytes for the truncated-tag path")
        nblocks = (len(data) + 15) // 16
        counters = b"".join(nonce + (i + 2).to_bytes(4, "big") for i in range(nblocks))
        ks = self._ecb.update(counters)
        n = len(data)
        return (int.from_bytes(data, "big") ^ int.from_bytes(ks[:n], "big")).to_bytes(n, "big")


BACKENDS = {"pycryptodome": _PycryptodomeGcm, "cryptography": _CryptographyGcm}


def available_backends() -> list[str]:
    names = ["pycryptodome"]
    try:
        import cryptography.hazmat.primitives.ciphers.aead  # noqa: F401
    except ImportError:
        pass
    else:
        names.insert(0, "cryptography")
    return names


def default_backend() -> str:
    return available_backends()[0]


def gcm(key: bytes, backend: str | None = None) -> Gcm:
    """Return an AES-GCM object for *key* on *backend* (default: the fastest installed)."""
    if len(key) != 16:
        raise ConfigError(f"AES-128 key must be 16 bytes, got {len(key)}")
    name = backend or default_backend()
    if name not in BACKENDS:
        raise ConfigError(f"unknown AEAD backend {name!r}; choose from {', '.join(BACKENDS)}")
    if name not in available_backends():
        raise ConfigError(f"AEAD backend {name!r} is not installed (pip install pianode[fast])")
    return BACKENDS[name](key)  # type: ignore[no-any-return]
