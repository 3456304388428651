"""Session file and flags → decode context, with keys derived as a console does (spec §3.3, §8.2)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from pianode.capture.session_file import load_session, parse_key_text
from protocols.errors import ConfigError, UnknownVersion
from protocols.pia.header import PacketHeader
from protocols.pia.keys import parse_game_key
from protocols.pia.versions import NetworkType, profile_for

SPLATOON2 = "ee182a63e216cdb1f51ad4bed8cf6508"
SMM2 = "667c18475889faab61f93ef1da180971"


def write(tmp_path: Path, obj: object, name: str = "session.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(obj))
    return path


def test_lan_key_from_game_key_and_param_matches_d4(tmp_path: Path) -> None:
    path = write(tmp_path, {"version": "5.18", "network": "lan", "game_key": SPLATOON2,
                            "session_param": bytes(range(32)).hex()})
    ctx = load_session(path)
    assert ctx.profile is profile_for("5.18") and ctx.network is NetworkType.LAN
    keys = ctx.keys_for(ctx.profile)
    assert keys.session_key is not None and keys.session_key.hex() == "9f1bba38de3b1df42ab5b29e7844d207"
    assert keys.source == "game_key + session_param (LAN)" and keys.problem is None
    # The nonce builder is the LAN one of the 5.7-5.26 era: D8.
    header = PacketHeader(encrypted=True, packet_id=1, connection_id=0x2A, nonce=bytes.fromhex("0102030405060708"))
    assert keys.nonce_builder is not None
    assert keys.nonce_builder(header, "192.168.1.10").hex() == "c0a8010a2a02030405060708"


def test_lan_key_with_zero_param_matches_d5() -> None:
    ctx = load_session(None, {"version": "5.9", "network": "lan", "game_key": SPLATOON2, "session_param": "00" * 32})
    assert ctx.keys_for(profile_for("5.9")).session_key.hex() == "b8e208ff638e50248fae719a08791815"  # type: ignore[union-attr]


def test_ldn_key_from_session_param_or_application_data_matches_d6() -> None:
    d6 = "f3aca7d4fba7f5b713f86ccace702c47"
    base = {"version": "5.18", "network": "ldn", "game_key": SMM2, "macs": {"169.254.1.1": "02:00:00:00:00:01"}}
    by_param = load_session(None, {**base, "session_param": 0x12345678, "network_id": 0x11223344})
    assert by_param.keys_for(profile_for("5.18")).session_key.hex() == d6  # type: ignore[union-attr]
    # Application data 5.9-5.18 (spec §7.2, little-endian): network id at 0, session param at 0xC.
    app = (0x11223344).to_bytes(4, "little") + bytes(8) + (0x12345678).to_bytes(4, "little") + bytes(8)
    by_app = load_session(None, {**base, "application_data": app.hex()})
    keys = by_app.keys_for(profile_for("5.18"))
    assert keys.session_key.hex() == d6  # type: ignore[union-attr]
    assert keys.source == "game_key + application_data (LDN)"
    assert by_app.effective_network_id(profile_for("5.18")) == 0x11223344
    # Decimal and 0x strings are integers too (flags arrive as text).
    assert load_session(None, {**base, "session_param": "0x12345678", "network_id": "287454020"}).keys_for(
        profile_for("5.18")
    ).session_key.hex() == d6  # type: ignore[union-attr]
    # Hex needs its 0x: bare hex digits would read as decimal or hex depending on the digits.
    assert load_session(None, {**base, "session_param": "0x1234567a", "network_id": 1}).session_param == 0x1234567A
    with pytest.raises(ConfigError, match=r"session_param .* got '1234567a'"):
        load_session(None, {**base, "session_param": "1234567a", "network_id": 1})
    assert load_session(None, {**base, "session_param": "0x12345678", "network_id": "287454020"}).keys_for(
        profile_for("5.18")
    ).session_key.hex() == d6  # type: ignore[union-attr]


def test_ldn6_key_and_network_id_from_ssid_match_d12() -> None:
    ctx = load_session(None, {"version": "6.20", "network": "ldn", "game_key": SMM2, "ssid": bytes(range(16)).hex()})
    p = profile_for("6.20")
    assert ctx.keys_for(p).session_key.hex() == "c4fd49cc9971756176ee8c68c3043d7f"  # type: ignore[union-attr]
    assert ctx.effective_network_id(p) == 0xF5A6AA3A


def test_without_version_keys_follow_each_profile() -> None:
    ctx = load_session(None, {"network": "ldn", "game_key": SMM2, "session_param": 0x12345678,
                              "ssid": bytes(range(16)).hex(), "network_id": 1, "macs": {}})
    assert ctx.profile is None
    assert ctx.keys_for(profile_for("5.18")).session_key.hex() == "f3aca7d4fba7f5b713f86ccace702c47"  # type: ignore[union-attr]
    assert ctx.keys_for(profile_for("6.20")).session_key.hex() == "c4fd49cc9971756176ee8c68c3043d7f"  # type: ignore[union-attr]
    # <= 5.6 LDN is unencrypted: no session key; the game key signs (as in the real 3DS local-play frames).
    keys = ctx.keys_for(profile_for("5.4"))
    assert keys.session_key is None and keys.hmac_key == parse_game_key(SMM2) and keys.problem is None


def test_hmac_key_of_any_length_hex_or_text() -> None:
    ctx = load_session(None, {"version": "5.3", "hmac_key": "PokemonSIO"})
    keys = ctx.keys_for(profile_for("5.3"))
    assert (keys.hmac_key, keys.session_key, keys.source) == (b"PokemonSIO", None, "hmac_key")
    assert parse_key_text("hex:506f6b656d6f6e53494f", "k") == b"PokemonSIO"
    assert parse_key_text("ascii:abcd", "k") == b"abcd"
    assert parse_key_text("abcd", "k") == b"\xab\xcd"
    # <= 5.6 without a separate HMAC key signs with the session key.
    ctx = load_session(None, {"version": "5.4", "session_key": "11" * 16})
    assert ctx.keys_for(profile_for("5.4")).hmac_key == b"\x11" * 16


def test_short_session_key_of_an_hmac_era_session_is_the_hmac_key() -> None:
    ctx = load_session(None, {"version": "5.3", "session_key": "PokemonSIO"})
    assert (ctx.session_key, ctx.hmac_key) == (None, b"PokemonSIO")
    assert ctx.warnings == ("session_key of 10 bytes used as the <= 5.6 HMAC key (it cannot decrypt)",)
    with pytest.raises(ConfigError, match="session_key must be 16 bytes"):
        load_session(None, {"version": "5.18", "session_key": "PokemonSIO"})


def test_session_and_game_key_forms() -> None:
    long_nex = "00112233445566778899aabbccddeeff" + "ffee" * 8
    ctx = load_session(None, {"version": "5.10", "network": "nex", "session_key": long_nex, "gathering_id": 7})
    assert ctx.session_key == bytes.fromhex(long_nex)[:16]
    ctx = load_session(None, {"game_key": "p1frXqxmeCZWFv0X"})
    assert ctx.game_key == b"p1frXqxmeCZWFv0X"
    with pytest.raises(ConfigError, match="session_key must be 16 bytes"):
        load_session(None, {"version": "5.10", "session_key": "0011"})
    with pytest.raises(ConfigError, match="game_key: a game key is 32 hex digits or 16 ASCII characters"):
        load_session(None, {"game_key": "short"})


def test_flags_override_the_file_and_refine_nested_settings(tmp_path: Path) -> None:
    path = write(tmp_path, {"version": "5.18", "network": "lan", "session_key": "00" * 16, "comment": "x",
                            "prudp": {"variant": "quazal-v0", "access_key": "wrong"}})
    ctx = load_session(path, {"session_key": "11" * 16, "network": None, "prudp": {"access_key": "8dtRv2oj"}})
    assert ctx.session_key == b"\x11" * 16
    assert ctx.network is NetworkType.LAN
    assert ctx.prudp is not None and (ctx.prudp.variant, ctx.prudp.access_key) == ("quazal-v0", b"8dtRv2oj")
    assert ctx.warnings == ("ignored unknown setting 'comment'",)


def test_prudp_only_session_is_valid(tmp_path: Path) -> None:
    ctx = load_session(write(tmp_path, {"prudp": {"variant": "nintendo-v1", "access_key": "hex:6964"}}))
    assert ctx.prudp is not None and ctx.prudp.access_key == b"id" and ctx.profile is None
    with pytest.raises(ConfigError, match="unknown PRUDP variant 'v9'"):
        load_session(None, {"prudp": {"variant": "v9"}})


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"version": "5.18", "network": "nex", "session_key": "00" * 16}, "gathering id"),
        ({"version": "5.18", "session_key": "00" * 16}, "give network"),
        ({"version": "5.18", "network": "nex", "game_key": SMM2}, "NEX session keys come from the server"),
        ({"network": "wifi"}, "network must be one of nex, lan, ldn, npln"),
        ({"session_param": "zz"}, "session_param is 64 hex digits"),
        ({"ssid": "0011"}, "ssid must be 16 bytes"),
        ({"macs": {"nope": "02:00:00:00:00:01"}}, "not an IP address"),
        ({"macs": {"10.0.0.1": "02:00"}}, "not a MAC address"),
        ({"network_id": -1}, "must fit in 32 bits"),
        ({"gathering_id": True}, "must be an integer"),
        ({"version": 5.18}, "version must be a string"),
    ],
)
def test_bad_settings_are_one_line_config_errors(settings: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message) as info:
        load_session(None, settings)
    assert "\n" not in str(info.value)


def test_lan_game_key_without_param_waits_for_a_browse_reply() -> None:
    ctx = load_session(None, {"version": "5.18", "network": "lan", "game_key": SMM2})
    assert ctx.awaits_lan_param
    assert ctx.warnings == ("no session_param: the LAN session key will be derived from a browse reply in the capture",)
    keys = ctx.keys_for(profile_for("5.18"))
    assert keys.session_key is None
    assert keys.problem == "a LAN session key derives from the 32-byte session_param (64 hex digits)"


def test_ldn_without_macs_learns_them_from_the_capture() -> None:
    ctx = load_session(None, {"version": "5.18", "network": "ldn", "session_key": "00" * 16, "network_id": 1})
    assert ctx.macs == {}
    assert ctx.warnings == ("no macs: LDN 5.x nonces will use the source MAC addresses found in the capture",)
    keys = ctx.keys_for(profile_for("5.18"))
    assert keys.problem is None and keys.nonce_builder is not None
    # 6.x nonces use no MAC: no warning.
    assert load_session(None, {"version": "6.20", "network": "ldn", "session_key": "00" * 16,
                               "network_id": 1}).warnings == ()


def test_undocumented_version_names_neighbours_unless_nearest_allowed() -> None:
    message = "5.13 is not documented; the nearest documented versions are 5.12 and 5.14"
    with pytest.raises(UnknownVersion, match=re.escape(message)):
        load_session(None, {"version": "5.13"})
    ctx = load_session(None, {"version": "5.13", "allow_nearest": True})
    assert ctx.profile is profile_for("5.12")


def test_unreadable_or_malformed_session_files(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"cannot read session file .*missing\.json: No such file"):
        load_session(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{version: 5.18")
    with pytest.raises(ConfigError, match=r"bad\.json is not JSON"):
        load_session(bad)
    with pytest.raises(ConfigError, match="must hold a JSON object"):
        load_session(write(tmp_path, ["5.18"]))


def test_an_ssid_alone_names_a_6x_ldn_session_and_warns_of_no_macs() -> None:
    """The 16 SSID bytes key only 6.x LDN (spec pia.md §11); with no application data (5.x's key source) and no
    version, the capture is 6.x, whose nonces use no MAC: the 5.x warning would only mislead."""
    session = {"network": "ldn", "game_key": "0123456789abcdef", "ssid": "00" * 16}
    assert load_session(None, session).warnings == ()
    five = load_session(None, {**session, "application_data": "00" * 32})
    assert five.warnings == ("no macs: LDN 5.x nonces will use the source MAC addresses found in the capture",)


@pytest.mark.parametrize("value", ["no", "false", "0", 5, 1, [0], {"on": False}])
def test_allow_nearest_is_a_json_boolean(value: object) -> None:
    """A value that is not true or false would otherwise enable the nearest-version fallback (or hide a typo)."""
    with pytest.raises(ConfigError, match=r"^allow_nearest must be true or false \(a JSON boolean\), got ") as info:
        load_session(None, {"version": "5.99", "allow_nearest": value})
    assert "\n" not in str(info.value)
    assert load_session(None, {"version": "5.99", "allow_nearest": True}).allow_nearest is True
    assert load_session(None, {"allow_nearest": None}).allow_nearest is False


@pytest.mark.parametrize("setting", ["network_id", "gathering_id"])
def test_integers_are_decimal_or_0x_hex_and_nothing_else(setting: str) -> None:
    """One rule for every spelling: "10" is ten, "0x10" sixteen, and "abc" (hex without its 0x) is refused."""
    read = {text: getattr(load_session(None, {setting: text}), setting)
            for text in ("10", " 10 ", "0x10", "0XaB", 4096)}  # fmt: skip
    assert read == {"10": 10, " 10 ": 10, "0x10": 16, "0XaB": 0xAB, 4096: 4096}
    for text in ("abc", "a1b2c3d4", "12ab", "0x", "0xg1", "1_000", "-1", "+5", "", "١٠"):
        with pytest.raises(ConfigError, match=rf"^{setting} must be an integer \(decimal digits, or hex digits after"
                                              rf" 0x\), got ") as info:
            load_session(None, {setting: text})
        assert "\n" not in str(info.value)
