"""GCM nonce layouts per network type and era (pia.md §3.2, §7.3, §11; §8.2 D7, D8)."""

from __future__ import annotations

import zlib

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.errors import ConfigError, DecodeError
from protocols.pia.nonce import CACHE_LIMIT, UnknownSource, ldn_crc_prefix, nonce_builder
from protocols.pia.versions import NetworkType, profile_for

HN = bytes.fromhex("0102030405060708")


@attrs.frozen
class Header:
    """The three fields the builder contract names (shared PacketHeader interface)."""

    connection_id: int = 0
    source_variable_id: int | None = None
    nonce: bytes = HN


# Versions per era (header format B/C/D: connection id; E: variable id; F/G: 6.x).
CONN_ERA = ["5.7", "5.10", "5.11", "5.18", "5.21", "5.23", "5.26"]
VAR_ERA = ["5.27", "5.36", "5.45"]
SIX_ERA = ["6.16", "6.23", "6.30"]
LATER = ["6.32", "6.41", "7.2"]  # nearest documented neighbour of the 6.16-6.30 rows
ECB_ERA = ["3.5", "4.10", "5.3", "5.6"]


# ---------------------------------------------------------------------------
# Spec vectors


def test_d7_ldn_crc_prefix_and_nonce() -> None:
    mac = bytes.fromhex("020000000001")
    assert zlib.crc32(bytes.fromhex("44332211") + mac) == 0x23525077
    assert ldn_crc_prefix(0x11223344, mac) == bytes.fromhex("235250")
    build = nonce_builder(profile_for("5.18"), NetworkType.LDN, network_id=0x11223344, macs={"169.254.1.2": mac})
    assert build(Header(connection_id=0x2A), "169.254.1.2") == bytes.fromhex("2352502a0102030405060708")


def test_d8_lan_nonce() -> None:
    build = nonce_builder(profile_for("5.18"), NetworkType.LAN)
    assert build(Header(connection_id=0x2A), "192.168.1.10") == bytes.fromhex("c0a8010a2a02030405060708")


def test_network_type_by_name() -> None:
    build = nonce_builder(profile_for("5.18"), "lan")
    assert build(Header(connection_id=0x2A), "192.168.1.10") == bytes.fromhex("c0a8010a2a02030405060708")
    with pytest.raises(ConfigError):
        nonce_builder(profile_for("5.18"), "wifi")


# ---------------------------------------------------------------------------
# Every era's layout, written out by hand


@pytest.mark.parametrize("version", CONN_ERA)
def test_nex_connection_id_era(version: str) -> None:
    build = nonce_builder(profile_for(version), NetworkType.NEX, gathering_id=0x12ABCDEF)
    assert build(Header(connection_id=0x2A), "10.0.0.1") == bytes.fromhex("2aabcdef") + HN


@pytest.mark.parametrize("version", VAR_ERA)
def test_nex_variable_id_era(version: str) -> None:
    build = nonce_builder(profile_for(version), NetworkType.NEX, gathering_id=0x12ABCDEF)
    assert build(Header(source_variable_id=0x1234567F), "10.0.0.1") == bytes.fromhex("7fabcdef") + HN


@pytest.mark.parametrize("version", CONN_ERA)
def test_lan_connection_id_era(version: str) -> None:
    build = nonce_builder(profile_for(version), NetworkType.LAN)
    assert build(Header(connection_id=0xFE), "10.1.2.3") == bytes.fromhex("0a010203fe") + HN[1:]


@pytest.mark.parametrize("version", VAR_ERA)
def test_lan_variable_id_era(version: str) -> None:
    build = nonce_builder(profile_for(version), NetworkType.LAN)
    assert build(Header(source_variable_id=0xB2D7C002), "10.1.2.3") == bytes.fromhex("0a01020302") + HN[1:]


@pytest.mark.parametrize("version", SIX_ERA + LATER)
def test_lan_6x_ipv4_and_ipv6(version: str) -> None:
    build = nonce_builder(profile_for(version), NetworkType.LAN)
    assert build(Header(source_variable_id=5), "192.168.1.10") == bytes.fromhex("c0a8010a") + HN
    v6 = bytes.fromhex("fe800000000000000000000000000001")
    assert build(Header(source_variable_id=5), "fe80::1") == zlib.crc32(v6).to_bytes(4, "big") + HN


@pytest.mark.parametrize("version", VAR_ERA)
def test_ldn_variable_id_era(version: str) -> None:
    mac = bytes.fromhex("020000000001")
    build = nonce_builder(profile_for(version), NetworkType.LDN, network_id=0x11223344, macs={"169.254.1.2": mac})
    assert build(Header(source_variable_id=0xDEADBE2A), "169.254.1.2") == bytes.fromhex("2352502a") + HN


@pytest.mark.parametrize("version", SIX_ERA + LATER)
def test_ldn_6x_network_id_xor_ipv4(version: str) -> None:
    build = nonce_builder(profile_for(version), NetworkType.LDN, network_id=0xF5A6AA3A)
    # 169.254.1.2 = 0xA9FE0102; 0xF5A6AA3A ^ 0xA9FE0102 = 0x5C58AB38.
    assert build(Header(source_variable_id=2), "169.254.1.2") == bytes.fromhex("5c58ab38") + HN


@pytest.mark.parametrize("version", SIX_ERA + LATER)
def test_npln_network_id(version: str) -> None:
    build = nonce_builder(profile_for(version), NetworkType.NPLN, network_id=0x01020304)
    assert build(Header(source_variable_id=2), "8.8.8.8") == bytes.fromhex("01020304") + HN


# ---------------------------------------------------------------------------
# Configuration errors


@pytest.mark.parametrize("version", ECB_ERA)
@pytest.mark.parametrize("network", list(NetworkType))
def test_ecb_era_has_no_nonce(version: str, network: NetworkType) -> None:
    with pytest.raises(ConfigError, match="ECB"):
        nonce_builder(profile_for(version), network, gathering_id=1, network_id=1, macs={})


@pytest.mark.parametrize(
    ("version", "network", "kwargs"),
    [
        ("5.18", NetworkType.NEX, {}),  # gathering id missing
        ("5.18", NetworkType.NEX, {"gathering_id": 1 << 32}),
        ("6.16", NetworkType.NEX, {"gathering_id": 1}),  # undocumented
        ("5.18", NetworkType.LDN, {"macs": {}}),  # network id missing
        ("5.18", NetworkType.LDN, {"network_id": 1}),  # macs missing
        ("6.16", NetworkType.LDN, {}),
        ("6.16", NetworkType.NPLN, {}),
        ("5.45", NetworkType.NPLN, {"network_id": 1}),  # no NPLN in 5.x
        ("5.18", NetworkType.LDN, {"network_id": -1, "macs": {}}),
    ],
)
def test_bad_configuration(version: str, network: NetworkType, kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        nonce_builder(profile_for(version), network, **kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------
# Sources that cannot give a nonce: DecodeError, the packet is dropped


def test_unknown_ldn_source_is_a_decode_error() -> None:
    build = nonce_builder(profile_for("5.18"), NetworkType.LDN, network_id=1, macs={"169.254.1.2": bytes(6)})
    with pytest.raises(UnknownSource):
        build(Header(connection_id=2), "169.254.1.3")
    assert issubclass(UnknownSource, DecodeError)


def test_bad_mac_in_mapping_is_a_decode_error_for_that_source() -> None:
    build = nonce_builder(profile_for("5.18"), NetworkType.LDN, network_id=1, macs={"169.254.1.2": b"\x01\x02"})
    with pytest.raises(UnknownSource):
        build(Header(connection_id=2), "169.254.1.2")


@pytest.mark.parametrize(
    ("version", "network", "kwargs", "source"),
    [
        ("5.18", NetworkType.LAN, {}, "fe80::1"),  # 5.x LAN is IPv4 only
        ("5.36", NetworkType.LAN, {}, "not-an-address"),
        ("6.16", NetworkType.LAN, {}, "300.1.1.1"),
        ("6.16", NetworkType.LDN, {"network_id": 1}, "fe80::1"),
    ],
)
def test_unusable_source_address(version: str, network: NetworkType, kwargs: dict[str, int], source: str) -> None:
    build = nonce_builder(profile_for(version), network, network_id=kwargs.get("network_id"))
    with pytest.raises(UnknownSource):
        build(Header(connection_id=1, source_variable_id=1), source)


def test_short_header_nonce_is_rejected() -> None:
    build = nonce_builder(profile_for("6.16"), NetworkType.LAN)
    with pytest.raises(DecodeError):
        build(Header(source_variable_id=2, nonce=b"\x01" * 7), "10.0.0.1")


# ---------------------------------------------------------------------------
# Caching must never serve a stale or foreign prefix


def test_ldn_macs_mapping_is_read_live() -> None:
    macs: dict[str, bytes | str] = {}
    build = nonce_builder(profile_for("5.18"), NetworkType.LDN, network_id=0x11223344, macs=macs)
    with pytest.raises(UnknownSource):
        build(Header(connection_id=0x2A), "169.254.1.2")
    macs["169.254.1.2"] = "02:00:00:00:00:01"
    assert build(Header(connection_id=0x2A), "169.254.1.2") == bytes.fromhex("2352502a0102030405060708")
    # Another station takes over the address: its own MAC gives its own prefix.
    macs["169.254.1.2"] = bytes.fromhex("020000000002")
    expected = zlib.crc32(bytes.fromhex("44332211020000000002")).to_bytes(4, "big")[:3]
    assert build(Header(connection_id=0x2A), "169.254.1.2")[:3] == expected


def test_many_sources_beyond_the_cache_limit() -> None:
    build = nonce_builder(profile_for("5.36"), NetworkType.LAN)
    for i in range(CACHE_LIMIT + 300):
        ip = f"10.{(i >> 16) & 0xFF}.{(i >> 8) & 0xFF}.{i & 0xFF}"
        assert build(Header(source_variable_id=i), ip)[:5] == bytes(
            (10, (i >> 16) & 0xFF, (i >> 8) & 0xFF, i & 0xFF, i & 0xFF)
        )


# ---------------------------------------------------------------------------
# Properties


@settings(max_examples=200, deadline=None)
@given(
    version=st.sampled_from(CONN_ERA + VAR_ERA + SIX_ERA + LATER),
    network=st.sampled_from([NetworkType.NEX, NetworkType.LAN, NetworkType.LDN, NetworkType.NPLN]),
    cid=st.integers(0, 255),
    var=st.integers(0, 0xFFFFFFFF),
    hn=st.binary(min_size=8, max_size=8),
    ip=st.integers(0, 0xFFFFFFFF),
    mac=st.binary(min_size=6, max_size=6),
    nid=st.integers(0, 0xFFFFFFFF),
)
def test_every_layout_is_12_bytes_and_carries_the_header_nonce(
    version: str, network: NetworkType, cid: int, var: int, hn: bytes, ip: int, mac: bytes, nid: int
) -> None:
    profile = profile_for(version)
    six = profile.version >= (6, 0)
    if (network is NetworkType.NEX and six) or (network is NetworkType.NPLN and not six):
        return  # undocumented combinations, covered by test_bad_configuration
    source = ".".join(str((ip >> s) & 0xFF) for s in (24, 16, 8, 0))
    build = nonce_builder(profile, network, gathering_id=nid, network_id=nid, macs={source: mac})
    nonce = build(Header(connection_id=cid, source_variable_id=var, nonce=hn), source)
    assert len(nonce) == 12
    if network is NetworkType.LAN and not six:
        assert nonce[4:] == bytes((cid if profile.has_connection_id else var & 0xFF,)) + hn[1:]
    else:
        assert nonce[4:] == hn
    # The same inputs always give the same nonce (caches are transparent).
    assert build(Header(connection_id=cid, source_variable_id=var, nonce=hn), source) == nonce


@pytest.mark.parametrize("backend", ["cryptography", "pycryptodome"])
def test_d9_from_derived_key_and_built_nonce(backend: str) -> None:
    # §8.2 D9 end to end: session key from D4's inputs, nonce from D8's, sealed message area.
    from protocols.crypto.aead import gcm
    from protocols.pia.keys import lan_session_key, parse_game_key

    key = lan_session_key(parse_game_key("ee182a63e216cdb1f51ad4bed8cf6508"), bytes(range(32)))
    nonce = nonce_builder(profile_for("5.18"), NetworkType.LAN)(Header(connection_id=0x2A), "192.168.1.10")
    pt = bytes.fromhex("1f010009680000000000000000000002c0a8010a0000c00068656c6c6f20706961000000") + b"\xff" * 12
    ct, tag = gcm(key, backend).seal(nonce, pt)
    assert ct.hex() == (
        "503f31be9b808ca45ea7bf5527172f0c2705d0a93c1e471662a4ac5f28f7f43d0fa6d089d1fcdf45dee4c2d7912791f7"
    )
    assert tag.hex() == "778afaef4997d7fd9055bb15b24438d4"


def test_the_per_source_prefix_cache_stays_bounded() -> None:
    """A flood of datagrams from ever new source addresses cannot grow a builder's prefix cache past its bound."""
    from protocols.pia.nonce import CACHE_LIMIT, nonce_builder, nonce_parts
    from protocols.pia.versions import NetworkType, profile_for

    parts = nonce_parts(nonce_builder(profile_for("5.29"), NetworkType.LAN))
    assert parts is not None and parts.lookup is not None and parts.learn is not None
    cache = parts.lookup.__self__  # the dict whose get the builders call
    assert isinstance(cache, dict)
    for i in range(CACHE_LIMIT + 500):
        ip = f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"
        assert (parts.lookup(ip) or parts.learn(ip)) == parts.learn(ip)
        assert len(cache) <= CACHE_LIMIT
