"""LAN sessions end to end on loopback: a hosting node publishes itself, joiners browse, derive the key and join.

Every test puts its nodes on its own random 127.x.y.0/24 block and its browse
responder on a free port, so tests (and other work on the machine) sharing
the loopback broadcast address do not meet each other's sessions.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio

from pianode.mesh.config import NodeConfig
from pianode.mesh.events import DataReceived
from pianode.lan.discovery import DEFAULT_BROADCAST, browse, lan_identity
from pianode.lan.session import (
    LanJoinError,
    draw_session_key_param,
    form_lan_mesh,
    start_lan_host,
    start_lan_join,
)
from protocols.errors import ConfigError
from protocols.pia.lan import LanSessionInfo, lan_session_key
from protocols.pia.versions import profile_for

from loopback_addresses import free_port, loopback_block

KEY = bytes.fromhex("ee182a63e216cdb1f51ad4bed8cf6508")  # Splatoon 2 (spec §3.6)


def _config(ip: str, version: str = "5.18", port: int = 0) -> NodeConfig:
    return NodeConfig(version=version, bind=(ip, port), station_timeout=3.0)


def test_drawn_param_has_the_challenge_shape_and_gives_the_key() -> None:
    draws = iter([b"\x01" * 16, b"\x02" * 16])
    param = draw_session_key_param(lambda n: next(draws))
    assert param == b"\x01" * 16 + b"\x02" * 16  # reply key ‖ request key (spec §6.4)
    # The key is the §3.3 HMAC rule on the param with its last byte + 1, not the raw param.
    assert lan_session_key(KEY, param) != lan_session_key(KEY, b"\x01" * 16 + b"\x02" * 15 + b"\x03")


async def test_host_publishes_its_node_and_key() -> None:
    port, net = free_port(), loopback_block()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            host = await start_lan_host(
                nursery, _config(net + "2"), KEY, max_participants=6, name="lead",
                browse_bind=("0.0.0.0", port), game_mode=3,
            )  # fmt: skip
            found = await browse(profile_for("5.18"), KEY, broadcast=(DEFAULT_BROADCAST, port), bind=(net + "9", 0),
                                 timeout=0.5)  # fmt: skip
            me = next(s for s in host.node.stations() if s.is_self)
            address = host.node.address
            nursery.cancel_scope.cancel()
    assert len(found) == 1
    info = found[0].info
    assert isinstance(info, LanSessionInfo)
    # Host address = the node's Pia socket, the first console port (spec §6.1), with LAN ids (spec §4).
    assert address == (net + "2", 49152)
    assert (info.host_ip, info.host_port) == address
    const, nid = lan_identity(net + "2", 49152)
    assert (info.network_id, info.host_constant_id, info.host_service_variable_id) == (nid, const, nid)
    assert (me.constant_id, me.variable_id) == (const, info.host_variable_id)
    assert (info.current_participants, info.max_participants, info.game_mode) == (1, 6, 3)
    assert [(s.role, s.username, s.constant_id) for s in info.stations if s.role] == [(1, "lead", const)]
    # The browser's key comes from the published param and equals the key the host's node uses.
    assert info.session_key_param == host.session_key_param
    assert found[0].session_key == host.session_key == lan_session_key(KEY, host.session_key_param)


async def test_three_joiners_browse_join_exchange_data_and_are_published() -> None:
    port, net = free_port(), loopback_block()
    broadcast = (DEFAULT_BROADCAST, port)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            host = await start_lan_host(nursery, _config(net + "2"), KEY, browse_bind=("0.0.0.0", port),
                                        refresh_interval=0.05)  # fmt: skip
            joins = []
            for i in range(3):
                joins.append(await start_lan_join(nursery, _config(net + str(3 + i)), KEY, broadcast=broadcast))
            nodes = [host.node, *(j.node for j in joins)]
            for node in nodes:
                assert await node.wait_connected(3, timeout=10)
            assert sorted(node.station_index for node in nodes) == [0, 1, 2, 3]  # type: ignore[type-var]
            for j in joins:
                assert j.found.network_id == host.network_id
                assert j.found.session_key == host.session_key
            # Every station broadcasts one reliable message; everyone receives the three others.
            for node in nodes:
                await node.broadcast(f"hello from {node.station_index}".encode(), reliable=True)
            for node in nodes:
                got: set[bytes] = set()
                while len(got) < 3:
                    event = await node.events().receive()
                    if isinstance(event, DataReceived):
                        got.add(event.data)
                assert got == {f"hello from {n.station_index}".encode() for n in nodes if n is not node}
            await trio.sleep(0.2)
            published = host.info
            # One joiner leaves: the published count follows the mesh (spec §6.3 current participants).
            await joins[2].node.leave()
            with trio.move_on_after(5):
                while host.info.current_participants != 3:
                    await trio.sleep(0.05)
            after = host.info
            nursery.cancel_scope.cancel()
    assert published.current_participants == 4
    expected = {lan_identity(net + str(2 + i), 49152)[0] for i in range(4)}
    assert {s.constant_id for s in published.stations if s.role} == expected
    assert [s.role for s in published.stations if s.role] == [1, 2, 2, 2]
    assert after.current_participants == 3
    assert lan_identity(net + "5", 49152)[0] not in {s.constant_id for s in after.stations if s.role}


@pytest.mark.parametrize(
    ("version", "address_size"),
    [("5.7", 18), ("5.9", 18), ("5.10", 18), ("5.10", 6), ("5.11", 18), ("5.27", 18), ("5.45", 18)],
)
async def test_join_flow_in_every_lan_info_layout(version: str, address_size: int) -> None:
    """Host StationLocation (<= 5.9), 18- or 6-byte host address (5.10, spec §10), 5.11+; param offsets differ."""
    port, net = free_port(), loopback_block()
    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            host = await start_lan_host(nursery, _config(net + "2", version=version), KEY,
                                        browse_bind=("0.0.0.0", port), host_address_size=address_size)  # fmt: skip
            join = await start_lan_join(nursery, _config(net + "3", version=version), KEY,
                                        broadcast=(DEFAULT_BROADCAST, port), browse_timeout=5)  # fmt: skip
            await join.node.send(0, b"ping", reliable=True)
            event: object = None
            with trio.move_on_after(5):
                async for event in host.node.events():
                    if isinstance(event, DataReceived):
                        break
            nursery.cancel_scope.cancel()
    assert (join.info.host_ip, join.info.host_port) == (net + "2", 49152)
    assert join.found.session_key == host.session_key
    assert join.station_index == 1
    assert isinstance(event, DataReceived) and (event.source_index, event.data) == (1, b"ping")


async def test_joiner_picks_the_session_by_network_id() -> None:
    port, net = free_port(), loopback_block()
    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            first = await start_lan_host(nursery, _config(net + "2"), KEY, browse_bind=("0.0.0.0", port))
            second = await start_lan_host(nursery, _config(net + "3"), KEY, browse_bind=("0.0.0.0", port))
            join = await start_lan_join(nursery, _config(net + "4"), KEY, network_id=second.network_id,
                                        broadcast=(DEFAULT_BROADCAST, port))  # fmt: skip
            assert await second.node.wait_connected(1, timeout=5)
            first_peers = [s for s in first.node.stations() if not s.is_self]
            second_address = second.node.address
            nursery.cancel_scope.cancel()
    assert first.network_id != second.network_id
    assert join.found.network_id == second.network_id and join.found.session_key == second.session_key
    assert (join.info.host_ip, join.info.host_port) == second_address
    assert first_peers == []


async def test_browse_stops_at_the_wanted_session_instead_of_waiting_out_its_timeout() -> None:
    port, net = free_port(), loopback_block()
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            hosts = [
                await start_lan_host(nursery, _config(net + str(2 + i)), KEY, browse_bind=("0.0.0.0", port))
                for i in range(2)
            ]
            want = hosts[1].network_id
            start = trio.current_time()
            found = await browse(profile_for("5.18"), KEY, broadcast=(DEFAULT_BROADCAST, port), bind=(net + "9", 0),
                                 timeout=5.0, stop_when=lambda f: f.network_id == want)  # fmt: skip
            elapsed = trio.current_time() - start
            nursery.cancel_scope.cancel()
    assert found[-1].network_id == want and len(found) <= 2
    assert elapsed < 2.0  # not the 5 s timeout


async def test_a_full_session_is_not_offered_to_joiners() -> None:
    """The published count follows the mesh, and joiners ask for vacant sessions only (spec §6.2 flag 0x8)."""
    port, net = free_port(), loopback_block()
    broadcast = (DEFAULT_BROADCAST, port)
    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            host = await start_lan_host(nursery, _config(net + "2"), KEY, max_participants=2,
                                        browse_bind=("0.0.0.0", port), refresh_interval=0.05)  # fmt: skip
            await start_lan_join(nursery, _config(net + "3"), KEY, broadcast=broadcast)
            while host.info.current_participants < 2:
                await trio.sleep(0.05)
            with pytest.raises(LanJoinError):
                await start_lan_join(nursery, _config(net + "4"), KEY, broadcast=broadcast, browse_timeout=1.2)
            # A browse without criteria still sees it: full, so the vacancy test is what left it out.
            seen = await browse(profile_for("5.18"), KEY, broadcast=broadcast, bind=(net + "9", 0), timeout=0.3)
            nursery.cancel_scope.cancel()
    counts = [(f.info.current_participants, f.info.max_participants) for f in seen]  # type: ignore[union-attr]
    assert counts == [(2, 2)]
    assert host.lan_host.statistics().dropped.get("no_match", 0) >= 1


async def test_no_session_is_a_join_error_after_the_browse_time(autojump_clock: trio.testing.MockClock) -> None:
    start = trio.current_time()
    async with trio.open_nursery() as nursery:
        with pytest.raises(LanJoinError, match="within 3 s"):
            await start_lan_join(nursery, _config(loopback_block() + "4"), KEY,
                                 broadcast=(DEFAULT_BROADCAST, free_port()), browse_timeout=3.0)  # fmt: skip
    assert trio.current_time() - start == pytest.approx(3.0)


async def test_form_lan_mesh_is_the_mesh_command_hook() -> None:
    port, net = free_port(), loopback_block()
    configs = [_config(net + str(2 + i), version="5.29") for i in range(4)]
    param = bytes(range(32))
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            mesh = await form_lan_mesh(nursery, configs, KEY, browse_port_number=port, session_key_param=param)
            for node in mesh.nodes:
                assert await node.wait_connected(3, timeout=10)
            addresses = [node.address[0] for node in mesh.nodes]
            host_views = {node.host_index for node in mesh.nodes}
            nursery.cancel_scope.cancel()
    assert addresses == [net + str(2 + i) for i in range(4)]
    assert host_views == {0}
    assert mesh.host.session_key == lan_session_key(KEY, param)
    assert all(j.found.session_key == mesh.host.session_key for j in mesh.joins)
    assert mesh.host.info.max_participants == 4
    assert mesh.failures == []


async def test_form_lan_mesh_reports_a_node_that_finds_nothing_and_keeps_the_others() -> None:
    """A 5.29 joiner drops the 5.18 host's replies (system communication version 7 is not 8, spec §6.3)."""
    port, net = free_port(), loopback_block()
    configs = [_config(net + "2"), _config(net + "3", version="5.29"), _config(net + "4")]
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            mesh = await form_lan_mesh(nursery, configs, KEY, browse_port_number=port, browse_timeout=1.0)
            assert await mesh.host.node.wait_connected(1, timeout=10)
            addresses = [node.address[0] for node in mesh.nodes]
            nursery.cancel_scope.cancel()
    assert addresses == [net + "2", net + "4"]
    assert [(i, type(exc)) for i, exc in mesh.failures] == [(1, LanJoinError)]


@pytest.mark.parametrize("count", [1, 17])
async def test_form_lan_mesh_refuses_sizes_a_lan_session_cannot_hold(count: int) -> None:
    async with trio.open_nursery() as nursery:
        with pytest.raises(ConfigError, match="2-16 nodes"):
            await form_lan_mesh(nursery, [_config(f"127.0.0.{2 + i}") for i in range(count)], KEY)


@pytest.mark.parametrize(
    ("config", "kwargs", "message"),
    [
        (NodeConfig(network="ldn", bind=("127.0.0.2", 0)), {}, "network 'lan'"),
        (NodeConfig(bind=("0.0.0.0", 0)), {}, "specific IPv4"),
        (NodeConfig(bind=("127.0.0.2", 0)), {"max_participants": 17}, "2-16"),
    ],
)
async def test_host_refuses_configurations_it_cannot_publish(
    config: NodeConfig, kwargs: dict[str, int], message: str
) -> None:
    async with trio.open_nursery() as nursery:
        with pytest.raises(ConfigError, match=message):
            bind = ("0.0.0.0", free_port())
            await start_lan_host(nursery, config, KEY, browse_bind=bind, **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("host_ip", "host_port", "shown"),
    [
        ("0.0.0.0", 0, "0.0.0.0:0"),  # NintendoClients e8f85f5 hosting at 5.3-5.9 (its address left unset)
        ("10.0.0.2", 0, "10.0.0.2:0"),
        ("255.255.255.255", 49152, "255.255.255.255:49152"),
        ("224.0.0.1", 49152, "224.0.0.1:49152"),
    ],
)
async def test_a_session_naming_no_unicast_host_address_is_refused_before_any_join(
    host_ip: str, host_port: int, shown: str
) -> None:
    """A browse reply whose host address is unspecified, port 0, broadcast or multicast cannot be joined: the
    join says so at once, instead of sending connection requests nowhere and ending as a silent host's."""
    import attrs

    from pianode.lan.discovery import FoundSession, make_session_info
    from pianode.lan.session import join_found

    prof = profile_for("5.18")
    info = make_session_info(prof, ip="127.0.0.2")
    info = attrs.evolve(info, host=attrs.evolve(info.host, ip=host_ip, port=host_port))
    found = FoundSession(info, ("127.0.0.2", 30000), session_key=bytes(16))
    with trio.fail_after(2):
        async with trio.open_nursery() as nursery:
            with pytest.raises(LanJoinError) as caught:
                await join_found(nursery, _config(loopback_block() + "3"), found)
            nursery.cancel_scope.cancel()
    assert str(caught.value) == (f"the session found names its host at {shown}, not a unicast address and port:"
                                 " it cannot be joined")  # fmt: skip


async def _host_and_two_serving_members(
    nursery: trio.Nursery, net: str, port: int, version: str, *, max_participants: int
) -> tuple[Any, list[Any]]:
    """A LAN host at ``net``.2 answering browses on *port*, and two members (``net``.3 and .4) that joined
    by browsing and would answer browses should they become host; both connected to everyone."""
    from pianode.lan.session import serve_lan_when_host

    host = await start_lan_host(nursery, _config(net + "2", version), KEY, max_participants=max_participants,
                                browse_bind=("0.0.0.0", port))  # fmt: skip
    members = [await start_lan_join(nursery, _config(net + str(3 + i), version), KEY, broadcast=(DEFAULT_BROADCAST, port))
               for i in range(2)]  # fmt: skip
    for m in members:
        await serve_lan_when_host(nursery, m, KEY, browse_bind=("0.0.0.0", port))
        assert await m.node.wait_connected(2, timeout=5)
    return host, members


@pytest.mark.parametrize("version", ["5.9", "5.10", "5.18", "5.29"])
async def test_after_a_host_migration_the_new_host_answers_browses_and_admits_newcomers(version: str) -> None:
    """The host leaves; the member that becomes host (the lowest index, README "Host migration") takes over the
    LAN session: it answers browse requests with the same network id and param, naming itself as host, and a
    newcomer that browses then joins through it (before, nobody answered once the host had gone)."""

    port, net = free_port(), loopback_block()
    broadcast = (DEFAULT_BROADCAST, port)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            host, members = await _host_and_two_serving_members(nursery, net, port, version, max_participants=4)
            network_id, param = host.network_id, host.session_key_param
            host.cancel_scope.cancel()
            await host.node.leave(timeout=2)
            while members[0].node.host_index != members[0].node.station_index:
                await trio.sleep(0.05)
            newcomer = await start_lan_join(nursery, _config(net + "6", version), KEY, broadcast=broadcast, browse_timeout=5)
            assert await newcomer.node.wait_connected(2, timeout=5)
            me = next(s for s in members[0].node.stations() if s.is_self)
            new_host_address = members[0].node.address
            views = [(m.node.host_index, sorted(s.index for s in m.node.stations() if s.state == "connected"))
                     for m in members]  # fmt: skip
            nursery.cancel_scope.cancel()
    info = newcomer.info
    assert isinstance(info, LanSessionInfo)
    assert (info.network_id, info.session_key_param) == (network_id, param)
    assert (info.host_ip, info.host_port) == new_host_address
    assert (info.host_constant_id, info.host_variable_id) == (me.constant_id, me.variable_id)
    assert newcomer.node.host_index == members[0].station_index == 1
    assert newcomer.found.session_key == host.session_key
    assert [v[0] for v in views] == [1, 1]


@pytest.mark.parametrize("version", ["5.18", "6.20"])
async def test_a_host_that_left_its_mesh_no_longer_answers_browses(version: str) -> None:
    """A host whose node leaves the mesh (``node.leave()``, as ``pianode mesh --network lan --leave`` does) stops
    publishing the session at once: a browse after the leave finds nothing naming the host that has gone (before,
    its responder answered on, so a newcomer could pick the departed host and wait for it in vain)."""
    port, net = free_port(), loopback_block()
    broadcast = (DEFAULT_BROADCAST, port)
    profile = profile_for(version)
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            host = await start_lan_host(nursery, _config(net + "2", version), KEY, browse_bind=("0.0.0.0", port),
                                        refresh_interval=0.05)  # fmt: skip
            member = await start_lan_join(nursery, _config(net + "3", version), KEY, broadcast=broadcast)
            assert await member.node.wait_connected(1, timeout=10)
            before = await browse(profile, KEY, broadcast=broadcast, bind=(net + "9", 0), timeout=0.5)
            await host.node.leave(timeout=2)
            await trio.sleep(0.2)
            after = await browse(profile, KEY, broadcast=broadcast, bind=(net + "9", 0), timeout=0.5)
            nursery.cancel_scope.cancel()
    assert [f.network_id for f in before] == [host.network_id]
    assert after == []


@pytest.mark.parametrize("version", ["5.18", "6.20"])
async def test_a_scripted_lan_mesh_is_found_through_its_new_host_after_the_host_leaves(version: str) -> None:
    """form_lan_mesh (``pianode mesh --network lan``): when the host leaves (``--leave``), the member that becomes
    host publishes the session from then on, naming itself, with the same network id and param and the two
    stations left (before, only the scripted host ever answered, so the session vanished with it)."""
    port, net = free_port(), loopback_block()
    broadcast = (DEFAULT_BROADCAST, port)
    profile = profile_for(version)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            configs = [_config(net + str(2 + i), version) for i in range(3)]
            mesh = await form_lan_mesh(nursery, configs, KEY, browse_port_number=port)
            assert not mesh.failures
            for node in mesh.nodes:
                assert await node.wait_connected(2, timeout=10)
            host = mesh.host
            old = host.node.station_index
            await host.node.leave(timeout=2)
            rest = [j.node for j in mesh.joins]
            while len({n.host_index for n in rest}) != 1 or rest[0].host_index in (None, old):
                await trio.sleep(0.05)
            await trio.sleep(0.5)
            found = await browse(profile, KEY, broadcast=broadcast, bind=(net + "9", 0), timeout=1.0)
            new_host_address = next(n for n in rest if n.station_index == n.host_index).address
            nursery.cancel_scope.cancel()
    assert len(found) == 1
    info = found[0].info
    assert info.network_id == host.network_id and info.session_key_param == host.session_key_param
    assert (info.host_ip, info.host_port) == new_host_address
    count = info.current_participants if isinstance(info, LanSessionInfo) else info.current_stations
    assert count == 2


@pytest.mark.parametrize("version", ["5.18", "6.20"])
async def test_the_new_host_admits_no_more_stations_than_the_session_publishes(version: str) -> None:
    """A session of at most 3 loses its host; the new host publishes 2 of 3, and two newcomers that found it so
    both ask to join: one is admitted, the other refused as the first host would refuse it (the mesh is full), so
    the session never holds more stations than it publishes as its maximum (before, a member taking over admitted
    up to its own default capacity of 32, and the session grew to 4 of 3)."""
    from pianode.lan.session import join_found
    from pianode.mesh.node import JoinError

    port, net = free_port(), loopback_block()
    broadcast = (DEFAULT_BROADCAST, port)
    profile = profile_for(version)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            host, members = await _host_and_two_serving_members(nursery, net, port, version, max_participants=3)
            await host.node.leave(timeout=2)
            while members[0].node.host_index != members[0].node.station_index:
                await trio.sleep(0.05)
            await trio.sleep(0.5)
            (found,) = await browse(profile, KEY, broadcast=broadcast, bind=(net + "9", 0), timeout=0.5)
            outcomes: list[str] = []

            async def newcomer(ip: str) -> None:
                try:
                    await join_found(nursery, _config(ip, version), found)
                except JoinError:
                    outcomes.append("refused")
                else:
                    outcomes.append("admitted")

            async with trio.open_nursery() as both:
                for ip in (net + "7", net + "8"):
                    both.start_soon(newcomer, ip)
            await trio.sleep(0.5)
            new_host = members[0].node
            stations = [s for s in new_host.stations() if s.is_self or s.state == "connected"]
            nursery.cancel_scope.cancel()
    info = found.info
    assert (info.max_participants if isinstance(info, LanSessionInfo) else info.max_stations) == 3
    assert sorted(outcomes) == ["admitted", "refused"]
    assert len(stations) == 3
