"""LAN sessions of Pia 6.16-6.30: the LanNetworkProperty a host publishes and the search a browser sends.

6.x LAN discovery runs on port 35000 (spec §6.1).  A browse request carries a
LanSearchNetworkSetting (§6.2) and the version-3 crypto challenge (§6.4); the
reply carries a LanNetworkProperty (§6.3: documented for 6.29-6.30, and the
codec's layout for 6.16-6.26 too) whose system property holds the session key
param at 0x5C.  The session key comes from that param by the same HMAC rule as
5.x (§3.3, "LAN ≤ 6.30").  The host's Pia address is the property's
StationAddress; 6.x documents no host constant or variable id in it, so a
joiner learns them from the host's connection response.

The search flags moved between versions (§6.2): 6.16-6.26 use 1 key, 2 max
stations, 4 opened only, 8 vacant only; 6.29-6.30 shift them up by one bit
(1 is ignored); :class:`NetworkSettingFlag` gives the version's bits.
"""

from __future__ import annotations

from collections.abc import Iterable

import attrs

from protocols.pia.keys import lan6_network_id
from protocols.pia.lan import LanNetworkProperty, NameEncoding
from protocols.pia.lan_criteria import LanSearchNetworkSetting, NetworkSettingFlag
from protocols.pia.versions import VersionProfile

__all__ = ["host_property", "is_lan6", "search_setting", "with_host", "with_stations"]


def is_lan6(profile: VersionProfile) -> bool:
    return (6, 16) <= profile.version <= (6, 30)


def search_setting(profile: VersionProfile, *, opened_only: bool = True, vacant_only: bool = True) -> LanSearchNetworkSetting:
    """What a console looking for a game to join asks for: opened sessions with a free slot.

    The responder matches it with :meth:`LanSearchNetworkSetting.matches`, whose flag bits follow the version.
    """
    bits = NetworkSettingFlag.for_version(profile)
    flags = (bits["opened_only"] if opened_only else 0) | (bits["vacant_only"] if vacant_only else 0)
    return LanSearchNetworkSetting(flags=flags, title_id=0 if profile.version >= (6, 23) else None)


def host_property(
    profile: VersionProfile,
    *,
    ip: str,
    port: int,
    max_stations: int,
    name: str,
    session_key_param: bytes,
    random32: int,
    application_version: int = 0,
    application_data: bytes = b"",
) -> LanNetworkProperty:
    """A one-station LanNetworkProperty publishing *session_key_param*.

    Its network id is ``(random32 << 32) | IPv4`` (spec §4, 6.16-6.40).
    """
    system = LanNetworkProperty.system_property(
        system_version=profile.lan_system_version or 0,
        application_version=application_version,
        players=1,
        host_name=name,
        session_key_param=session_key_param,
    )
    return LanNetworkProperty(
        network_id=lan6_network_id(ip, random32),
        property_data=system + application_data,
        current_stations=1,
        max_stations=max_stations,
        is_opened=True,
        current_players=1,
        host_ip=ip,
        host_port=port,
    )


def with_stations(prop: LanNetworkProperty, stations: Iterable[object]) -> LanNetworkProperty:
    """*prop* with its station and player counts set to the mesh's stations now (one player each)."""
    n = min(len(list(stations)), prop.max_stations)
    # The system property's player count (byte 0x16) follows the stations too (spec §6.3).
    data = prop.property_data
    if len(data) > 0x16:
        data = data[:0x16] + bytes((n,)) + data[0x17:]
    return attrs.evolve(prop, current_stations=n, current_players=n, property_data=data)


def with_host(prop: LanNetworkProperty, *, ip: str, port: int, name: str) -> LanNetworkProperty:
    """*prop* as the station at ``ip:port`` named *name* publishes it once it has become the session's host.

    The spec documents no LAN migration; pianode's (README "Host migration") keeps the session, so the network
    id, the session key param, the settings and the game's data are kept, as a 5.x new host keeps its
    LanSessionInfo's, and only the fields of §6.3 that name the host change: the host StationAddress and the
    system property's host name (u32 size at 0x17, encoding at 0x1B, 64 bytes at 0x1C).  A property too short
    to hold a host name keeps its bytes.
    """
    data = prop.property_data
    # (At most 64 bytes, cut at a character boundary.)
    encoded = name.encode("utf-8")[:64].decode("utf-8", errors="ignore").encode("utf-8")
    if len(data) >= 0x5C:
        size = len(encoded).to_bytes(4, "big")
        data = data[:0x17] + size + bytes((NameEncoding.UTF8,)) + encoded.ljust(64, b"\0") + data[0x5C:]
    return attrs.evolve(prop, host_ip=ip, host_port=port, property_data=data)
