"""LAN sessions of Pia 6.16-6.30 on loopback: a node publishes a LanNetworkProperty, joiners browse with the
LanSearchNetworkSetting and the version-3 challenge, take the key from the published param and join.

Each test uses its own 127.x.y.0/24 block and browse port (the default 6.x port 35000 is only checked in the
test that asks where the responder listens by default).
"""

from __future__ import annotations

import attrs
import pytest
import trio

from pianode.lan import property6
from pianode.lan.discovery import DEFAULT_BROADCAST, browse
from pianode.lan.session import form_lan_mesh, start_lan_host, start_lan_join
from pianode.mesh.config import NodeConfig
from protocols.pia.keys import lan6_network_id
from protocols.pia.lan import BROWSE_PORT_6, BrowseRequest, LanNetworkProperty, browse_port, lan_session_key
from protocols.pia.lan_criteria import LanSearchNetworkSetting
from protocols.pia.versions import profile_for

from loopback_addresses import free_port, loopback_block

KEY = bytes.fromhex("667c18475889faab61f93ef1da180971")  # Super Mario Maker 2 (spec §3.6)


def _config(ip: str, version: str = "6.20") -> NodeConfig:
    return NodeConfig(version=version, bind=(ip, 0), station_timeout=3.0)


@pytest.mark.parametrize(("version", "opened", "vacant"), [("6.20", 0x4, 0x8), ("6.26", 0x4, 0x8), ("6.29", 0x8, 0x10)])
def test_search_setting_asks_for_opened_sessions_with_a_free_slot(version: str, opened: int, vacant: int) -> None:
    profile = profile_for(version)
    setting = property6.search_setting(profile)
    assert setting.flags == opened | vacant  # spec §6.2, bits shifted in 6.29-6.30
    assert (setting.title_id is None) == (profile.version < (6, 23))
    prop = property6.host_property(profile, ip="127.0.0.2", port=49152, max_stations=2, name="h",
                                   session_key_param=bytes(32), random32=7)  # fmt: skip
    assert setting.matches(prop, profile)
    assert not setting.matches(property6.with_stations(prop, [1, 2]), profile)  # full
    assert LanSearchNetworkSetting(flags=0).matches(property6.with_stations(prop, [1, 2]), profile)


def test_host_property_publishes_the_param_and_the_6x_network_id() -> None:
    profile = profile_for("6.30")
    param = bytes(range(32))
    prop = property6.host_property(profile, ip="192.168.1.5", port=49153, max_stations=8, name="lead",
                                   session_key_param=param, random32=0xDEADBEEF, application_version=0x1234)  # fmt: skip
    again = LanNetworkProperty.decode(prop.encode(profile), profile)
    assert again == prop
    assert prop.network_id == lan6_network_id("192.168.1.5", 0xDEADBEEF) == 0xDEADBEEF_C0A80105  # (random32 << 32) | IPv4
    assert prop.session_key_param == param and prop.session_key(KEY) == lan_session_key(KEY, param)
    assert (prop.system_communication_version, prop.application_communication_version) == (10, 0x1234)
    assert (prop.host_ip, prop.host_port, prop.current_stations, prop.max_stations) == ("192.168.1.5", 49153, 1, 8)
    three = property6.with_stations(prop, range(3))
    assert (three.current_stations, three.current_players, three.property_data[0x16]) == (3, 3, 3)


def test_6x_browse_listens_on_35000() -> None:
    assert browse_port(profile_for("6.20")) == BROWSE_PORT_6 == 35000


@pytest.mark.parametrize("version", ["6.16", "6.23", "6.30"])
async def test_joiners_find_the_6x_host_by_browsing_join_and_are_published(version: str) -> None:
    port, net = free_port(), loopback_block()
    broadcast = (DEFAULT_BROADCAST, port)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            host = await start_lan_host(nursery, _config(net + "2", version), KEY, browse_bind=("0.0.0.0", port),
                                        refresh_interval=0.05, name="lead")  # fmt: skip
            info = host.info
            assert isinstance(info, LanNetworkProperty)
            assert info.network_id & 0xFFFFFFFF == int.from_bytes(bytes(map(int, (net + "2").split("."))), "big")
            assert (info.host_ip, info.host_port) == host.node.address
            joins = [await start_lan_join(nursery, _config(net + str(3 + i), version), KEY, broadcast=broadcast)
                     for i in range(2)]  # fmt: skip
            nodes = [host.node, *(j.node for j in joins)]
            for node in nodes:
                assert await node.wait_connected(2, timeout=10)
            for j in joins:
                assert j.found.network_id == host.network_id
                assert j.found.session_key == host.session_key == lan_session_key(KEY, host.session_key_param)
                assert isinstance(j.info, LanNetworkProperty) and j.info.host_name == "lead"
            await trio.sleep(0.2)
            published = host.info
            assert isinstance(published, LanNetworkProperty)
            assert (published.current_stations, published.current_players) == (3, 3)
            # A browser now sees three stations (max 4 by default: one slot left).
            found = await browse(profile_for(version), KEY, broadcast=broadcast, bind=(net + "9", 0), timeout=0.5)
            assert [f.info.current_stations for f in found] == [3]  # type: ignore[union-attr]
            await nodes[1].send(0, b"to the host", reliable=True)
            nursery.cancel_scope.cancel()


async def test_form_lan_mesh_6x_browses_with_the_6x_request_and_a_wrong_game_key_finds_nothing() -> None:
    port, net = free_port(), loopback_block()
    seen: list[bytes] = []

    def tap(data: bytes, src: tuple[str, int], dst: tuple[str, int], now: float) -> None:
        if dst[1] == port:
            seen.append(data)

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            configs = [_config(net + str(2 + i)) for i in range(3)]
            mesh = await form_lan_mesh(nursery, configs, KEY, browse_port_number=port, tap=tap)
            assert len(mesh.nodes) == 3 and not mesh.failures
            request = BrowseRequest.decode(seen[0], profile_for("6.20"))
            assert isinstance(request.search, LanSearchNetworkSetting)
            assert request.challenge is not None and request.challenge.version == 3
            other = await start_lan_host(nursery, _config(net + "20"), bytes(16), browse_bind=("0.0.0.0", port))
            with pytest.raises(Exception, match="no answer"):
                await start_lan_join(nursery, _config(net + "21"), bytes(range(16)), broadcast=(DEFAULT_BROADCAST, port),
                                     network_id=other.network_id, browse_timeout=1.0)  # fmt: skip
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize("version", ["6.20", "6.30"])
async def test_after_a_host_migration_the_new_6x_host_is_found_by_browsing_and_admits_newcomers(version: str) -> None:
    """The host of a 6.x LAN session leaves; the member that becomes host (the lowest index, README "Host
    migration") republishes the LanNetworkProperty: the same network id and session key param, its own address
    as the host StationAddress and its own name as host name, and the stations of its mesh.  A newcomer that
    browses then finds it and joins through it (before, nobody answered a 6.x browse once the host had gone)."""
    from pianode.lan.session import serve_lan_when_host

    port, net = free_port(), loopback_block()
    broadcast = (DEFAULT_BROADCAST, port)
    profile = profile_for(version)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            host = await start_lan_host(nursery, _config(net + "2", version), KEY, max_participants=4, name="lead",
                                        browse_bind=("0.0.0.0", port), refresh_interval=0.05)  # fmt: skip
            members = [await start_lan_join(nursery, NodeConfig(version=version, bind=(net + str(3 + i), 0),
                                                                station_timeout=3.0, name=f"m{i}"),
                                            KEY, broadcast=broadcast)
                       for i in range(2)]  # fmt: skip
            for m in members:
                await serve_lan_when_host(nursery, m, KEY, browse_bind=("0.0.0.0", port), refresh_interval=0.05)
                assert await m.node.wait_connected(2, timeout=10)
            before = host.info
            assert isinstance(before, LanNetworkProperty)
            host.cancel_scope.cancel()
            await host.node.leave(timeout=2)
            while members[0].node.host_index != members[0].node.station_index:
                await trio.sleep(0.05)
            await trio.sleep(0.3)
            found = await browse(profile, KEY, broadcast=broadcast, bind=(net + "9", 0), timeout=1.0)
            newcomer = await start_lan_join(nursery, _config(net + "6", version), KEY, broadcast=broadcast,
                                            browse_timeout=5)  # fmt: skip
            assert await newcomer.node.wait_connected(2, timeout=10)
            new_host_address = members[0].node.address
            await trio.sleep(0.3)
            after_join = await browse(profile, KEY, broadcast=broadcast, bind=(net + "9", 0), timeout=1.0)
            views = [m.node.host_index for m in members]
            nursery.cancel_scope.cancel()
    assert len(found) == 1, found
    info = found[0].info
    assert isinstance(info, LanNetworkProperty)
    assert info.network_id == before.network_id
    assert info.session_key_param == before.session_key_param and found[0].session_key == host.session_key
    assert (info.host_ip, info.host_port) == new_host_address
    assert info.host_name == "m0"
    assert (info.current_stations, info.current_players, info.property_data[0x16]) == (2, 2, 2)
    assert (info.max_stations, info.is_opened) == (before.max_stations, before.is_opened)
    assert info.application_data == before.application_data
    assert newcomer.found.network_id == before.network_id
    assert (newcomer.info.host_ip, newcomer.info.host_port) == new_host_address
    assert newcomer.node.host_index == members[0].station_index
    assert views == [members[0].station_index] * 2
    assert [f.info.current_stations for f in after_join] == [3]  # type: ignore[union-attr]


def test_with_host_names_the_new_host_and_keeps_the_rest_of_the_session() -> None:
    profile = profile_for("6.30")
    param = bytes(range(32))
    prop = property6.host_property(profile, ip="192.168.1.5", port=49152, max_stations=8, name="lead",
                                   session_key_param=param, random32=7, application_data=b"game")  # fmt: skip
    prop = property6.with_stations(prop, range(3))
    moved = property6.with_host(prop, ip="192.168.1.9", port=49153, name="é" * 40)  # 80 bytes of UTF-8
    again = LanNetworkProperty.decode(moved.encode(profile), profile)
    assert again == moved
    assert (moved.host_ip, moved.host_port, moved.host_name) == ("192.168.1.9", 49153, "é" * 32)  # cut at 64 bytes
    assert (moved.network_id, moved.session_key_param, moved.application_data) == (prop.network_id, param, b"game")
    assert (moved.current_stations, moved.property_data[0x16], moved.max_stations) == (3, 3, 8)
    assert moved.property_data[:0x17] == prop.property_data[:0x17]
    short = attrs.evolve(prop, property_data=b"\x00" * 0x20)
    assert property6.with_host(short, ip="10.0.0.1", port=1, name="x").property_data == short.property_data
