"""Hypothesis strategies for the Pia common types and sub-protocol messages, per version.

Each strategy draws only the fields the given version puts on the wire (the
others keep their defaults), so ``decode(encode(x)) == x`` must hold exactly.
"""

from __future__ import annotations

import functools

from hypothesis import strategies as st

from protocols.pia.types import (
    InetAddress,
    MeshStationInfo,
    PlayerInfo,
    StationAddress,
    StationConnectionInfo,
    StationLocation,
)
from protocols.pia.versions import DOCUMENTED_VERSIONS, VersionProfile, profile_for

#: Every documented version that has the station and mesh protocols (<= 5.45).
STATION_VERSIONS = [f"{a}.{b}" for a, b in DOCUMENTED_VERSIONS if (a, b) <= (5, 45)]
#: Versions with a 6.x StationLocation.
V6_VERSIONS = [f"{a}.{b}" for a, b in DOCUMENTED_VERSIONS if (6, 16) <= (a, b) <= (6, 30)]
#: The node's two profiles.
NODE_VERSIONS = ["5.18", "5.29"]

u8 = st.integers(0, 0xFF)
u16 = st.integers(0, 0xFFFF)
u32 = st.integers(0, 0xFFFF_FFFF)
u64 = st.integers(0, 0xFFFF_FFFF_FFFF_FFFF)


def nul_free_tail(max_size: int) -> st.SearchStrategy[bytes]:
    """Bytes for a fixed string field: trailing NULs are not part of the value."""
    return st.binary(max_size=max_size).map(lambda b: b.rstrip(b"\0"))


@st.composite
def mutated(draw: st.DrawFn, raw: bytes) -> bytes:
    """*raw* with one byte flipped, its tail cut off, or 1-8 bytes appended (for value-or-DecodeError tests)."""
    out = bytearray(raw)
    op = draw(st.sampled_from(["flip", "cut", "extend"]))
    if op == "flip" and out:
        i = draw(st.integers(0, len(out) - 1))
        out[i] ^= draw(st.integers(1, 255))
    elif op == "cut":
        del out[draw(st.integers(0, len(out))):]
    else:
        out += draw(st.binary(min_size=1, max_size=8))
    return bytes(out)


def inet(sizes: tuple[int, ...] = (4,)) -> st.SearchStrategy[InetAddress]:
    return st.builds(InetAddress, st.sampled_from(sizes).flatmap(lambda n: st.binary(min_size=n, max_size=n)), u16)


@functools.cache
def inet_for(profile: VersionProfile) -> st.SearchStrategy[InetAddress]:
    return inet((4,) if profile.version <= (5, 10) else (0, 4, 16))


@functools.cache
def station_locations(profile: VersionProfile) -> st.SearchStrategy[StationLocation]:
    v = profile.version
    if v <= (5, 9):
        kw = {
            "public": inet(),
            "constant_id": st.integers(0, (1 << (8 * profile.constant_id_size)) - 1),
            "variable_id": u32,
            "service_variable_id": u32,
            "url_type": u8,
            "stream_id": u8,
            "stream_type": u8,
            "nat_mapping": u8,
            "nat_filtering": u8,
            "nat_location": u8,
            "probe_init": u8,
        }
        if v <= (4, 10):
            kw["extension_id"] = u16
        else:
            kw["relay"] = inet()
        return st.builds(StationLocation, **kw)
    nat = {"nat_filtering": st.integers(0, 3), "nat_mapping": st.integers(0, 3), "nat_type": st.integers(0, 15)}
    if v > (5, 45):
        return st.builds(StationLocation, public=inet((16,)), constant_id=u64, variable_id=u16, **nat)
    return st.builds(
        StationLocation,
        public=inet_for(profile),
        private=inet_for(profile),
        relay=inet(),
        constant_id=u64,
        variable_id=u32,
        service_variable_id=u32,
        nat_location=u8,
        probe_init=u8,
        private_available=u8,
        **nat,
    )


@functools.cache
def connection_infos(profile: VersionProfile) -> st.SearchStrategy[StationConnectionInfo]:
    return st.builds(StationConnectionInfo, station_locations(profile), station_locations(profile))


@functools.cache
def player_infos(profile: VersionProfile) -> st.SearchStrategy[PlayerInfo]:
    v = profile.version
    if v <= (4, 10):
        return st.builds(
            PlayerInfo,
            name=nul_free_tail(32),
            name_length=u8,
            language=u8,
            gathering_id=u32 if v >= (4, 0) else st.just(0),
        )
    return st.builds(
        PlayerInfo,
        name=nul_free_tail(80),
        name_encoding=u8,
        account_name=nul_free_tail(40),
        account_encoding=u8,
        language=u8,
        play_history_key=nul_free_tail(64),
        principal_id=u64 if v >= (5, 7) else st.just(0),
    )


@functools.cache
def mesh_station_infos(profile: VersionProfile) -> st.SearchStrategy[MeshStationInfo]:
    v = profile.version
    if v <= (5, 9):
        return st.builds(MeshStationInfo, connection_infos(profile), u8)
    slot = 62 if v <= (5, 26) else 64
    locations = station_locations(profile).filter(lambda loc: len(loc.encode(profile)) <= slot)
    order = u16 if (5, 29) < v <= (5, 45) else st.just(0)
    return st.builds(MeshStationInfo, locations, u8, order)


@functools.cache
def station_addresses(profile: VersionProfile, size: int | None = None) -> st.SearchStrategy[StationAddress]:
    if size == 8 or (size is None and profile.version <= (4, 10)):
        return st.builds(StationAddress, inet(), u16)
    return st.builds(StationAddress, inet())


def profiles(names: list[str]) -> list[VersionProfile]:
    return [profile_for(n) for n in names]


# -- values with every field drawn, whatever the version carries ----------------------
# Used for the property "encode raises EncodeError, or decode(encode(x)) == x":
# a field the version has no room for must never vanish silently.

def _maybe(strategy: st.SearchStrategy[object], default: object) -> st.SearchStrategy[object]:
    return st.one_of(st.just(default), strategy)


any_locations = st.builds(
    StationLocation,
    public=inet((0, 4, 16)),
    constant_id=_maybe(u64, 0),
    variable_id=_maybe(u32, 0),
    service_variable_id=_maybe(u32, 0),
    extension_id=_maybe(u16, 0),
    url_type=_maybe(u8, 0),
    nat_mapping=_maybe(st.integers(0, 3), 0),
    nat_filtering=_maybe(st.integers(0, 3), 0),
    nat_type=_maybe(st.integers(0, 15), 0),
    nat_location=_maybe(u8, 0),
    private=_maybe(inet((0, 4, 16)), InetAddress()),
    relay=_maybe(inet((0, 4)), InetAddress()),
    private_available=_maybe(u8, 0),
)

any_players = st.builds(
    PlayerInfo,
    name=nul_free_tail(32),
    name_encoding=_maybe(u8, 2),
    name_length=_maybe(u8, 0),
    language=_maybe(u8, 0),
    gathering_id=_maybe(u32, 0),
    account_name=_maybe(nul_free_tail(40), b""),
    play_history_key=_maybe(nul_free_tail(64), b""),
    principal_id=_maybe(u64, 0),
)
