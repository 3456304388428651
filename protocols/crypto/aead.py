"""AES-128-GCM behind one small interface, with two interchangeable backends.

* ``pycryptodome`` is always installed (a runtime dependency).
* ``cryptography`` is the optional fast backend (``pip install pianode[fast]``);
  :func:`gcm` picks it automatically when it can be imported.

Both produce identical bytes and accept the truncated 8-byte tags of Pia 5.23+
(an ordinary MSB-truncated GCM tag; spec §3.1).  Nonces are 12 bytes (every Pia
nonce is, spec §3.2).  A wrong key, nonce or tampered byte raises
:class:`~protocols.errors.AuthenticationError`, never garbage.

``seal_raw(nonce, pt, aad)`` is the packet codec's per-packet call: it
returns ``ciphertext || 16-byte tag`` in one object without argument checks
(for *cryptography* it is ``AESGCM.encrypt`` itself), and the caller slices
the tag to its length.  ``seal``/``open`` keep their checks and shapes.
The *cryptography* backend also offers ``open_raw`` (``AESGCM.decrypt``
itself: ``ciphertext || full 16-byte tag`` in, plaintext out, raising
``open_raw_error`` on a bad tag) for callers that check the nonce and tag
lengths themselves; :func:`open_raw` returns it, or None for pycryptodome.

Theory of operation
-------------------
GCM is CTR-mode encryption plus a GHASH over the ciphertext (NIST SP 800-38D)::

    J0 = nonce || 00000001;  keystream = E(nonce || 2), E(nonce || 3), ...
    ct = pt XOR keystream
    tag = E(J0) XOR GHASH_H(aad || pad || ct || pad || bitlen(aad) || bitlen(ct)),  H = E(0^128)

Everything that depends only on the key (the AES key schedule and the GHASH
multiplication table for H) is built once in the constructor and reused for
every packet.

*pycryptodome*: ``AES.new(key, MODE_GCM)`` per packet costs about 60 us,
almost all of it Python-level setup (three key schedules, a GHASH table
expansion; ../shared/perf-limits.md §1).  The fast path keeps one ECB cipher
and one expanded GHASH table per key, so a packet costs one ECB call over the
counter blocks ``J0, 2, 3, ...`` (a single C call whose first block doubles
as the tag mask), one XOR and one raw GHASH call (perf-limits §7).  These
calls go straight to pycryptodome's C functions through its *private*
internals (``_mode_ecb``, ``_mode_gcm``, ``_raw_api``); a known-answer
self-test (spec §8.2 D9 plus comparisons with ``AES.new`` for AAD and sizes
up to 1400 bytes) runs once per process
the first time a key is set up, and if the internals ever change shape or
disagree, every key silently uses plain ``AES.new`` instead.

*cryptography*: ``AESGCM`` with a reused key object is fast for full 16-byte
tags, but only accepts full tags on decryption.  For truncated tags we use
that CTR mode is its own inverse: ``AESGCM.encrypt`` of the ciphertext under
the same key and nonce returns the plaintext (plus a tag we ignore), and
encrypting that plaintext returns the ciphertext with its full tag, whose
prefix is compared in constant time.  Two calls into OpenSSL cost a few
microseconds less than the ECB-keystream variant (perf-limits §1, "cg
trick") and far less than a hazmat ``GCM(tag, min_tag_length=8)`` decryptor
built per packet.
"""

from __future__ import annotations

import functools
import hmac
import operator
import struct
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from protocols.errors import AuthenticationError, ConfigError

__all__ = [
    "BACKENDS",
    "GCM_MISMATCH",
    "Gcm",
    "available_backends",
    "default_backend",
    "gcm",
    "open_raw",
    "pycryptodome_fast_path_ok",
]

#: The message of the AuthenticationError raised for a tag that does not verify.
GCM_MISMATCH = _MISMATCH = "GCM tag mismatch (wrong key or tampered packet)"

# Counter suffixes for the ECB-built keystream: nonce.join(_COUNTERS[:k + 2])
# is J0 (counter 1) followed by the counter blocks 2 .. k + 1 of k data blocks.
_TABLE_BLOCKS = 4096  # 64 KiB of data; longer inputs build their counters on the fly
_COUNTERS = [b""] + [i.to_bytes(4, "big") for i in range(1, _TABLE_BLOCKS + 2)]
_ZERO_PAD = [bytes((16 - r) % 16) for r in range(16)]  # _ZERO_PAD[len % 16] pads to a block
_LENGTHS = struct.Struct(">QQ")
_MAX_BLOCKS = 0xFFFFFFFF - 1  # 32-bit block counter from 2 (SP 800-38D 5.2.1.1)
# Up to this size a Python int XOR beats a C call through the FFI (measured).
_INT_XOR_MAX = 384


def _counter_blocks(nonce: bytes, nblocks: int) -> bytes:
    """J0 followed by the counter blocks of *nblocks* data blocks (one bytes object)."""
    if nblocks <= _TABLE_BLOCKS:
        return nonce.join(_COUNTERS[: nblocks + 2])
    if nblocks > _MAX_BLOCKS:
        raise ConfigError("GCM input longer than 2**36 - 32 bytes")
    return nonce.join([b""] + [i.to_bytes(4, "big") for i in range(1, nblocks + 2)])


def _xor(data: bytes, stream: bytes) -> bytes:
    """XOR *data* with the first len(data) bytes of *stream*."""
    n = len(data)
    if not n:
        return b""
    return (int.from_bytes(data, "big") ^ int.from_bytes(stream[:n], "big")).to_bytes(n, "big")


def _check_nonce_for_seal(nonce: bytes) -> bytes:
    if len(nonce) != 12:
        raise ConfigError(f"GCM nonce must be 12 bytes, got {len(nonce)}")
    return nonce if type(nonce) is bytes else bytes(nonce)


def _check_tag_length(tag_length: int) -> None:
    if not 4 <= tag_length <= 16:
        raise ConfigError(f"GCM tag length must be 4..16 bytes, got {tag_length}")


class Gcm(Protocol):
    """AES-GCM with a fixed key; 12-byte nonces, no associated data by default."""

    backend: str

    def seal(self, nonce: bytes, plaintext: bytes, tag_length: int = 16, aad: bytes = b"") -> tuple[bytes, bytes]:
        """Encrypt; return ``(ciphertext, tag[:tag_length])``."""
        ...

    def open(self, nonce: bytes, ciphertext: bytes, tag: bytes, aad: bytes = b"") -> bytes:
        """Decrypt and verify a tag of 4 to 16 bytes; raise AuthenticationError."""
        ...

    def seal_raw(self, nonce: bytes, plaintext: bytes, aad: bytes | None) -> bytes:
        """Encrypt; return ``ciphertext || full 16-byte tag`` in one object.

        The per-packet path of the packet codec: no argument checks, so
        *nonce* must already be 12 ``bytes`` (the codec checks), and *aad*
        is passed positionally (None for none).  Truncating the tag is the
        caller's slice.
        """
        ...


# ---------------------------------------------------------------------------
# pycryptodome


class _FastGcmCore:
    """Per-key ECB key schedule + expanded GHASH table on pycryptodome internals.

    Calls pycryptodome's C functions (``ECB_encrypt``, ``ghash_*``) directly
    with buffers from its FFI layer (cffi, or ctypes when cffi is missing);
    the wrappers' per-call argument checks cost more than the crypto itself
    at packet sizes.
    """

    __slots__ = (
        "_ecb_fn",
        "_ecb_owner",
        "_ecb_state",
        "_ghash",
        "_ghash_owner",
        "_at",
        "_new",
        "_size_t",
        "_strxor",
        "_table",
        "_view",
        "_zero_y",
    )

    def __init__(self, key: bytes) -> None:
        from Crypto.Cipher import AES, _mode_ecb, _mode_gcm
        from Crypto.Util import _raw_api
        from Crypto.Util.strxor import _raw_strxor

        if _raw_api.backend == "cffi":
            ffi = _raw_api.ffi
            self._new: Callable[[int], Any] = functools.partial(ffi.new, "uint8_t[]")
            self._view: Callable[[Any], Any] = ffi.buffer
            self._at: Callable[[Any, int], Any] = operator.add  # a pointer *offset* bytes into a buffer
        else:
            import ctypes

            self._new = ctypes.create_string_buffer
            self._view = memoryview
            self._at = ctypes.byref
        self._size_t = _raw_api.c_size_t
        # The cipher and _GHASH objects own the C key schedule and table (freed
        # with them): keep both alive for as long as this core.
        self._ecb_owner = AES.new(key, AES.MODE_ECB)
        self._ecb_state = self._ecb_owner._state.get()
        self._ecb_fn = _mode_ecb.raw_ecb_lib.ECB_encrypt
        impl = _mode_gcm._ghash_clmul or _mode_gcm._ghash_portable
        self._ghash_owner = _mode_gcm._GHASH(self.ecb(bytes(16)), impl)  # type: ignore[no-untyped-call]
        self._table = self._ghash_owner._exp_key.get()
        self._ghash = impl.ghash
        self._zero_y = self._new(16)  # GHASH starts from Y = 0; never written
        self._strxor = _raw_strxor.strxor

    def ecb(self, blocks: bytes) -> bytes:
        """AES-ECB encrypt whole blocks."""
        n = len(blocks)
        out = self._new(n)  # fresh buffers per call: the core is safe to share between threads
        if self._ecb_fn(self._ecb_state, blocks, out, self._size_t(n)):
            raise ConfigError("pycryptodome ECB call failed")
        return bytes(self._view(out))

    def xor(self, data: bytes, ks: bytes) -> bytes:
        """*data* XOR the keystream that follows E(J0) in *ks*."""
        n = len(data)
        if n <= _INT_XOR_MAX:
            return _xor(data, ks[16:])
        out = self._new(n)
        self._strxor(data, ks[16 : 16 + n], out, self._size_t(n))
        return bytes(self._view(out))

    def tag(self, ks: bytes, aad: bytes, ct: bytes) -> bytes:
        """Full 16-byte tag: E(J0) XOR GHASH(aad, ct); *ks* starts with E(J0)."""
        na, nc = len(aad), len(ct)
        if na:
            data = b"".join((aad, _ZERO_PAD[na % 16], ct, _ZERO_PAD[nc % 16], _LENGTHS.pack(na * 8, nc * 8)))
        else:
            data = b"".join((ct, _ZERO_PAD[nc % 16], _LENGTHS.pack(0, nc * 8)))
        out = self._new(16)
        if self._ghash(out, data, self._size_t(len(data)), self._zero_y, self._table):
            raise ConfigError("pycryptodome GHASH call failed")
        s = bytes(self._view(out))
        return (int.from_bytes(s, "big") ^ int.from_bytes(ks[:16], "big")).to_bytes(16, "big")

    def keystream(self, nonce: bytes, n: int) -> bytes:
        """E(J0) followed by at least *n* bytes of CTR keystream."""
        return self.ecb(_counter_blocks(nonce, (n + 15) >> 4))

    def seal(self, nonce: bytes, plaintext: bytes, aad: bytes) -> tuple[bytes, bytes]:
        ks = self.keystream(nonce, len(plaintext))
        ct = self.xor(plaintext, ks)
        return ct, self.tag(ks, aad, ct)

    # -- many packets at once ------------------------------------------------
    # A frame to every station, or a batch of datagrams read in one go, is
    # many short packets under one key.  Per packet the C calls cost more than
    # the AES and GHASH work itself, so a batch makes one ECB call for all the
    # packets' counter blocks (every J0 first, then every packet's keystream,
    # each a whole number of blocks), one int XOR for all the data and one for
    # all the tag masks, and one GHASH call per packet into a shared output
    # buffer: about half the time of a call per packet at 88 bytes (timeit,
    # 31 packets).

    def _crypt_many(self, nonces: Sequence[bytes], datas: Sequence[bytes]) -> tuple[bytes, bytes, list[int]]:
        """(every E(J0), every data XOR its keystream padded to whole blocks, where each one's starts)."""
        k = len(nonces)
        j0 = _COUNTERS[1]
        counters = [nonce + j0 for nonce in nonces]
        starts, pos = [], 0
        for nonce, data in zip(nonces, datas, strict=True):
            nblocks = (len(data) + 15) >> 4
            starts.append(pos)
            pos += nblocks << 4
            if nblocks:
                counters.append(nonce + nonce.join(_COUNTERS[2 : nblocks + 2]) if nblocks <= _TABLE_BLOCKS else _counter_blocks(nonce, nblocks)[16:])
        ks = self.ecb(b"".join(counters))
        padded = b"".join([d + _ZERO_PAD[len(d) % 16] for d in datas])
        n = len(padded)
        if n <= _INT_XOR_MAX:
            mixed = (int.from_bytes(padded, "big") ^ int.from_bytes(ks[16 * k :], "big")).to_bytes(n, "big") if n else b""
        else:  # one C call for all of it
            out = self._new(n)
            self._strxor(padded, ks[16 * k :], out, self._size_t(n))
            mixed = bytes(self._view(out))
        return ks[: 16 * k], mixed, starts

    def _tags(self, masks: bytes, cts: Sequence[bytes]) -> bytes:
        """The full 16-byte tags of *cts* (no AAD), concatenated: each E(J0) in *masks* XOR GHASH(ct)."""
        k = len(cts)
        out = self._new(16 * k)
        ghash, size_t, zero_y, table, at = self._ghash, self._size_t, self._zero_y, self._table, self._at
        pack = _LENGTHS.pack
        for i, ct in enumerate(cts):
            nc = len(ct)
            data = b"".join((ct, _ZERO_PAD[nc % 16], pack(0, nc * 8)))
            if ghash(at(out, 16 * i), data, size_t(len(data)), zero_y, table):
                raise ConfigError("pycryptodome GHASH call failed")
        s = bytes(self._view(out))
        return (int.from_bytes(s, "big") ^ int.from_bytes(masks, "big")).to_bytes(16 * k, "big")

    def seal_many(self, nonces: Sequence[bytes], plaintexts: Sequence[bytes]) -> list[bytes]:
        """``ciphertext || 16-byte tag`` of each plaintext under its nonce (no AAD)."""
        masks, mixed, starts = self._crypt_many(nonces, plaintexts)
        cts = [mixed[at : at + len(p)] for p, at in zip(plaintexts, starts)]
        tags = self._tags(masks, cts)
        return [ct + tags[16 * i : 16 * i + 16] for i, ct in enumerate(cts)]

    def open_many(self, nonces: Sequence[bytes], cts: Sequence[bytes], tags: Sequence[bytes]) -> list[bytes | None]:
        """The plaintext of each ciphertext, or None where its tag (4 to 16 bytes) does not verify."""
        masks, mixed, starts = self._crypt_many(nonces, cts)
        full = self._tags(masks, cts)
        compare = hmac.compare_digest
        out: list[bytes | None] = []
        for i, (ct, tag, at) in enumerate(zip(cts, tags, starts, strict=True)):
            n = len(tag)
            if 4 <= n <= 16 and compare(full[16 * i : 16 * i + n], tag):
                out.append(mixed[at : at + len(ct)])
            else:
                out.append(None)
        return out


# Result of the once-per-process known-answer test (None: not run yet).
_fast_path_ok: bool | None = None


def _fast_self_test() -> bool:
    """Check the fast path against spec §8.2 D9 and against AES.new GCM."""
    from Crypto.Cipher import AES

    # D9: key = D4, nonce = D8, a 5.18 message area (tags are truncated by slicing).
    key = bytes.fromhex("9f1bba38de3b1df42ab5b29e7844d207")
    nonce = bytes.fromhex("c0a8010a2a02030405060708")
    pt = bytes.fromhex("1f010009680000000000000000000002c0a8010a0000c00068656c6c6f20706961000000") + b"\xff" * 12
    ct = bytes.fromhex(
        "503f31be9b808ca45ea7bf5527172f0c2705d0a93c1e471662a4ac5f28f7f43d0fa6d089d1fcdf45dee4c2d7912791f7"
    )
    tag = bytes.fromhex("778afaef4997d7fd9055bb15b24438d4")
    core = _FastGcmCore(key)
    if core.seal(nonce, pt, b"") != (ct, tag):
        return False
    # Edge sizes and AAD against pycryptodome's own GCM.
    cases = ((0, b""), (1, b""), (15, b"hdr"), (16, b""), (17, bytes(20)), (255, b"a" * 33), (1400, b""), (777, b"x"))
    for size, aad in cases:
        msg = (bytes(range(256)) * 6)[:size]
        ref = AES.new(key, AES.MODE_GCM, nonce=nonce)
        if aad:
            ref.update(aad)
        if core.seal(nonce, msg, aad) != ref.encrypt_and_digest(msg):
            return False
    # The batch calls against the one-packet calls (sizes across block boundaries, a bad tag, a short tag).
    nonces = [bytes([i]) * 12 for i in range(6)]
    plains = [(bytes(range(256)) * 6)[:size] for size in (0, 1, 16, 17, 88, 1400)]
    sealed = core.seal_many(nonces, plains)
    if sealed != [b"".join(core.seal(n, p, b"")) for n, p in zip(nonces, plains)]:
        return False
    cts = [s[:-16] for s in sealed]
    tags = [s[-16:] for s in sealed]
    tags[2] = bytes(16)
    tags[4] = tags[4][:8]
    if core.open_many(nonces, cts, tags) != [plains[0], plains[1], None, plains[3], plains[4], plains[5]]:
        return False
    return True


def pycryptodome_fast_path_ok() -> bool:
    """Whether pycryptodome keys use the per-key fast path (runs the self-test once)."""
    global _fast_path_ok
    if _fast_path_ok is None:
        try:
            _fast_path_ok = _fast_self_test()
        except Exception:  # any change in the private internals: fall back for good
            _fast_path_ok = False
    return _fast_path_ok


class _PycryptodomeGcm:
    backend = "pycryptodome"

    def __init__(self, key: bytes, *, fast: bool = True) -> None:
        from Crypto.Cipher import AES

        self._aes = AES
        self._key = bytes(key)
        self._core: _FastGcmCore | None = None
        if fast and pycryptodome_fast_path_ok():
            try:
                self._core = _FastGcmCore(self._key)
            except Exception:  # pragma: no cover - the self-test passed for another key
                self._core = None

    @property
    def fast(self) -> bool:
        """True when this key uses the per-key fast path, False for ``AES.new`` per packet."""
        return self._core is not None

    def seal(self, nonce: bytes, plaintext: bytes, tag_length: int = 16, aad: bytes = b"") -> tuple[bytes, bytes]:
        nonce = _check_nonce_for_seal(nonce)
        _check_tag_length(tag_length)
        core = self._core
        if core is not None:
            ct, tag = core.seal(nonce, plaintext, aad)
            return ct, tag[:tag_length]
        c = self._aes.new(self._key, self._aes.MODE_GCM, nonce=nonce, mac_len=16)
        if aad:
            c.update(aad)
        ct, tag = c.encrypt_and_digest(plaintext)
        return ct, tag[:tag_length]

    def seal_raw(self, nonce: bytes, plaintext: bytes, aad: bytes | None) -> bytes:
        core = self._core
        if core is not None:
            ct, tag = core.seal(nonce, plaintext, aad or b"")
            return ct + tag
        return b"".join(self.seal(nonce, plaintext, 16, aad or b""))

    @property
    def batched(self) -> bool:
        """Whether :meth:`seal_raw_many`/:meth:`open_raw_many` beat a call per packet (the fast path)."""
        return self._core is not None

    def seal_raw_many(self, nonces: Sequence[bytes], plaintexts: Sequence[bytes]) -> list[bytes]:
        """:meth:`seal_raw` (no AAD) of each plaintext under its nonce, in one batch.

        The nonces must be 12 ``bytes`` each (unchecked, as for ``seal_raw``)."""
        core = self._core
        if core is not None and len(nonces) > 1:
            return core.seal_many(nonces, plaintexts)
        return [self.seal_raw(n, p, None) for n, p in zip(nonces, plaintexts, strict=True)]

    def open_raw_many(self, nonces: Sequence[bytes], cts: Sequence[bytes], tags: Sequence[bytes]) -> list[bytes | None]:
        """:meth:`open` (no AAD) of each packet, in one batch: its plaintext, or None for a tag that
        does not verify.  The nonces must be 12 ``bytes`` each (unchecked)."""
        core = self._core
        if core is not None and len(nonces) > 1:
            return core.open_many(nonces, cts, tags)
        out: list[bytes | None] = []
        for n, c, t in zip(nonces, cts, tags, strict=True):
            try:
                out.append(self.open(n, c, t))
            except AuthenticationError:
                out.append(None)
        return out

    def open(self, nonce: bytes, ciphertext: bytes, tag: bytes, aad: bytes = b"") -> bytes:
        n = len(tag)
        if not 4 <= n <= 16:
            raise AuthenticationError(f"GCM tag of {n} bytes")
        if len(nonce) != 12:
            raise AuthenticationError(f"GCM nonce must be 12 bytes, got {len(nonce)}")
        core = self._core
        if core is not None:
            if type(nonce) is not bytes:
                nonce = bytes(nonce)
            ks = core.keystream(nonce, len(ciphertext))
            # Verify before decrypting: a forged packet costs no XOR.
            if not hmac.compare_digest(core.tag(ks, aad, ciphertext)[:n], tag):
                raise AuthenticationError(_MISMATCH)
            return core.xor(ciphertext, ks)
        c = self._aes.new(self._key, self._aes.MODE_GCM, nonce=nonce, mac_len=n)
        if aad:
            c.update(aad)
        try:
            return c.decrypt_and_verify(ciphertext, tag)
        except ValueError:
            raise AuthenticationError(_MISMATCH) from None


# ---------------------------------------------------------------------------
# cryptography


class _CryptographyGcm:
    backend = "cryptography"

    def __init__(self, key: bytes) -> None:
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM

        aesgcm = AESGCM(bytes(key))
        self._encrypt: Callable[[bytes, bytes, bytes | None], bytes] = aesgcm.encrypt
        # AESGCM.encrypt already returns ct || tag: the bound C method itself, no Python frame.
        self.seal_raw: Callable[[bytes, bytes, bytes | None], bytes] = aesgcm.encrypt
        self._decrypt: Callable[[bytes, bytes, bytes | None], bytes] = aesgcm.decrypt
        self._invalid_tag: type[Exception] = InvalidTag
        # The unchecked decrypt for full tags (see open_raw): the bound C method itself.
        self.open_raw: Callable[[bytes, bytes, bytes | None], bytes] = aesgcm.decrypt
        self.open_raw_error: type[Exception] = InvalidTag

    def seal(self, nonce: bytes, plaintext: bytes, tag_length: int = 16, aad: bytes = b"") -> tuple[bytes, bytes]:
        nonce = _check_nonce_for_seal(nonce)
        _check_tag_length(tag_length)
        out = self._encrypt(nonce, plaintext, aad or None)
        return out[:-16], out[-16 : len(out) - 16 + tag_length]

    def open(self, nonce: bytes, ciphertext: bytes, tag: bytes, aad: bytes = b"") -> bytes:
        n = len(tag)
        if len(nonce) != 12:
            raise AuthenticationError(f"GCM nonce must be 12 bytes, got {len(nonce)}")
        if n == 16:
            try:
                return self._decrypt(nonce, ciphertext + tag, aad or None)
            except self._invalid_tag:
                raise AuthenticationError(_MISMATCH) from None
        if not 4 <= n < 16:
            raise AuthenticationError(f"GCM tag of {n} bytes")
        # AESGCM.decrypt only takes full tags.  CTR mode is its own inverse, so
        # "encrypting" the ciphertext under the same key and nonce yields the
        # plaintext; encrypting that plaintext then reproduces the ciphertext
        # and its full tag, whose prefix we compare in constant time.
        nc = len(ciphertext)
        plaintext = self._encrypt(nonce, ciphertext, None)[:nc]
        full = self._encrypt(nonce, plaintext, aad or None)
        if not hmac.compare_digest(full[nc : nc + n], tag):
            raise AuthenticationError(_MISMATCH)
        return plaintext


BACKENDS: dict[str, Any] = {"pycryptodome": _PycryptodomeGcm, "cryptography": _CryptographyGcm}


def open_raw(aead: Gcm) -> tuple[Callable[[bytes, bytes, bytes | None], bytes], type[Exception]] | None:
    """``(decrypt, error)`` for unchecked full-tag opens on *aead*, or None when the backend has none.

    ``decrypt(nonce, ciphertext || 16-byte tag, aad or None)`` returns the
    plaintext or raises *error*; the caller guarantees a 12-byte ``bytes``
    nonce and a 16-byte tag, and turns *error* into
    ``AuthenticationError(GCM_MISMATCH)``.  Equal to ``aead.open`` under those
    conditions (for *cryptography*, ``open`` makes this very call).
    """
    fn = getattr(aead, "open_raw", None)
    err = getattr(aead, "open_raw_error", None)
    if fn is None or err is None:
        return None
    return fn, err


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
    if not isinstance(key, (bytes, bytearray)) or len(key) != 16:
        size = len(key) if isinstance(key, (bytes, bytearray, memoryview)) else type(key).__name__
        raise ConfigError(f"AES-128 key must be 16 bytes, got {size}")
    name = backend or default_backend()
    if name not in BACKENDS:
        raise ConfigError(f"unknown AEAD backend {name!r}; choose from {', '.join(BACKENDS)}")
    if name not in available_backends():
        raise ConfigError(f"AEAD backend {name!r} is not installed (pip install pianode[fast])")
    return BACKENDS[name](bytes(key))  # type: ignore[no-any-return]
