"""Whole Pia datagrams (spec §1, §2.4, §3.1): D9 byte exact, ECB+HMAC, GCM, footers, error paths."""

from __future__ import annotations

import hashlib
import hmac

import attrs
import pytest
from cryptography.hazmat.primitives.ciphers import Cipher as CgCipher
from cryptography.hazmat.primitives.ciphers import algorithms, modes
from hypothesis import given, settings
from hypothesis import strategies as st
from pia_type_strategies import u8, u16, u32

from protocols.crypto.aead import available_backends
from protocols.errors import AuthenticationError, BadValue, ConfigError, DecodeError, EncodeError, ShortData
from protocols.pia import (
    DOCUMENTED_VERSIONS,
    HeaderFormat,
    Message,
    MessageFormat,
    Packet,
    PacketCodec,
    PacketHeader,
    VersionProfile,
    profile_for,
)

# spec §8.2: D4 session key, D8 nonce, D9 packet.
D4_KEY = bytes.fromhex("9f1bba38de3b1df42ab5b29e7844d207")
D8_NONCE = bytes.fromhex("c0a8010a2a02030405060708")
HN = bytes.fromhex("0102030405060708")
D9_CT = bytes.fromhex(
    "503f31be9b808ca45ea7bf5527172f0c2705d0a93c1e471662a4ac5f28f7f43d0fa6d089d1fcdf45dee4c2d7912791f7"
)
D9_TAG = bytes.fromhex("778afaef4997d7fd9055bb15b24438d4")
D9_DATAGRAM = bytes.fromhex("32ab9864842a00010102030405060708") + D9_TAG + D9_CT
D9_MESSAGE = Message(0x68, 0, b"hello pia", 0x01, 1 << 1, 0xC0A8010A0000C000)
SRC_IP = "192.168.1.10"


def d8_builder(header: PacketHeader, source: str) -> bytes:
    """Stands in for the LAN <= 5.26 builder: returns D8's nonce for D9's inputs only."""
    assert (header.connection_id, header.nonce, source) == (0x2A, HN, SRC_IP)
    return D8_NONCE


def counter_builder(header: PacketHeader, source: str) -> bytes:
    """A deterministic 12-byte nonce from the fields a real builder may use."""
    vid = header.source_variable_id or 0
    return bytes([header.connection_id & 0xFF, vid & 0xFF, 0, 0]) + header.nonce


BACKENDS = available_backends()


@pytest.mark.parametrize("backend", BACKENDS)
def test_d9_encode_byte_exact(backend: str) -> None:
    codec = PacketCodec(profile_for("5.18"), D4_KEY, d8_builder, backend=backend)
    packet = Packet(PacketHeader(True, 1, 0x2A, nonce=HN), (D9_MESSAGE,))
    assert codec.encode(packet, SRC_IP) == D9_DATAGRAM


@pytest.mark.parametrize("backend", BACKENDS)
def test_d9_decode(backend: str) -> None:
    codec = PacketCodec(profile_for("5.18"), D4_KEY, d8_builder, backend=backend)
    packet = codec.decode(D9_DATAGRAM, SRC_IP)
    assert packet.header == PacketHeader(True, 1, 0x2A, 4, nonce=HN, tag=D9_TAG)
    assert packet.messages == (attrs.evolve(D9_MESSAGE, presence=0x1F),)
    assert packet.footer == ()
    report = codec.inspect(D9_DATAGRAM, SRC_IP)
    assert (report.authenticated, report.messages, report.error) == (True, packet.messages, None)
    assert codec.encode(packet, SRC_IP) == D9_DATAGRAM


@pytest.mark.parametrize("backend", BACKENDS)
def test_d9_with_truncated_tag_5_23(backend: str) -> None:
    # Same message format (M-E) and key; H-D: version 5 and the tag's first 8 bytes (§1.1, §3.1).
    datagram = bytes.fromhex("32ab9864852a00010102030405060708") + D9_TAG[:8] + D9_CT
    codec = PacketCodec(profile_for("5.23"), D4_KEY, d8_builder, backend=backend)
    packet = Packet(PacketHeader(True, 1, 0x2A, nonce=HN), (D9_MESSAGE,))
    assert codec.encode(packet, SRC_IP) == datagram
    assert codec.decode(datagram, SRC_IP).messages[0].payload == b"hello pia"
    with pytest.raises(AuthenticationError):
        codec.decode(datagram[:24] + bytes([datagram[24] ^ 1]) + datagram[25:], SRC_IP)


def test_d9_tampering() -> None:
    codec = PacketCodec(profile_for("5.18"), D4_KEY, counter_builder)
    real = PacketCodec(profile_for("5.18"), D4_KEY, d8_builder)
    for i in range(16, len(D9_DATAGRAM)):  # tag and ciphertext bytes
        bad = bytearray(D9_DATAGRAM)
        bad[i] ^= 0x40
        with pytest.raises(AuthenticationError):
            real.decode(bytes(bad), SRC_IP)
    with pytest.raises(AuthenticationError):
        codec.decode(D9_DATAGRAM, SRC_IP)  # a different nonce
    wrong = PacketCodec(profile_for("5.18"), bytes(16), d8_builder)
    report = wrong.inspect(D9_DATAGRAM, SRC_IP)
    assert report.authenticated is False
    assert report.messages is None
    assert isinstance(report.error, AuthenticationError)


def test_no_key_cannot_decrypt_but_reports_header() -> None:
    codec = PacketCodec(profile_for("5.18"))
    with pytest.raises(AuthenticationError):
        codec.decode(D9_DATAGRAM, SRC_IP)
    with pytest.raises(AuthenticationError):
        codec.decode(D9_DATAGRAM, SRC_IP, verify=False)
    report = codec.inspect(D9_DATAGRAM, SRC_IP)
    assert report.header is not None
    assert report.header.connection_id == 0x2A
    assert (report.authenticated, report.messages, report.error) == (None, None, None)
    assert not codec.can_decrypt
    assert not codec.can_authenticate


def test_plain_gcm_era_packet() -> None:
    p = profile_for("5.18")
    codec = PacketCodec(p, D4_KEY, counter_builder)
    packet = Packet(PacketHeader(False, 5, 9, nonce=HN), (D9_MESSAGE,))
    raw = codec.encode(packet, SRC_IP)
    body = bytes.fromhex("1f010009680000000000000000000002c0a8010a0000c00068656c6c6f20706961000000")
    # Not padded with 0xFF (only done before encryption, §2.4); tag field zero.
    assert raw == bytes.fromhex("32ab9864" "04" "09" "0005") + HN + bytes(16) + body
    for c in (codec, PacketCodec(p)):
        got = c.decode(raw, SRC_IP)
        assert got.messages == (attrs.evolve(D9_MESSAGE, presence=0x1F),)
        assert c.inspect(raw, SRC_IP).authenticated is None


# -- <= 5.6: AES-ECB + HMAC-MD5 -------------------------------------------------


def _ecb(key: bytes, data: bytes) -> bytes:
    enc = CgCipher(algorithms.AES(key), modes.ECB()).encryptor()
    return enc.update(data) + enc.finalize()


def test_ecb_hmac_matches_an_independent_computation() -> None:
    p = profile_for("5.6")
    key = D4_KEY
    msg = Message(0x14, 3, b"abcde", 1, 2, 0xC0A8010A0000C000)
    codec = PacketCodec(p, key)
    header = PacketHeader(True, 7, 0x2A, None, 1000, 2000)
    raw = codec.encode(Packet(header, (msg,)), SRC_IP)
    head = bytes.fromhex("32ab9864" "02" "2a" "0007" "03e8" "07d0")
    # M-B message (24 + 5 + 3 pad = 32 bytes, already a multiple of 16: no 0xFF block).
    body = bytes.fromhex("01" "0005" "0000000000000002" "c0a8010a0000c000" "14" "03" "000000" "6162636465" "000000")
    ct = _ecb(key, body)
    mac = hmac.new(key, head + ct, hashlib.md5).digest()
    assert raw == head + ct + mac
    got = codec.decode(raw, SRC_IP)
    assert got.messages == (msg,)
    assert got.header == attrs.evolve(header, tag=mac)
    # A body that is not a block multiple gets 0xFF padding before ECB (§2.4).
    short = Message(0x14, 3, b"a", 1, 2, 0xC0A8010A0000C000)
    raw2 = codec.encode(Packet(header, (short,)), SRC_IP)
    body2 = bytes.fromhex("01" "0001" "0000000000000002" "c0a8010a0000c000" "14" "03" "000000" "61" "000000")
    assert raw2[12:-16] == _ecb(key, body2 + b"\xff" * 4)
    assert codec.decode(raw2, SRC_IP).messages == (short,)


def test_ecb_separate_hmac_key_and_tampering() -> None:
    p = profile_for("4.10")
    codec = PacketCodec(p, D4_KEY, hmac_key=b"another key")
    msg = Message(0x0100, 0, b"xyz", 0, 1, 0x1234, 253)
    raw = codec.encode(Packet(PacketHeader(True, 0, 1, None, 5, 0), (msg,)), SRC_IP)
    assert raw[-16:] == hmac.new(b"another key", raw[:-16], hashlib.md5).digest()
    assert codec.decode(raw, SRC_IP).messages == (msg,)
    for i in range(5, len(raw)):
        bad = bytearray(raw)
        bad[i] ^= 1
        with pytest.raises(AuthenticationError):
            codec.decode(bytes(bad), SRC_IP)
    with pytest.raises(AuthenticationError):
        PacketCodec(p, D4_KEY).decode(raw, SRC_IP)  # HMAC keyed with the session key instead


def test_ecb_without_hmac_check() -> None:
    p = profile_for("5.3")
    codec = PacketCodec(p, D4_KEY)
    msg = Message(0x0100, 0, b"xyz", 0, 1, 0x1234, 253)
    raw = codec.encode(Packet(PacketHeader(True, 0, 1, None, 5, 0), (msg,)), SRC_IP)
    forged = raw[:-16] + bytes(16)
    with pytest.raises(AuthenticationError):
        codec.decode(forged, SRC_IP)
    assert codec.decode(forged, SRC_IP, verify=False).messages == (msg,)
    # A ciphertext that is not whole blocks: BadValue once the HMAC passes.
    odd = raw[:12] + raw[12:-16] + b"\x00" * 3
    odd += hmac.new(D4_KEY, odd, hashlib.md5).digest()
    with pytest.raises(BadValue):
        codec.decode(odd, SRC_IP)
    report = codec.inspect(odd, SRC_IP)
    assert report.authenticated is True
    assert isinstance(report.error, BadValue)


# -- footers ----------------------------------------------------------------


def test_footer_plain_after_ciphertext_5_27() -> None:
    p = profile_for("5.27")
    codec = PacketCodec(p, D4_KEY, counter_builder)
    header = PacketHeader(True, 3, 0, None, destination_variable_id=0xFFFF, source_variable_id=0x1234, nonce=HN)
    msg = Message(0x68, 0, b"hi", 1, 0)
    raw = codec.encode(Packet(header, (msg,), (0x0102, 0xA0B0)), SRC_IP)
    assert raw[15] == 4  # footer size in bytes (§1.6)
    assert raw.endswith(bytes.fromhex("0102a0b0"))  # plaintext u16 list after the ciphertext (§11)
    assert (len(raw) - 32 - 4) % 16 == 0
    got = codec.decode(raw, SRC_IP)
    assert got.footer == (0x0102, 0xA0B0)
    assert got.messages == (attrs.evolve(msg, presence=0x0F),)
    assert codec.inspect(raw, SRC_IP).footer == (0x0102, 0xA0B0)
    # The footer is outside the ciphertext: it is readable without the key.
    assert PacketCodec(p).inspect(raw, SRC_IP).footer == (0x0102, 0xA0B0)


def test_footer_encrypted_6_32() -> None:
    p = profile_for("6.32")
    codec = PacketCodec(p, D4_KEY, counter_builder)
    header = PacketHeader(True, 3, 0, None, destination_variable_id=0xFFFF, source_variable_id=0x1234, nonce=HN)
    msg = Message(5, 1, b"hey", 0, extra=7)
    raw = codec.encode(Packet(header, (msg,), (0x0102, 0xA0B0, 7)), SRC_IP)
    assert raw[12] == 6
    assert (len(raw) - 29) % 16 == 0  # no plaintext footer after the ciphertext
    got = codec.decode(raw, SRC_IP)
    assert got.footer == (0x0102, 0xA0B0, 7)
    assert got.messages == (attrs.evolve(msg, presence=0x1F),)
    # messages (1+1+2+1+1+1+3 = 10) + footer 6 = 16: no padding needed.
    assert got.header.padding_size == 0
    raw2 = codec.encode(Packet(header, (msg,), (1,)), SRC_IP)
    assert codec.decode(raw2, SRC_IP).header.padding_size == 4


def test_footer_errors() -> None:
    p = profile_for("6.16")
    codec = PacketCodec(p)
    header = PacketHeader(False, 0, 0, None, destination_variable_id=1, source_variable_id=2)
    raw = codec.encode(Packet(header, (Message(0x58, 0, b"", 0, 0),), (9,)), SRC_IP)
    assert codec.decode(raw, SRC_IP).footer == (9,)
    odd = bytearray(raw)
    odd[11] = 3
    with pytest.raises(BadValue):
        codec.decode(bytes(odd), SRC_IP)
    huge = bytearray(raw)
    huge[11] = 200
    with pytest.raises(ShortData):
        codec.decode(bytes(huge), SRC_IP)
    with pytest.raises(EncodeError):
        codec.encode(Packet(header, (), (0x10000,)), SRC_IP)
    with pytest.raises(EncodeError):
        codec.encode(Packet(header, (), tuple(range(128))), SRC_IP)
    with pytest.raises(EncodeError):
        PacketCodec(profile_for("5.18")).encode(Packet(PacketHeader(False, 0), (), (1,)), SRC_IP)
    with pytest.raises(EncodeError):
        PacketCodec(profile_for("5.3"), hmac_key=b"k").encode(Packet(PacketHeader(False, 0), (), (1,)), SRC_IP)


# -- configuration ----------------------------------------------------------


def test_config_errors() -> None:
    with pytest.raises(ConfigError):
        PacketCodec(profile_for("5.18"), bytes(15), counter_builder)
    with pytest.raises(ConfigError):
        PacketCodec(profile_for("5.3"), bytes(17))
    with pytest.raises(ConfigError):
        PacketCodec(profile_for("5.18"), bytes(16))  # GCM needs a nonce builder
    with pytest.raises(ConfigError):
        PacketCodec(profile_for("5.18")).encode(Packet(PacketHeader(True, 0, nonce=HN), ()), SRC_IP)
    with pytest.raises(ConfigError):
        PacketCodec(profile_for("5.3")).encode(Packet(PacketHeader(True, 0), ()), SRC_IP)
    with pytest.raises(ConfigError):
        PacketCodec(profile_for("5.3")).encode(Packet(PacketHeader(False, 0), ()), SRC_IP)  # no HMAC key
    with pytest.raises(EncodeError):
        PacketCodec(profile_for("5.18"), D4_KEY, counter_builder).encode(Packet(PacketHeader(True, 0), ()), SRC_IP)


# -- properties -------------------------------------------------------------


@st.composite
def packet_for(draw: st.DrawFn, profile: VersionProfile) -> Packet:
    fmt = profile.header_format
    enc = draw(st.booleans())
    pid = draw(u16)
    nonce = draw(st.binary(min_size=8, max_size=8))
    if fmt in (HeaderFormat.A, HeaderFormat.B):
        hn = nonce if fmt is HeaderFormat.B else b""
        header = PacketHeader(enc, pid, draw(u8), None, draw(u16), draw(u16), nonce=hn)
    elif fmt in (HeaderFormat.C, HeaderFormat.D):
        header = PacketHeader(enc, pid, draw(u8), nonce=nonce)
    else:
        var = u32 if fmt is HeaderFormat.E else u16
        # Packet flag 1 (ZSTD) makes the payload unreadable as messages: see test_doc_review.py.
        flags = draw(st.integers(0, 7)) << 1 if fmt is HeaderFormat.G else 0
        header = PacketHeader(
            enc, pid, destination_variable_id=draw(var), source_variable_id=draw(var), packet_flags=flags, nonce=nonce
        )
    mf = profile.message_format
    messages = []
    for _ in range(draw(st.integers(0, 3))):
        payload = draw(st.binary(max_size=30))
        flags = draw(st.integers(0, 0xFE))
        if mf is MessageFormat.A:
            m = Message(draw(u16), draw(u16), payload, flags, draw(u32), draw(u32), draw(u8))
        elif mf is MessageFormat.G:
            m = Message(draw(u8), draw(u8), payload, flags, extra=draw(u8))
        else:
            port = draw(u8 if mf in (MessageFormat.B, MessageFormat.C) else st.integers(0, 0xFFFFFF))
            src = draw(st.integers(0, 2**64 - 1)) if mf is not MessageFormat.F else None
            m = Message(draw(u8), port, payload, flags, draw(st.integers(0, 2**64 - 1)), src)
        messages.append(m)
    footer: tuple[int, ...] = ()
    if profile.footer != "none":
        footer = tuple(draw(st.lists(u16, max_size=5)))
    return Packet(header, tuple(messages), footer)


@st.composite
def codec_and_packet(draw: st.DrawFn) -> tuple[PacketCodec, Packet]:
    profile = profile_for(draw(st.sampled_from(DOCUMENTED_VERSIONS)))
    key = draw(st.binary(min_size=16, max_size=16))
    return PacketCodec(profile, key, counter_builder), draw(packet_for(profile))


def _normalise(packet: Packet) -> Packet:
    return attrs.evolve(packet, messages=tuple(attrs.evolve(m, presence=None) for m in packet.messages))


@settings(max_examples=250, deadline=None)
@given(codec_and_packet())
def test_round_trip_every_version(cp: tuple[PacketCodec, Packet]) -> None:
    codec, packet = cp
    raw = codec.encode(packet, SRC_IP)
    got = codec.decode(raw, SRC_IP)
    assert _normalise(got).messages == packet.messages
    assert got.footer == packet.footer
    h = got.header
    expected = attrs.evolve(
        packet.header,
        version=codec.profile.header_version,
        tag=h.tag,
        footer_size=2 * len(packet.footer),
        padding_size=h.padding_size,
    )
    assert h == expected
    assert codec.encode(got, SRC_IP) == raw
    report = codec.inspect(raw, SRC_IP)
    assert report.messages == got.messages
    assert report.authenticated is (True if (h.encrypted or codec.profile.header_format is HeaderFormat.A) else None)


@settings(max_examples=250, deadline=None)
@given(codec_and_packet(), st.lists(st.tuples(st.integers(0, 2000), u8), min_size=1, max_size=3))
def test_mutated_gives_value_or_decode_error(cp: tuple[PacketCodec, Packet], flips: list[tuple[int, int]]) -> None:
    codec, packet = cp
    raw = bytearray(codec.encode(packet, SRC_IP))
    for pos, val in flips:
        raw[pos % len(raw)] = val
    data = bytes(raw)
    for verify in (True, False):
        try:
            codec.decode(data, SRC_IP, verify=verify)
        except DecodeError:
            pass
    report = codec.inspect(data, SRC_IP)
    assert (report.error is None) or isinstance(report.error, DecodeError)
    keyless = PacketCodec(codec.profile).inspect(data, SRC_IP)
    assert keyless.authenticated is not True


@settings(max_examples=250, deadline=None)
@given(st.sampled_from(DOCUMENTED_VERSIONS), st.binary(max_size=100), st.booleans())
def test_garbage_gives_value_or_decode_error(version: tuple[int, int], data: bytes, magic: bool) -> None:
    codec = PacketCodec(profile_for(version), D4_KEY, counter_builder)
    if magic:
        data = b"\x32\xab\x98\x64" + data
    try:
        codec.decode(data, SRC_IP)
    except DecodeError:
        pass
    codec.inspect(data, SRC_IP)
    PacketCodec(profile_for(version)).inspect(data, SRC_IP)
