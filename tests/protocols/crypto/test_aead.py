"""AES-GCM backends: spec §8.2 D9, the GCM spec's own vectors, truncated tags, tamper detection.

Every test runs on three engines: ``cryptography``, ``pycryptodome`` (per-key
fast path) and ``pycryptodome`` forced onto plain ``AES.new`` per packet (the
fallback used when its private internals change).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import protocols.crypto.aead as aead
from protocols.crypto.aead import Gcm, gcm, pycryptodome_fast_path_ok
from protocols.errors import AuthenticationError, ConfigError, DecodeError

ENGINES: dict[str, Callable[[bytes], Gcm]] = {
    "cryptography": lambda key: gcm(key, "cryptography"),
    "pycryptodome": lambda key: gcm(key, "pycryptodome"),
    "pycryptodome-aes-new": lambda key: aead._PycryptodomeGcm(key, fast=False),
}


@pytest.fixture(params=list(ENGINES))
def make(request: pytest.FixtureRequest) -> Callable[[bytes], Gcm]:
    return ENGINES[request.param]


# §8.2 D9: key = D4, nonce = D8, a 5.18 message area padded with 0xFF.
D9_KEY = bytes.fromhex("9f1bba38de3b1df42ab5b29e7844d207")
D9_NONCE = bytes.fromhex("c0a8010a2a02030405060708")
D9_PT = bytes.fromhex("1f010009680000000000000000000002c0a8010a0000c00068656c6c6f20706961000000") + b"\xff" * 12
D9_CT = bytes.fromhex(
    "503f31be9b808ca45ea7bf5527172f0c2705d0a93c1e471662a4ac5f28f7f43d0fa6d089d1fcdf45dee4c2d7912791f7"
)
D9_TAG = bytes.fromhex("778afaef4997d7fd9055bb15b24438d4")


def test_d9_full_tag(make: Callable[[bytes], Gcm]) -> None:
    g = make(D9_KEY)
    assert g.seal(D9_NONCE, D9_PT) == (D9_CT, D9_TAG)
    assert g.open(D9_NONCE, D9_CT, D9_TAG) == D9_PT


def test_d9_eight_byte_tag(make: Callable[[bytes], Gcm]) -> None:
    g = make(D9_KEY)
    assert g.seal(D9_NONCE, D9_PT, tag_length=8) == (D9_CT, bytes.fromhex("778afaef4997d7fd"))
    assert g.open(D9_NONCE, D9_CT, bytes.fromhex("778afaef4997d7fd")) == D9_PT


# The GCM specification's AES-128 test cases 1-4 (McGrew & Viega, appendix B).
GCM_SPEC_KEY = bytes.fromhex("feffe9928665731c6d6a8f9467308308")
GCM_SPEC_IV = bytes.fromhex("cafebabefacedbaddecaf888")
GCM_SPEC_PT = bytes.fromhex(
    "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a72"
    "1c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b391aafd255"
)
GCM_SPEC_CT = bytes.fromhex(
    "42831ec2217774244b7221b784d0d49ce3aa212f2c02a4e035c17e2329aca12e"
    "21d514b25466931c7d8f6a5aac84aa051ba30b396a0aac973d58e091473f5985"
)


@pytest.mark.parametrize(
    ("key", "nonce", "pt", "aad", "ct", "tag"),
    [
        (bytes(16), bytes(12), b"", b"", b"", "58e2fccefa7e3061367f1d57a4e7455a"),
        (
            bytes(16),
            bytes(12),
            bytes(16),
            b"",
            bytes.fromhex("0388dace60b6a392f328c2b971b2fe78"),
            "ab6e47d42cec13bdf53a67b21257bddf",
        ),
        (GCM_SPEC_KEY, GCM_SPEC_IV, GCM_SPEC_PT, b"", GCM_SPEC_CT, "4d5c2af327cd64a62cf35abd2ba6fab4"),
        (
            GCM_SPEC_KEY,
            GCM_SPEC_IV,
            GCM_SPEC_PT[:60],
            bytes.fromhex("feedfacedeadbeeffeedfacedeadbeefabaddad2"),
            GCM_SPEC_CT[:60],
            "5bc94fbc3221a5db94fae95ae7121a47",
        ),
    ],
    ids=["case1-empty", "case2-one-block", "case3", "case4-aad"],
)
def test_gcm_spec_vectors(
    make: Callable[[bytes], Gcm], key: bytes, nonce: bytes, pt: bytes, aad: bytes, ct: bytes, tag: str
) -> None:
    g = make(key)
    assert g.seal(nonce, pt, aad=aad) == (ct, bytes.fromhex(tag))
    assert g.open(nonce, ct, bytes.fromhex(tag), aad=aad) == pt
    assert g.open(nonce, ct, bytes.fromhex(tag)[:8], aad=aad) == pt
    with pytest.raises(AuthenticationError):
        g.open(nonce, ct, bytes.fromhex(tag), aad=aad + b"!")


# ---------------------------------------------------------------------------
# Forgeries


@pytest.mark.parametrize("tag_length", [16, 8])
def test_tampered_ciphertext_is_rejected(make: Callable[[bytes], Gcm], tag_length: int) -> None:
    g = make(D9_KEY)
    ct, tag = g.seal(D9_NONCE, D9_PT, tag_length)
    for i in (0, 17, len(ct) - 1):
        bad = bytearray(ct)
        bad[i] ^= 0x01
        with pytest.raises(AuthenticationError):
            g.open(D9_NONCE, bytes(bad), tag)
    with pytest.raises(AuthenticationError):
        g.open(D9_NONCE, ct[:-1], tag)  # truncated
    with pytest.raises(AuthenticationError):
        g.open(D9_NONCE, ct + b"\x00", tag)  # extended


@pytest.mark.parametrize("tag_length", [16, 8])
def test_tampered_tag_wrong_key_wrong_nonce(make: Callable[[bytes], Gcm], tag_length: int) -> None:
    g = make(D9_KEY)
    ct, tag = g.seal(D9_NONCE, D9_PT, tag_length)
    with pytest.raises(AuthenticationError):
        g.open(D9_NONCE, ct, bytes([tag[0] ^ 0x80]) + tag[1:])
    with pytest.raises(AuthenticationError):
        make(bytes(16)).open(D9_NONCE, ct, tag)
    with pytest.raises(AuthenticationError):
        g.open(bytes(12), ct, tag)


def test_empty_plaintext_with_truncated_tag(make: Callable[[bytes], Gcm]) -> None:
    g = make(D9_KEY)
    ct, tag = g.seal(D9_NONCE, b"", 8)
    assert ct == b""
    assert len(tag) == 8
    assert g.open(D9_NONCE, b"", tag) == b""
    with pytest.raises(AuthenticationError):
        g.open(D9_NONCE, b"", bytes(8))


def test_tag_and_nonce_size_checks(make: Callable[[bytes], Gcm]) -> None:
    g = make(D9_KEY)
    ct, tag = g.seal(D9_NONCE, D9_PT)
    for bad_tag in (b"", tag[:3], tag + b"\x00"):
        with pytest.raises(AuthenticationError):
            g.open(D9_NONCE, ct, bad_tag)
    with pytest.raises(AuthenticationError):
        g.open(D9_NONCE[:11], ct, tag)
    with pytest.raises(ConfigError):
        g.seal(D9_NONCE, D9_PT, tag_length=3)
    with pytest.raises(ConfigError):
        g.seal(D9_NONCE[:8], D9_PT)
    assert issubclass(AuthenticationError, DecodeError)


def test_gcm_factory_checks() -> None:
    with pytest.raises(ConfigError):
        gcm(bytes(15))
    with pytest.raises(ConfigError):
        gcm(bytes(32))
    with pytest.raises(ConfigError):
        gcm(bytes(16), "no-such-backend")
    assert gcm(bytes(16)).backend == aead.default_backend()


# ---------------------------------------------------------------------------
# All sizes a Pia datagram can have; every engine against the others


def test_sizes_0_to_1500_agree_across_engines() -> None:
    key = bytes(range(16, 32))
    engines = {name: factory(key) for name, factory in ENGINES.items()}
    data = bytes((i * 37 + 11) & 0xFF for i in range(1500))
    for size in range(1501):
        nonce = size.to_bytes(4, "big") + b"\xa5" * 8
        pt = data[:size]
        sealed = {name: g.seal(nonce, pt) for name, g in engines.items()}
        ct, tag = sealed["cryptography"]
        assert len(ct) == size
        assert sealed["pycryptodome"] == (ct, tag), size
        assert sealed["pycryptodome-aes-new"] == (ct, tag), size
        for g in engines.values():
            assert g.open(nonce, ct, tag[:8]) == pt


@settings(max_examples=150, deadline=None)
@given(
    key=st.binary(min_size=16, max_size=16),
    nonce=st.binary(min_size=12, max_size=12),
    pt=st.binary(max_size=1500),
    aad=st.binary(max_size=40),
    tag_length=st.sampled_from([16, 12, 8, 4]),
)
def test_backends_agree(key: bytes, nonce: bytes, pt: bytes, aad: bytes, tag_length: int) -> None:
    outputs = {name: factory(key).seal(nonce, pt, tag_length, aad) for name, factory in ENGINES.items()}
    assert len(set(outputs.values())) == 1
    ct, tag = outputs["cryptography"]
    for factory in ENGINES.values():
        assert factory(key).open(nonce, ct, tag, aad) == pt


@settings(max_examples=150, deadline=None)
@given(ct=st.binary(max_size=200), tag=st.binary(max_size=20), nonce=st.binary(min_size=12, max_size=12))
def test_garbage_opens_to_authentication_error_only(ct: bytes, tag: bytes, nonce: bytes) -> None:
    for factory in ENGINES.values():
        with pytest.raises(AuthenticationError):
            factory(D9_KEY).open(nonce, ct, tag)


# ---------------------------------------------------------------------------
# The pycryptodome fast path and its guard


def test_fast_path_is_active_on_this_install() -> None:
    # If this fails after a pycryptodome upgrade the code still works (it
    # falls back to AES.new), but the per-packet cost grows about tenfold.
    assert pycryptodome_fast_path_ok()
    assert gcm(D9_KEY, "pycryptodome").fast  # type: ignore[attr-defined]


def test_broken_internals_fall_back_to_aes_new(monkeypatch: pytest.MonkeyPatch) -> None:
    # The fast path also reaches pycryptodome's raw XOR; AES.new GCM does not.
    import Crypto.Util.strxor

    monkeypatch.setattr(aead, "_fast_path_ok", None)
    monkeypatch.delattr(Crypto.Util.strxor, "_raw_strxor")
    assert not pycryptodome_fast_path_ok()
    g = gcm(D9_KEY, "pycryptodome")
    assert not g.fast  # type: ignore[attr-defined]
    assert g.seal(D9_NONCE, D9_PT) == (D9_CT, D9_TAG)


def test_disagreeing_internals_fall_back_to_aes_new(monkeypatch: pytest.MonkeyPatch) -> None:
    real_tag = aead._FastGcmCore.tag

    def off_by_one(self: aead._FastGcmCore, ks: bytes, aad: bytes, ct: bytes) -> bytes:
        t = real_tag(self, ks, aad, ct)
        return bytes([t[0] ^ 1]) + t[1:]

    monkeypatch.setattr(aead, "_fast_path_ok", None)
    monkeypatch.setattr(aead._FastGcmCore, "tag", off_by_one)
    assert not pycryptodome_fast_path_ok()
    g = gcm(D9_KEY, "pycryptodome")
    assert not g.fast  # type: ignore[attr-defined]
    assert g.open(D9_NONCE, D9_CT, D9_TAG[:8]) == D9_PT


def test_fast_path_with_the_portable_ghash(monkeypatch: pytest.MonkeyPatch) -> None:
    # CPUs without carry-less multiply get pycryptodome's table-driven GHASH.
    from Crypto.Cipher import _mode_gcm

    monkeypatch.setattr(_mode_gcm, "_ghash_clmul", None)
    core = aead._FastGcmCore(D9_KEY)
    assert core.seal(D9_NONCE, D9_PT, b"") == (D9_CT, D9_TAG)


def test_inputs_beyond_the_counter_table(make: Callable[[bytes], Gcm]) -> None:
    # More blocks than the precomputed counter suffixes cover (64 KiB).
    pt = bytes(range(256)) * 300  # 76,800 bytes
    ref = aead._PycryptodomeGcm(D9_KEY, fast=False).seal(D9_NONCE, pt, 8)
    g = make(D9_KEY)
    assert g.seal(D9_NONCE, pt, 8) == ref
    assert g.open(D9_NONCE, *ref) == pt


def test_fast_path_on_the_ctypes_ffi() -> None:
    # pycryptodome uses ctypes when cffi cannot be imported; the fast path
    # must pass its self-test there too.
    script = textwrap.dedent(
        f"""
        import sys
        sys.modules["cffi"] = None
        from Crypto.Util import _raw_api
        assert _raw_api.backend == "ctypes", _raw_api.backend
        from protocols.crypto.aead import gcm, pycryptodome_fast_path_ok
        assert pycryptodome_fast_path_ok()
        g = gcm(bytes.fromhex("{D9_KEY.hex()}"), "pycryptodome")
        assert g.fast
        ct, tag = g.seal(bytes.fromhex("{D9_NONCE.hex()}"), bytes.fromhex("{D9_PT.hex()}"))
        assert (ct.hex(), tag.hex()) == ("{D9_CT.hex()}", "{D9_TAG.hex()}")
        big = bytes(1400)
        ct, tag = g.seal(bytes(12), big, 8)
        assert g.open(bytes(12), ct, tag) == big
        nonces, plains = [bytes([i]) * 12 for i in range(3)], [bytes(5), bytes(88), big]
        sealed = g.seal_raw_many(nonces, plains)
        assert sealed == [g.seal_raw(n, p, None) for n, p in zip(nonces, plains)]
        assert g.open_raw_many(nonces, [s[:-16] for s in sealed], [s[-16:] for s in sealed]) == plains
        print("ok")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


# ---------------------------------------------------------------- many packets in one call

BATCH_ENGINES = ("pycryptodome", "pycryptodome-aes-new")


@settings(max_examples=120, deadline=None)
@given(
    key=st.binary(min_size=16, max_size=16),
    packets=st.lists(st.tuples(st.binary(min_size=12, max_size=12), st.binary(max_size=300)), min_size=1, max_size=12),
    spoil=st.lists(st.integers(0, 11), max_size=4),
    tag_length=st.sampled_from([16, 12, 8, 4]),
)
def test_a_batch_seals_and_opens_as_its_packets_one_by_one(
    key: bytes, packets: list[tuple[bytes, bytes]], spoil: list[int], tag_length: int
) -> None:
    nonces = [n for n, _ in packets]
    plains = [p for _, p in packets]
    for engine in BATCH_ENGINES:
        g = ENGINES[engine](key)
        assert engine != "pycryptodome" or g.batched  # type: ignore[attr-defined]
        sealed = g.seal_raw_many(nonces, plains)  # type: ignore[attr-defined]
        assert sealed == [g.seal_raw(n, p, None) for n, p in packets]
        cts = [s[:-16] for s in sealed]
        tags = [s[-16:][:tag_length] for s in sealed]
        bad = {i for i in spoil if i < len(tags)}
        for i in bad:
            tags[i] = bytes(b ^ 1 for b in tags[i])
        want = []
        for i, (n, c, t) in enumerate(zip(nonces, cts, tags)):
            try:
                want.append(g.open(n, c, t))
            except AuthenticationError:
                want.append(None)
        assert [w is None for w in want] == [i in bad for i in range(len(tags))]
        assert g.open_raw_many(nonces, cts, tags) == want  # type: ignore[attr-defined]


def test_a_batch_on_the_portable_ghash(monkeypatch: pytest.MonkeyPatch) -> None:
    from Crypto.Cipher import _mode_gcm

    monkeypatch.setattr(_mode_gcm, "_ghash_clmul", None)
    core = aead._FastGcmCore(D9_KEY)
    assert core.seal_many([D9_NONCE, bytes(12)], [D9_PT, b"x"]) == [D9_CT + D9_TAG, b"".join(core.seal(bytes(12), b"x", b""))]


def test_the_self_test_rejects_a_batch_that_disagrees(monkeypatch: pytest.MonkeyPatch) -> None:
    # A batch that gave other bytes than one packet at a time would switch the fast path off.
    monkeypatch.setattr(aead._FastGcmCore, "seal_many", lambda self, nonces, plains: [b"" for _ in plains])
    assert aead._fast_self_test() is False
