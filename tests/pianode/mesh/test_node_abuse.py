"""Hostile datagrams: garbage, truncations, forged tags, replays and stolen identities.

A node (the host of a three-station mesh on the simulated network, MockClock)
is sent each kind of bad datagram.  It must keep running, count each one in
``node.statistics()["drops"]`` under its reason, and hand none of them to the
application.  The valid datagrams that get mutated or replayed are captured
from the mesh's own traffic with the node tap, and recognised by decoding them
with the sender's packet codec.

Spoofing a member's source address needs a raw socket, so the two cases that
come "from" a member (a replay from its address, and an insider claiming
another station's identity) enter at the node's receive path,
``node.session.receive_datagram``, the method the socket loop calls; the
network-level replay uses the simulated network's duplication fault instead.
"""

from __future__ import annotations

import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import attrs
import pytest

import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pianode.mesh.config import NodeConfig
from pianode.mesh.events import DataReceived, Event, StationLeft
from pianode.sim.faults import LinkFaults
from pianode.sim.netsim import SimulatedNetwork
from pianode.mesh.node import Node, open_node
from pianode.mesh.session import MeshSession
from protocols.pia.packet import Packet
from protocols.pia.versions import Proto

from node_fixtures import n_connected
from udp_sockets import bound_udp

KEY = bytes.fromhex("a0a1a2a3a4a5a6a7a8a9aaabacadaeaf")
PORT = 49152
ATTACKER = ("127.0.0.99", 40000)
Record = tuple[bytes, tuple[str, int], tuple[str, int], float]


@attrs.define
class Station:
    node: Node
    events: list[Event]
    sent: list[Record]

    @property
    def session(self) -> MeshSession:
        assert self.node.session is not None
        return self.node.session

    def drops(self) -> dict[str, int]:
        d = self.node.statistics()["drops"]
        assert isinstance(d, dict)
        return dict(d)

    def data(self) -> list[DataReceived]:
        return [e for e in self.events if isinstance(e, DataReceived)]


@asynccontextmanager
async def three_stations(version: str) -> AsyncIterator[tuple[SimulatedNetwork, list[Station]]]:
    async with SimulatedNetwork() as net:
        net.install()
        async with trio.open_nursery() as nursery:
            stations: list[Station] = []
            for i in range(3):
                cfg = NodeConfig(version=version, session_key=KEY, bind=(f"127.0.0.{i + 1}", PORT), seed=500 + i)
                events: list[Event] = []
                sent: list[Record] = []

                async def run(
                    cfg: NodeConfig = cfg,
                    events: list[Event] = events,
                    sent: list[Record] = sent,
                    *,
                    task_status: trio.TaskStatus[Node] = trio.TASK_STATUS_IGNORED,
                ) -> None:
                    async with open_node(cfg, tap=lambda d, s, t, now: sent.append((d, s, t, now))) as node:
                        task_status.started(node)
                        async for event in node.events():
                            events.append(event)

                node = await nursery.start(run)
                stations.append(Station(node, events, sent))
            host, b, c = stations
            await host.node.create_mesh()
            with trio.fail_after(20):
                assert await b.node.join(host.node.address) == 1
                assert await c.node.join(host.node.address) == 2
            await settle(lambda: all(n_connected(s.node) == 2 for s in stations))
            yield net, stations
            nursery.cancel_scope.cancel()


async def settle(predicate: Callable[[], bool] = lambda: True, timeout: float = 10.0) -> None:
    with trio.fail_after(timeout):
        while not predicate():
            await trio.sleep(0.01)
    await trio.sleep(0.1)


def captured(sender: Station, receiver: Station, payload: bytes) -> bytes:
    """The datagram *sender* sent *receiver* that carries *payload* (found by decoding it)."""
    codec = sender.session.codec
    assert codec is not None
    for data, src, dst, _ in sender.sent:
        if dst != receiver.node.address:
            continue
        packet = codec.decode(data, src[0])
        if any(m.payload.endswith(payload) for m in packet.messages):
            return data
    raise AssertionError(f"no datagram with {payload!r} was sent")


async def attacker_socket() -> trio.socket.SocketType:
    return await bound_udp(*ATTACKER)


def delta(after: dict[str, int], before: dict[str, int]) -> dict[str, int]:
    return {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before) if after.get(k, 0) != before.get(k, 0)}


async def still_works(stations: list[Station]) -> None:
    """Every station still delivers reliable data to every other, once each."""
    before = [len(s.data()) for s in stations]
    for s in stations:
        assert await s.node.broadcast(b"after-abuse-%d" % (s.node.station_index or 0)) == 2
    await settle(lambda: all(len(s.data()) - n >= 2 for s, n in zip(stations, before, strict=True)))
    for s, n in zip(stations, before, strict=True):
        fresh = s.data()[n:]
        assert sorted(e.data for e in fresh) == sorted(
            b"after-abuse-%d" % (o.node.station_index or 0) for o in stations if o is not s
        )


VERSIONS = ["5.18", "5.29"]


@pytest.mark.parametrize("version", VERSIONS)
async def test_garbage_and_truncated_datagrams(version: str, autojump_clock: trio.testing.MockClock) -> None:
    async with three_stations(version) as (_, stations):
        host, b, _c = stations
        await b.node.send(0, b"secret-from-b", reliable=False)
        await settle(lambda: len(host.data()) == 1)
        valid = captured(b, host, b"secret-from-b")
        sock = await attacker_socket()
        rng = random.Random(1)
        garbage = [b""] + [rng.randbytes(rng.randrange(1, 300)) for _ in range(60)]
        before = host.drops()
        for g in garbage:
            await sock.sendto(g, host.node.address)
        await settle()
        # Random bytes do not even carry the Pia magic: malformed, every one.
        assert delta(host.drops(), before) == {"malformed": len(garbage)}
        before = host.drops()
        for n in range(len(valid)):
            await sock.sendto(valid[:n], host.node.address)
        await settle()
        cut = delta(host.drops(), before)
        assert set(cut) <= {"malformed", "bad_tag"} and sum(cut.values()) == len(valid)
        assert cut.get("malformed", 0) > 0
        assert [e.data for e in host.data()] == [b"secret-from-b"]
        await still_works(stations)


@pytest.mark.parametrize("version", VERSIONS)
async def test_forged_tags_and_flipped_bits(version: str, autojump_clock: trio.testing.MockClock) -> None:
    async with three_stations(version) as (_, stations):
        host, b, _c = stations
        await b.node.send(0, b"secret-from-b", reliable=False)
        await settle(lambda: len(host.data()) == 1)
        valid = captured(b, host, b"secret-from-b")
        codec = b.session.codec
        assert codec is not None
        tag = codec.decode(valid, b.node.address[0]).header.tag
        assert len(tag) in (8, 16)
        at = valid.find(tag)
        assert at > 0
        sock = await attacker_socket()
        # Every bit of the tag.
        before = host.drops()
        for bit in range(len(tag) * 8):
            forged = bytearray(valid)
            forged[at + bit // 8] ^= 0x80 >> (bit % 8)
            await sock.sendto(bytes(forged), host.node.address)
        await settle()
        assert delta(host.drops(), before) == {"bad_tag": len(tag) * 8}
        # A bit in every byte of the datagram (header, ciphertext, footer): each
        # is refused for one reason or another; none is delivered.
        before = host.drops()
        for i in range(len(valid)):
            forged = bytearray(valid)
            forged[i] ^= 1 << (i % 8)
            await sock.sendto(bytes(forged), host.node.address)
        await settle()
        flips = delta(host.drops(), before)
        assert sum(flips.values()) == len(valid)
        assert flips.get("bad_tag", 0) > len(valid) // 2
        assert [e.data for e in host.data()] == [b"secret-from-b"]
        await still_works(stations)


@pytest.mark.parametrize("version", VERSIONS)
async def test_replays(version: str, autojump_clock: trio.testing.MockClock) -> None:
    async with three_stations(version) as (net, stations):
        host, b, _c = stations
        await b.node.send(0, b"secret-from-b", reliable=False)
        await b.node.send(0, b"reliable-from-b", reliable=True)
        await settle(lambda: len(host.data()) == 2)
        replays = [captured(b, host, b"secret-from-b"), captured(b, host, b"reliable-from-b")]
        # Handshake replies, join, acks, keep-alives (the first, the connection request, has its own test below).
        replays += [d for d, _, dst, _ in b.sent if dst == host.node.address][1:20]
        # From the member's own address, straight into the node's receive path.
        before = host.drops()
        now = trio.current_time()
        for data in replays:
            host.session.receive_datagram(data, b.node.address, now)
        assert delta(host.drops(), before) == {"replayed": len(replays)}
        # From another address: the nonce or the membership check refuses them.
        sock = await attacker_socket()
        before = host.drops()
        for data in replays:
            await sock.sendto(data, host.node.address)
        await settle()
        elsewhere = delta(host.drops(), before)
        assert set(elsewhere) <= {"bad_tag", "not_member"} and sum(elsewhere.values()) == len(replays)
        # On the wire: every datagram from b to the host arrives twice for a while.
        faults_before = net.statistics().duplicated
        before = host.drops()
        net.set_link_faults(b.node.address[0], host.node.address[0], LinkFaults(duplicate=1.0, reorder=0.5, seed=2))
        for k in range(20):
            await b.node.send(0, b"twice-%d" % k, reliable=k % 2 == 0)
            await trio.sleep(0.05)
        net.set_link_faults(b.node.address[0], host.node.address[0], None)
        await settle()
        duplicated = net.statistics().duplicated - faults_before
        assert duplicated >= 20
        assert delta(host.drops(), before) == {"replayed": duplicated}
        got = [e.data for e in host.data()]
        assert got[:2] == [b"secret-from-b", b"reliable-from-b"]
        assert sorted(got[2:]) == sorted(b"twice-%d" % k for k in range(20))
        # Reliable ones also in order.
        assert [d for d in got[2:] if int(d.split(b"-")[1]) % 2 == 0] == [b"twice-%d" % k for k in range(0, 20, 2)]
        await still_works(stations)


@pytest.mark.parametrize("version", VERSIONS)
async def test_insider_claiming_another_station(version: str, autojump_clock: trio.testing.MockClock) -> None:
    """c holds the session key and sends authentic, fresh packets that claim to be b."""
    async with three_stations(version) as (_, stations):
        host, b, c = stations
        await c.node.send(0, b"honest-from-c", reliable=False)
        await settle(lambda: len(host.data()) == 1)
        valid = captured(c, host, b"honest-from-c")
        codec = c.session.codec
        assert codec is not None
        c_ip = c.node.address[0]
        packet = codec.decode(valid, c_ip)
        b_peer = host.session.peers[b.node.address]
        c_peer = host.session.peers[c.node.address]
        if version == "5.18":
            # Header: the connection id b uses; message: b's constant id.
            assert b_peer.peer_conn_id != c_peer.peer_conn_id
            claims = [({"connection_id": b_peer.peer_conn_id}, {}), ({}, {"source_constant_id": b_peer.constant_id})]
        else:
            # 5.29 messages carry no constant id; the header names the sender's variable id.
            claims = [({"source_variable_id": b_peer.variable_id}, {})]
        lies = []
        for k, (header_change, message_change) in enumerate(claims):
            # A fresh header nonce and packet id, so it is no replay.
            header = attrs.evolve(
                packet.header,
                nonce=(0xF00D0000 + k).to_bytes(8, "big"),
                packet_id=(packet.header.packet_id + 1 + k) & 0xFFFF if packet.header.packet_id else 0,
                **header_change,
            )
            messages = tuple(attrs.evolve(m, payload=b"forged-%d" % k, **message_change) for m in packet.messages)
            lies.append(codec.encode(Packet(header=header, messages=messages, footer=packet.footer), c_ip))
        before = host.drops()
        now = trio.current_time()
        for lie in lies:
            host.session.receive_datagram(lie, c.node.address, now)
        assert delta(host.drops(), before) == {"identity_mismatch": len(lies)}
        await settle()
        assert [e.data for e in host.data()] == [b"honest-from-c"]
        await still_works(stations)


# ---------------------------------------------------------------- sans-IO pair


def member_pair(version: str) -> tuple[MeshSession, MeshSession, list[bytes]]:
    """A host and one member, connected; returns them and every datagram the member sent.

    The last datagram carries the unreliable message b"pay once" the host has received.
    """
    host = MeshSession(
        NodeConfig(version=version, session_key=KEY, bind=("127.0.0.1", PORT), seed=1), ("127.0.0.1", PORT), now=0.0
    )
    member = MeshSession(
        NodeConfig(version=version, session_key=KEY, bind=("127.0.0.2", PORT), seed=2), ("127.0.0.2", PORT), now=0.0
    )
    host.create(0.0)
    member.join(host.local_address, 0.0)
    sent: list[bytes] = []
    for step in range(1, 40):
        now = step * 0.001
        for src, dst in ((host, member), (member, host)):
            for data, _ in src.datagrams_to_send(now):
                if src is member:
                    sent.append(data)
                dst.receive_datagram(data, src.local_address, now)
    assert member.index == 1 and host.stations()[1].state == "connected"
    member.send(0, b"pay once", reliable=False, now=1.0)
    for data, _ in member.datagrams_to_send(1.0):
        sent.append(data)
        host.receive_datagram(data, member.local_address, 1.0)
    assert [e.data for e in iter(host.next_event, None) if isinstance(e, DataReceived)] == [b"pay once"]
    return host, member, sent


def refused(host: MeshSession, data: bytes, source: tuple[str, int], now: float) -> bool:
    """Feed one datagram; True when it was counted as exactly one drop and delivered nothing."""
    before = sum(host.drops.values())
    host.receive_datagram(data, source, now)
    host.datagrams_to_send(now)
    delivered = [e for e in iter(host.next_event, None) if isinstance(e, DataReceived)]
    return sum(host.drops.values()) == before + 1 and not delivered


@pytest.mark.parametrize("version", VERSIONS)
def test_replay_with_unauthenticated_header_bytes_changed(version: str) -> None:
    host, member, sent = member_pair(version)
    paid = sent[-1]
    accepted = []
    for i in range(len(paid)):
        for mask in (0x01, 0x80):
            forged = bytearray(paid)
            forged[i] ^= mask
            if not refused(host, bytes(forged), member.local_address, 2.0):
                accepted.append((i, mask))
    assert accepted == []


@pytest.mark.parametrize("version", VERSIONS)
def test_replayed_connection_request_is_refused(version: str) -> None:
    host, member, sent = member_pair(version)
    assert refused(host, sent[0], member.local_address, 2.0)
    assert host.drops["replayed"] >= 1


@pytest.mark.parametrize("version", VERSIONS)
def test_later_datagrams_replayed_verbatim_are_refused(version: str) -> None:
    host, member, sent = member_pair(version)
    before = host.drops["replayed"]
    for data in sent[1:]:
        assert refused(host, data, member.local_address, 2.0)
    assert host.drops["replayed"] - before == len(sent) - 1


_PAIRS = {v: member_pair(v) for v in VERSIONS}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.sampled_from(VERSIONS),
    st.binary(max_size=400),
    st.sampled_from([("127.0.0.2", PORT), ("127.0.0.3", PORT), ("127.0.0.2", PORT + 1)]),
)
def test_random_bytes_from_anywhere_are_one_drop_each(version: str, data: bytes, source: tuple[str, int]) -> None:
    host, _member, _sent = _PAIRS[version]
    assert refused(host, data, source, 2.0)  # never raises, counted once, nothing delivered


@pytest.mark.parametrize("version", VERSIONS)
def test_mutated_datagrams_from_a_stranger_are_refused(version: str) -> None:
    host, _member, sent = member_pair(version)
    stranger = ("127.0.0.3", PORT)
    for data in sent:
        for i in range(len(data)):
            forged = bytearray(data)
            forged[i] ^= 0x10
            assert refused(host, bytes(forged), stranger, 2.0), i
    assert set(host.drops) <= {"malformed", "bad_tag", "not_member"}


def with_packet_id(member: MeshSession, data: bytes, packet_id: int) -> bytes:
    """*data* with another packet id: only the packet id bytes change, so no key is needed to do it."""
    codec = member.codec
    assert codec is not None
    packet = codec.decode(data, member.local_address[0])
    out = codec.encode(attrs.evolve(packet, header=attrs.evolve(packet.header, packet_id=packet_id)), member.local_address[0])
    assert len(out) == len(data) and 1 <= sum(x != y for x, y in zip(out, data, strict=True)) <= 2
    return out


@pytest.mark.parametrize("version", VERSIONS)
def test_forged_packet_id_cannot_cut_off_a_member(version: str) -> None:
    host, member, sent = member_pair(version)
    codec = member.codec
    assert codec is not None
    packet_id = codec.decode(sent[-1], member.local_address[0]).header.packet_id
    assert packet_id  # both profiles number their packets
    host.receive_datagram(with_packet_id(member, sent[-1], (packet_id + 1000) & 0xFFFF), member.local_address, 2.0)
    for _ in iter(host.next_event, None):
        pass
    member.send(0, b"still here", reliable=False, now=2.5)
    for data, _ in member.datagrams_to_send(2.5):
        host.receive_datagram(data, member.local_address, 2.5)
    assert [e.data for e in iter(host.next_event, None) if isinstance(e, DataReceived)] == [b"still here"]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_flood_of_replayed_connection_requests_is_bounded(version: str) -> None:
    """The captured request authenticates from any port of its IP: it opens no provisional peer on any other port."""
    host, member, sent = member_pair(version)
    flood = 300
    for port in range(20000, 20000 + flood):
        host.receive_datagram(sent[0], ("127.0.0.2", port), 2.0)
    answered = {addr for _, addr in host.datagrams_to_send(2.0)}
    strangers = [addr for addr in host.peers if addr != member.local_address]
    # The member's first contact carried that nonce from that IP already: every port is a replay.
    assert strangers == []
    assert host.drops["replayed"] == flood
    assert len(answered - {member.local_address}) <= len(strangers)
    assert len(host.table) == 2 and not any(isinstance(e, DataReceived) for e in iter(host.next_event, None))
    # None of them completes a handshake: they are forgotten after the station timeout,
    # while the real member, which keeps talking, stays.
    now = 2.0
    while now < 2.0 + 2 * member.config.station_timeout:
        now += 0.25
        for data, _ in member.datagrams_to_send(now):
            host.receive_datagram(data, member.local_address, now)
        for data, addr in host.datagrams_to_send(now):
            if addr == member.local_address:
                member.receive_datagram(data, host.local_address, now)
        for s in (host, member):
            t = s.get_timer()
            if t is not None and t <= now:
                s.handle_timer(now)
    assert set(host.peers) == {member.local_address}
    assert len(host.table) == 2 and host.stations()[1].state == "connected"


def test_a_connection_request_from_the_nodes_own_address_is_dropped_as_its_own() -> None:
    """A datagram whose source is the node's own address (reflected, or the node asking itself) is not
    a station: it is dropped and counted as ``own_address``, never answered (no "not the host")."""
    node = MeshSession(NodeConfig(version="5.18", session_key=KEY, bind=("127.0.0.1", PORT), seed=1),
                       ("127.0.0.1", PORT), now=0.0)  # fmt: skip
    other = MeshSession(NodeConfig(version="5.18", session_key=KEY, bind=("127.0.0.1", PORT + 1), seed=2),
                        ("127.0.0.1", PORT + 1), now=0.0)  # fmt: skip
    node.join(("127.0.0.1", PORT + 2), 0.0)  # a member, not the host: what used to answer "not the host"
    other.join(node.local_address, 0.0)
    request = [data for data, addr in other.datagrams_to_send(0.0) if addr == node.local_address]
    assert request
    node.datagrams_to_send(0.0)
    node.receive_datagram(request[0], node.local_address, 0.001)
    assert node.statistics()["drops"] == {"own_address": 1}
    assert node.local_address not in node.peers
    assert [addr for _, addr in node.datagrams_to_send(0.002)] == []


def test_datagrams_in_flight_when_a_station_left_are_no_drops_and_later_ones_are() -> None:
    """A station that left cleanly: what it sent before its leave but arrives after it (overtaken, or
    slower through a relay) is discarded and counted as ``after_leave``, not as a drop of a stranger's
    traffic; a replay of it, or anything from it after a station timeout, is still a drop."""
    host, member, _ = member_pair("5.18")
    in_flight = []
    for k in range(3):
        member.send(0, b"in flight %d" % k, reliable=False, now=2.0)
        in_flight += [data for data, _ in member.datagrams_to_send(2.0)]
    member.leave(2.0)
    for data, _ in member.datagrams_to_send(2.0):
        host.receive_datagram(data, member.local_address, 2.001)
    assert [e.reason for e in iter(host.next_event, None) if isinstance(e, StationLeft)] == ["left"]
    host.receive_datagram(in_flight[0], member.local_address, 2.002)
    assert host.statistics()["drops"] == {}
    assert host.statistics()["counters"]["after_leave"] == 1  # type: ignore[index]
    host.receive_datagram(in_flight[0], member.local_address, 2.003)  # the same again: a replay
    late = 2.0 + host.config.station_timeout + 0.1
    host.receive_datagram(in_flight[1], member.local_address, late)
    assert host.statistics()["drops"] == {"replayed": 1, "not_member": 1}


def test_a_leaving_station_sends_no_new_data() -> None:
    """Once it asked to leave, a station's application data would reach stations that let it go:
    it is not sent (broadcast reaches no station, send finds none), and the leave completes."""
    host, member, _ = member_pair("5.18")
    member.leave(2.0)
    assert member.broadcast(b"late", reliable=True, now=2.0) == 0
    assert member.broadcast(b"late", reliable=False, now=2.0) == 0
    with pytest.raises(KeyError, match="leaving"):
        member.send(0, b"late", reliable=True, now=2.0)
    # The protocols the node runs itself (LDN's Local protocol, a game's own sub-protocol) still speak
    # while it leaves: only application data stops.
    member.send_protocol(0, Proto.UNRELIABLE, 1, b"protocol")
    for step in range(1, 20):
        now = 2.0 + step * 0.001
        for src, dst in ((member, host), (host, member)):
            for data, _ in src.datagrams_to_send(now):
                dst.receive_datagram(data, src.local_address, now)
    assert member.membership.closed and host.statistics()["drops"] == {}
