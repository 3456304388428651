"""Game keys, session keys and identities (pia.md §3.3, §3.6, §4, §7.3, §8.2 D4-D6 and D10-D12, §11)."""

from __future__ import annotations

import hashlib
import hmac
import zlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.errors import ConfigError
from protocols.pia.keys import (
    aes_ecb_encrypt,
    ipv4_to_int,
    lan6_network_id,
    lan_constant_id,
    lan_network_id,
    lan_service_variable_id,
    lan_session_key,
    ldn6_network_id,
    ldn6_session_key,
    ldn_constant_id,
    ldn_service_variable_id,
    ldn_session_key,
    ldn_session_key_for,
    nex_session_key,
    parse_game_key,
    parse_mac,
)
from protocols.pia.sead import Random
from protocols.pia.versions import profile_for

SPLATOON2 = bytes.fromhex("ee182a63e216cdb1f51ad4bed8cf6508")
SMM2 = bytes.fromhex("667c18475889faab61f93ef1da180971")


# ---------------------------------------------------------------------------
# Game keys (spec §3.6, §11: 16-character keys are their ASCII bytes)


@pytest.mark.parametrize(
    ("written", "expected"),
    [
        ("ee182a63e216cdb1f51ad4bed8cf6508", SPLATOON2),
        ("667C18475889FAAB61F93EF1DA180971", SMM2),
        ("p1frXqxmeCZWFv0X", b"p1frXqxmeCZWFv0X"),
        ("ABCDEFGHIJKLMNOP", b"ABCDEFGHIJKLMNOP"),
        ("ndcube_buffet_ss", b"ndcube_buffet_ss"),
        (b"0123456789abcdef", b"0123456789abcdef"),
        (bytearray(SMM2), SMM2),
    ],
)
def test_game_key_forms(written: str | bytes, expected: bytes) -> None:
    assert parse_game_key(written) == expected


@pytest.mark.parametrize(
    "bad",
    [
        "ee182a63e216cdb1f51ad4bed8cf65",  # 30 hex digits
        "zz182a63e216cdb1f51ad4bed8cf6508",  # 32 characters, not hex
        "p1frXqxmeCZWFv0\u00e9",  # 16 characters, not ASCII
        b"short",
        "",
        12345,
    ],
)
def test_bad_game_key_is_a_config_error(bad: object) -> None:
    with pytest.raises(ConfigError):
        parse_game_key(bad)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# AES-ECB helper


def test_aes_ecb_fips197_known_answer() -> None:
    # FIPS-197 appendix C.1 (AES-128).
    key = bytes(range(16))
    pt = bytes.fromhex("00112233445566778899aabbccddeeff")
    assert aes_ecb_encrypt(key, pt) == bytes.fromhex("69c4e0d86a7b0430d8cdb78070b4c55a")
    # ECB: blocks are independent.
    assert aes_ecb_encrypt(key, pt * 2) == bytes.fromhex("69c4e0d86a7b0430d8cdb78070b4c55a") * 2


def test_aes_ecb_checks_sizes() -> None:
    with pytest.raises(ConfigError):
        aes_ecb_encrypt(bytes(15), bytes(16))
    with pytest.raises(ConfigError):
        aes_ecb_encrypt(bytes(16), bytes(17))


def test_nex_session_key_keeps_the_first_16_bytes() -> None:
    server_key = bytes(range(32))
    assert nex_session_key(server_key) == bytes(range(16))
    assert nex_session_key(bytes(range(16))) == bytes(range(16))
    with pytest.raises(ConfigError):
        nex_session_key(bytes(15))


# ---------------------------------------------------------------------------
# LAN session key (spec §3.3; D4, D5)


def test_lan_session_key_d4() -> None:
    param = bytes(range(32))
    assert lan_session_key(SPLATOON2, param) == bytes.fromhex("9f1bba38de3b1df42ab5b29e7844d207")
    # The rule spelled out: last byte 0x1f incremented to 0x20, HMAC-SHA256, first 16 bytes.
    incremented = bytes(range(31)) + b"\x20"
    assert incremented[-2:] == b"\x1e\x20"
    assert lan_session_key(SPLATOON2, param) == hmac.new(SPLATOON2, incremented, hashlib.sha256).digest()[:16]


def test_lan_session_key_d5() -> None:
    assert lan_session_key(SPLATOON2, bytes(32)) == bytes.fromhex("b8e208ff638e50248fae719a08791815")


def test_lan_session_key_increment_wraps() -> None:
    param = bytes(31) + b"\xff"
    assert lan_session_key(SMM2, param) == hmac.new(SMM2, bytes(32), hashlib.sha256).digest()[:16]


def test_lan_session_key_checks_sizes() -> None:
    with pytest.raises(ConfigError):
        lan_session_key(SMM2, bytes(31))
    with pytest.raises(ConfigError):
        lan_session_key(SMM2[:8], bytes(32))


# ---------------------------------------------------------------------------
# LDN session keys (spec §3.3, §7.3, §11; D6, D12)


def test_ldn_session_key_d6() -> None:
    rng = Random(0x12345678)
    buffer = b"".join(rng.u32().to_bytes(4, "little") for _ in range(4))
    assert buffer == bytes.fromhex("ee78b84b336d065c79d10a135cfc2a87")
    assert ldn_session_key(SMM2, 0x12345678) == bytes.fromhex("f3aca7d4fba7f5b713f86ccace702c47")


def test_ldn_session_param_is_read_little_endian_from_app_data() -> None:
    # §11: the seed is the u32 at offset 0x0C of the application data, little-endian.
    app_data = bytes(12) + bytes.fromhex("78563412") + bytes(8)
    seed = int.from_bytes(app_data[0x0C:0x10], "little")
    assert ldn_session_key(SMM2, seed) == bytes.fromhex("f3aca7d4fba7f5b713f86ccace702c47")


def test_ldn6_d12() -> None:
    ssid = bytes(range(16))
    assert ldn6_network_id(ssid) == 0xF5A6AA3A
    assert ldn6_network_id(ssid) == zlib.crc32(bytes(range(1, 16)))
    assert ldn6_session_key(SMM2, ssid) == bytes.fromhex("c4fd49cc9971756176ee8c68c3043d7f")


def test_ldn6_network_id_ignores_ssid_byte_zero() -> None:
    ssid = bytes(range(16))
    assert ldn6_network_id(b"\xaa" + ssid[1:]) == ldn6_network_id(ssid)


@pytest.mark.parametrize("bad", [bytes(15), bytes(17), "000102030405060708090a0b0c0d0e0f"])
def test_ldn6_ssid_must_be_16_raw_bytes(bad: object) -> None:
    with pytest.raises(ConfigError):
        ldn6_network_id(bad)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        ldn6_session_key(SMM2, bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [-1, 1 << 32, True, "1"])
def test_ldn_session_param_must_be_u32(bad: object) -> None:
    with pytest.raises(ConfigError):
        ldn_session_key(SMM2, bad)  # type: ignore[arg-type]


def test_ldn_session_key_for_picks_the_era() -> None:
    ssid = bytes(range(16))
    for version in ("5.9", "5.18", "5.45"):
        assert ldn_session_key_for(profile_for(version), SMM2, session_param=0x12345678) == bytes.fromhex(
            "f3aca7d4fba7f5b713f86ccace702c47"
        )
    for version in ("6.16", "6.30"):
        assert ldn_session_key_for(profile_for(version), SMM2, ssid=ssid) == bytes.fromhex(
            "c4fd49cc9971756176ee8c68c3043d7f"
        )


@pytest.mark.parametrize(
    ("version", "kwargs"),
    [
        ("5.6", {"session_param": 1}),  # no LDN encryption
        ("5.7", {"session_param": 1}),  # game-supplied key
        ("5.18", {"ssid": bytes(16)}),  # needs the session param
        ("6.16", {"session_param": 1}),  # needs the SSID
    ],
)
def test_ldn_session_key_for_rejects_wrong_inputs(version: str, kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        ldn_session_key_for(profile_for(version), SMM2, **kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Identities (spec §4; D10, D11)


def test_lan_identities_d10() -> None:
    assert lan_constant_id("192.168.178.215", 49154) == 0xC0A8B2D70000C002
    assert lan_service_variable_id("192.168.178.215", 49154) == 0xB2D7C002
    # KW Pia-Types.md worked example.
    assert lan_network_id("192.168.178.215", 49154) == 0xB2D7C002


def test_ldn_identities_d11() -> None:
    for mac in ("01:23:45:67:89:ab", "01-23-45-67-89-AB", bytes.fromhex("0123456789ab")):
        assert ldn_constant_id(mac) == 0x4589AB6723010000
        assert ldn_service_variable_id(mac) == 0xB6E80B1A


@settings(max_examples=100, deadline=None)
@given(mac=st.binary(min_size=6, max_size=6))
def test_ldn_constant_id_is_the_documented_permutation(mac: bytes) -> None:
    cid = ldn_constant_id(mac)
    assert cid & 0xFFFF == 0
    assert [(cid >> s) & 0xFF for s in (56, 48, 40, 32, 24, 16)] == [mac[2], mac[4], mac[5], mac[3], mac[1], mac[0]]
    assert ldn_service_variable_id(mac) == zlib.crc32(mac)


def test_lan6_network_id() -> None:
    assert lan6_network_id("192.168.1.10", 0xDEADBEEF) == 0xDEADBEEF_C0A8010A
    v6 = "fe80::1"
    low = int.from_bytes(
        hmac.new(bytes(16), bytes.fromhex("fe800000000000000000000000000001"), hashlib.sha256).digest()[:4], "big"
    )
    assert lan6_network_id(v6, 7) == (7 << 32) | low


@pytest.mark.parametrize(
    ("call", "args"),
    [
        (lan_constant_id, ("::1", 1)),
        (lan_constant_id, ("192.168.1.300", 1)),
        (lan_constant_id, ("192.168.1.1", 65536)),
        (lan_service_variable_id, ("fe80::1", 1)),
        (lan6_network_id, ("192.168.1.1", 1 << 32)),
        (lan6_network_id, ("nonsense", 1)),
        (ldn_constant_id, ("01:23:45:67:89",)),
        (ldn_constant_id, (bytes(7),)),
        (ldn_service_variable_id, ("01:23:45:67:89:zz",)),
        (ipv4_to_int, ("1.2.3",)),
    ],
)
def test_bad_identity_inputs_are_config_errors(call: object, args: tuple[object, ...]) -> None:
    with pytest.raises(ConfigError):
        call(*args)  # type: ignore[operator]


def test_parse_mac_forms() -> None:
    assert parse_mac("02:00:00:00:00:01") == bytes.fromhex("020000000001")
    assert parse_mac(bytearray(b"\x01" * 6)) == b"\x01" * 6
    assert ipv4_to_int("192.168.1.10") == 0xC0A8010A
