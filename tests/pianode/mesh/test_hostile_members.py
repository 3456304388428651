"""A malicious member of a 5.7-5.45 or 6.32+ mesh, sans-IO: it holds the session key and sends from its
own address messages meant to change what the others believe about the mesh or about other links.

Each test forms a mesh in the in-memory harness, has the member send what it forges through its own
link (its own session and key), and asserts what the others keep: their RTT estimates, a joiner's join.
"""

from __future__ import annotations

import random

import attrs
import pytest
from mesh_harness import BatchHarness, all_connected, form, recorder

from pianode.mesh import legacy, wire
from pianode.mesh.config import NodeConfig
from pianode.mesh.events import DataReceived
from pianode.mesh.session import MeshSession
from protocols.pia.versions import Proto

VERSIONS = [("5.18", "lan"), ("5.29", "lan"), ("5.45", "lan"), ("6.32", "ldn"), ("6.41", "ldn")]


def _send_rtt(rogue: MeshSession, to: MeshSession, *, response: bool, ticks: int) -> None:
    link = rogue.links.peers[to.local_address]
    rogue.enqueue(link, Proto.RTT, legacy.rtt_port(rogue.profile), wire.encode_rtt(rogue.profile, response, ticks))


@pytest.mark.parametrize(("version", "network"), VERSIONS)
def test_rtt_answers_to_no_request_do_not_skew_the_rtt(version: str, network: str) -> None:
    """A member answers RTT requests the host never sent (spec §5.6: a response echoes the requester's
    time): one claiming the host asked at its start (a round trip of the whole session), one claiming it
    asked this instant (no round trip at all).  The host's estimate of the member stays what real probes
    gave, and each forged answer is counted as a drop."""
    h = BatchHarness(3, version=version, network=network)
    host, rogue, _ = form(h)
    h.run_for(20.0)  # real probes give real samples
    estimate = host.links.peers[rogue.local_address].rtt
    samples, smoothed, minimum = estimate.samples, estimate.smoothed, estimate.minimum
    assert samples and smoothed is not None and smoothed < 0.1 and minimum is not None
    before = host.drops["unexpected"]
    asked = host.links.peers[rogue.local_address].rtt_asked
    now_ticks = host.rtt_ticks(h.now)
    # (Times of no request waiting: the host's probes leave on a grid of instants, and h.now is one of
    # them, so "just now" may be the time of a real request, whose answer is a real sample.)
    just_now = [t for t in range(now_ticks, now_ticks - 50, -1) if t not in asked][:8]
    for i, t in enumerate(just_now):
        _send_rtt(rogue, host, response=True, ticks=i)  # "asked" 0-7 us after the host started
        _send_rtt(rogue, host, response=True, ticks=t)  # "asked" just now
    h._send_all()
    h.run_for(0.05)
    assert estimate.smoothed is not None and estimate.smoothed < 0.1 and estimate.minimum == minimum
    assert host.drops["unexpected"] - before == 16
    h.run_for(20.0)  # and the real probes go on
    assert estimate.samples > samples and estimate.smoothed is not None and estimate.smoothed < 0.1


@pytest.mark.parametrize(("version", "network"), VERSIONS)
def test_a_real_rtt_answer_counts_once(version: str, network: str) -> None:
    """A member that answers the host's request twice (the second a copy with the request's time)
    gives one sample: the request is answered, the copy is dropped."""
    h = BatchHarness(2, version=version, network=network)
    host, member = form(h)
    asked: list[int] = []
    real = member.links.on_rtt

    def on_rtt(peer, payload, now):  # type: ignore[no-untyped-def]
        response, ticks = wire.decode_rtt(member.profile, payload)
        if not response and peer.address == host.local_address:
            asked.append(ticks)
        real(peer, payload, now)

    member.links.on_rtt = on_rtt  # type: ignore[method-assign]
    assert h.run_until(lambda: bool(asked), 20.0)
    member.links.on_rtt = real  # type: ignore[method-assign]
    h.run_for(0.5)
    before = host.drops["unexpected"]
    _send_rtt(member, host, response=True, ticks=asked[0])
    h._send_all()
    h.run_for(0.05)
    assert host.drops["unexpected"] - before == 1


@pytest.mark.parametrize(("version", "network"), VERSIONS)
def test_a_join_denial_from_a_member_does_not_end_a_join(version: str, network: str) -> None:
    """A member connects to a station that is joining through the host and tells it the join is denied
    (the mesh protocol's join denial, spec §5.4): only the host the station asked answers its join, so
    the station joins all the same and the denial is counted as not the host's."""
    h = BatchHarness(3, version=version, network=network)
    host, rogue, joiner = h.sessions
    form(h, [0, 1])
    blocked = {"on": True}

    def hook(data: bytes, s: tuple[str, int], d: tuple[str, int]) -> bytes | None:
        # The joiner's first requests to the host are lost, so the member's denial comes first.
        return None if blocked["on"] and s == joiner.local_address and d == host.local_address else data

    h.hook = hook
    joiner.join(host.local_address, h.now)
    rogue.handshake.connect(joiner.local_address, h.now)
    assert h.run_until(lambda: rogue.links.peers.get(joiner.local_address) is not None
                       and rogue.links.peers[joiner.local_address].connected, 5.0)
    rogue.enqueue(rogue.links.peers[joiner.local_address], Proto.MESH, 0, wire.encode_join_deny(rogue.membership.profile, wire.DENY_MESH_FULL))
    h._send_all()
    h.run_for(0.1)
    blocked["on"] = False
    h.hook = None
    assert h.run_until(lambda: all_connected([host, rogue, joiner]), 30.0), joiner.failure
    assert joiner.failure is None and joiner.drops["not_host"] >= 1


def _seed_for_variable_id(config: NodeConfig, address: tuple[str, int], wanted: int, *, after: int = -1) -> int:
    """A seed (above *after*) whose session draws *wanted* as its (16-bit, 6.x) variable id."""
    for seed in range(after + 1, after + (1 << 20)):
        if wire.local_identity(config, address, random.Random(seed)).variable_id == wanted:
            return seed
    raise AssertionError("no seed found")


@pytest.mark.parametrize("version", ["6.32", "6.41"])
def test_a_station_with_a_members_variable_id_is_not_admitted(version: str) -> None:
    """From 6.32 a header nonce names its receiver by variable id (pianode.mesh.replay.receiver_bound_nonce),
    and in every 6.x version the variable id, 16 bits, is how a group packet's footer names a receiver
    (spec §1.6).  A joiner whose variable id is a member's (by chance, 1 in 65534 a pair, or chosen) would
    make what the mesh seals for one of them good for the other: a datagram the host sent the joiner,
    replayed to the member from the host's address, was taken as the host's to the member.  The host
    refuses its connection, and the mesh goes on."""
    h = BatchHarness(3, version=version, network="ldn")
    host, member, joiner = h.sessions
    form(h, [0, 1])
    address = joiner.local_address
    config = attrs.evolve(joiner.config, seed=_seed_for_variable_id(joiner.config, address, member.variable_id))
    joiner = MeshSession(config, address, now=h.now)
    assert joiner.variable_id == member.variable_id
    h.sessions[2] = h.by_addr[address] = joiner
    captured: list[bytes] = []

    h.hook = recorder(captured, host.local_address, address)
    joiner.join(host.local_address, h.now)
    h.run_until(lambda: joiner.closed or all_connected([host, member, joiner]), 30.0)
    if joiner.joined and joiner.index is not None:  # (the attack this refusal prevents)
        host.send(joiner.index, b"for the joiner", reliable=True, now=h.now)
        host.send(joiner.index, b"frame for the joiner", reliable=False, now=h.now)
        h.run_for(0.5)
        for data in captured:
            member.receive_datagram(data, host.local_address, h.now)
        h._send_all()
        got = [e.data for e in h.events[1] if isinstance(e, DataReceived) and e.source_index == host.index]
        assert got == [], got
    assert joiner.closed and not joiner.joined
    assert joiner.failure is not None and "the host refused the connection" in joiner.failure
    assert host.drops["identity_mismatch"] >= 1
    assert all_connected([host, member]) and len(host.table) == 2


@pytest.mark.parametrize("version", ["6.32", "6.41"])
def test_of_two_joiners_with_one_variable_id_one_is_admitted(version: str) -> None:
    """Two stations of one variable id ask to join at once: both connect (neither is a member yet), the
    first join request admits its station, and the second is denied ('variable id in use')."""
    h = BatchHarness(3, version=version, network="ldn")
    host, first, second = h.sessions
    host.create(h.now)
    address = second.local_address
    config = attrs.evolve(second.config, seed=_seed_for_variable_id(second.config, address, first.variable_id))
    second = MeshSession(config, address, now=h.now)
    h.sessions[2] = h.by_addr[address] = second
    first.join(host.local_address, h.now)
    second.join(host.local_address, h.now)
    assert h.run_until(lambda: second.closed, 30.0)
    h.run_for(1.0)
    assert second.failure is not None and "join denied: variable id in use" in second.failure
    assert all_connected([host, first]) and len(host.table) == 2 and host.counters["joins_denied"] == 1


@pytest.mark.parametrize(("version", "network"), VERSIONS)
def test_what_a_member_sent_a_stations_last_incarnation_is_not_taken_by_the_next(version: str, network: str) -> None:
    """C leaves and a new session joins from C's address, and gets C's index back.  What B sent the old C
    (captured, its frames and a reliable message), replayed to the new C from B's address, is not
    delivered: up to 5.45 nothing under the tag names the receiver's identity (the destination bits
    name its index, which the new station holds again; spec §2.5, §3.2), and B's one nonce counter
    made what it sent the old C look new to the new C's fresh replay filter (within its window).
    From 6.32 the nonce names the receiver's variable id: the new session draws the old one's here."""
    h = BatchHarness(3, version=version, network=network)
    host, b, c = form(h)
    assert c.index is not None
    old_index = c.index
    captured: list[bytes] = []

    h.hook = recorder(captured, b.local_address, c.local_address)
    for i in range(3):
        b.send(c.index, b"frame %d for the old C" % i, reliable=False, now=h.now)
    b.send(c.index, b"reliable for the old C", reliable=True, now=h.now)
    h.run_for(0.2)
    h.hook = None
    assert captured
    c.leave(h.now)
    assert h.run_until(lambda: c.closed and len(host.table) == 2 and len(b.table) == 2, 10.0)
    seed = 4242
    if version >= "6":
        seed = _seed_for_variable_id(c.config, c.local_address, c.variable_id, after=c.config.seed or 0)
    new = MeshSession(attrs.evolve(c.config, seed=seed), c.local_address, now=h.now)
    h.sessions[2] = h.by_addr[c.local_address] = new
    new.join(host.local_address, h.now)
    assert h.run_until(lambda: all_connected([host, b, new]), 30.0)
    assert new.index == old_index
    n0 = len(h.events[2])
    for data in captured:
        new.receive_datagram(data, b.local_address, h.now)
    h._send_all()
    h.run_for(1.0)
    got = [e.data for e in h.events[2][n0:] if isinstance(e, DataReceived)]
    assert got == [], got
    b.send(new.index, b"for the new C", reliable=True, now=h.now)
    h.run_for(1.0)
    assert [e.data for e in h.events[2][n0:] if isinstance(e, DataReceived)] == [b"for the new C"]


@pytest.mark.parametrize("version", ["6.32", "6.41"])
def test_a_station_posing_with_a_members_variable_id_cannot_get_acks_that_drop_its_data(version: str) -> None:
    """A key holder connects to B directly (no join) naming C's variable id, and sends B reliable data.
    B's acks, sealed for C's variable id (receiver_bound_nonce), replayed to C from B's address, would
    acknowledge to C the ids of C's own segments to B that B never received: C would drop them for good.
    B refuses a connection that names another station's variable id, so it acks nothing of the poser's;
    C's message reaches B once the loss ends."""
    h = BatchHarness(4, version=version, network="ldn")
    host, b, c, poser = h.sessions
    form(h, [0, 1, 2])
    address = poser.local_address
    config = attrs.evolve(poser.config, seed=_seed_for_variable_id(poser.config, address, c.variable_id))
    poser = MeshSession(config, address, now=h.now)
    h.sessions[3] = h.by_addr[address] = poser
    assert _poser_takes_acks(h, poser, b, c) == [b"C's message to B"]
    assert not any(p.connected for p in poser.links.peers.values()) and all_connected([host, b, c])


def _poser_takes_acks(h: BatchHarness, poser: MeshSession, b: MeshSession, c: MeshSession, *, mesh: bool = False) -> list[bytes]:
    """*poser* (a key holder of the mesh's network that never joins) connects to B and sends B one reliable
    segment, while C's datagrams to B are lost and C has one reliable message in flight to B; what B sends
    the poser is replayed to C from B's address, then the loss ends.  Returns what B got from C (*mesh*:
    on the mesh protocol's window, a join request; what B's window took of C's, as a count)."""
    poser.create(h.now, network_id=b.handshake.network_id)  # (a session of its own, in our network: it never joins)
    link = poser.handshake.connect(b.local_address, h.now)
    address = poser.local_address
    h.run_for(1.0)
    from_c = b.links.peers[c.local_address].mesh_window
    assert from_c is not None
    delivered = from_c.statistics().delivered
    captured: list[bytes] = []
    lossy = {"on": True}

    def hook(data: bytes, s: tuple[str, int], d: tuple[str, int]) -> bytes | None:
        if s == b.local_address and d == address:
            captured.append(data)
        if lossy["on"] and s == c.local_address and d == b.local_address:
            return None  # C's datagrams to B are lost for a while
        return data

    h.hook = hook
    assert b.index is not None and c.index is not None
    to_b = c.links.peers[b.local_address]
    assert to_b.mesh_window is not None
    if mesh:
        c.outbox.window_send(to_b, to_b.mesh_window, wire.encode_join_request(c.membership.profile, c.local_address, 7), h.now)
        c.links.touched[to_b] = None
    else:
        c.send(b.index, b"C's message to B", reliable=True, now=h.now)
    if link.connected:
        window = link.mesh_window if mesh else link.data_window
        assert window is not None
        # As many segments as C has in flight to B: B's ack of them is an ack C's window can take.
        poser.outbox.window_send(link, window, wire.encode_join_request(poser.membership.profile, address, 9) if mesh else b"poser's", h.now)
        poser.links.touched[link] = None
    h.run_for(0.5)
    for data in captured:
        c.receive_datagram(data, b.local_address, h.now)
    h._send_all()
    h.run_for(0.5)  # (what C had in flight is lost too)
    lossy["on"] = False
    h.run_for(5.0)
    h.hook = None
    if mesh:
        from_c = b.links.peers[c.local_address].mesh_window
        assert from_c is not None
        return [b"mesh"] * (from_c.statistics().delivered - delivered)
    return [e.data for e in h.events[h.sessions.index(b)] if isinstance(e, DataReceived) and e.source_index == c.index]


@pytest.mark.parametrize(("version", "network"), VERSIONS)
def test_acks_sent_a_station_without_an_index_do_not_drop_a_members_data(version: str, network: str) -> None:
    """What B sends a station without an index carries destination 0 (spec §2.5: it has none), so nothing
    under the tag says it is not for C.  B's acks of a key holder's reliable data, replayed to C from B's
    address, acknowledged C's own segments to B, which B never received and C then dropped for good.
    C's message reaches B once the loss ends, and the mesh stays whole."""
    h = BatchHarness(4, version=version, network=network)
    host, b, c, poser = h.sessions
    form(h, [0, 1, 2])
    assert _poser_takes_acks(h, poser, b, c) == [b"C's message to B"]
    assert all_connected([host, b, c])


@pytest.mark.parametrize(("version", "network"), VERSIONS)
def test_mesh_window_acks_sent_a_station_without_an_index_do_not_drop_a_members_messages(version: str, network: str) -> None:
    """The same on the mesh protocol's reliable window (port 1, spec §5.4), which carries the host's
    updates and the members' leave requests: C's message on it still reaches B."""
    h = BatchHarness(4, version=version, network=network)
    host, b, c, poser = h.sessions
    form(h, [0, 1, 2])
    assert _poser_takes_acks(h, poser, b, c, mesh=True) == [b"mesh"]
    assert all_connected([host, b, c])


@pytest.mark.parametrize(("version", "network"), VERSIONS)
def test_a_vanished_member_is_not_kept_alive_by_what_it_sent_a_station_without_an_index(version: str, network: str) -> None:
    """A key holder stays connected to B without joining and collects what B sends it (keep-alives, RTT
    probes: destination 0, spec §2.5, as it has no index).  B vanishes; those datagrams, replayed to the
    host and to C from B's address one a second, are new to their replay filters (B's one counter ran
    over them, below what B last sent them) and kept B in the mesh while they lasted.  Only a datagram
    beyond the highest nonce seen from a station shows it is still there: B is dropped at its timeout."""
    h = BatchHarness(4, version=version, network=network)
    host, b, c, poser = h.sessions
    form(h, [0, 1, 2])
    poser.create(h.now, network_id=b.handshake.network_id)  # (a session of its own, in our network: it never joins)
    poser.handshake.connect(b.local_address, h.now)
    captured: list[bytes] = []

    h.hook = recorder(captured, b.local_address, poser.local_address)
    h.run_for(12.0)
    h.hook = None
    assert len(captured) > 10
    h.dead.add(b.local_address)
    gone = h.now
    timeout = host.config.station_timeout
    for data in captured[: int(3 * timeout)]:
        for target in (host, c):
            target.receive_datagram(data, b.local_address, h.now)
        h.run_for(1.0)
        if b.local_address not in c.links.peers and b.local_address not in host.links.peers:
            break
    assert b.local_address not in host.links.peers and b.local_address not in c.links.peers
    assert h.now - gone <= timeout + 2.0
    assert all_connected([host, c]) and len(host.table) == 2


@pytest.mark.parametrize(("version", "network"), [("5.11", "lan"), ("5.18", "lan"), ("5.29", "ldn"), ("5.45", "nex")])
def test_the_join_hosts_update_is_taken_before_its_lost_join_response_arrives(version: str, network: str) -> None:
    """The host's join response is lost, its update mesh (the mesh window, port 1) is not: the joiner
    knows no index of the host yet.  Window data from a station without an index is refused (see
    test_acks_sent_a_station_without_an_index_do_not_drop_a_members_data), but not the host we join:
    refused, our join waited on the update's resends, and under loss the host dropped us for it."""
    h = BatchHarness(2, version=version, network=network)
    host, joiner = h.sessions
    host.create(h.now)
    mesh = host.outbox.protocol_ids[Proto.MESH]
    lost: list[bytes] = []

    def hook(data: bytes, s: tuple[str, int], d: tuple[str, int]) -> bytes | None:
        codec = host.codec
        if s == host.local_address and not lost and codec is not None:
            packet = codec.decode(data, s[0])
            kept = tuple(attrs.evolve(m, presence=None) for m in packet.messages  # (each with all its fields)
                         if not (m.protocol_type == mesh and m.protocol_port == 0))
            if len(kept) < len(packet.messages):  # the first datagram with the join response: without it
                lost.append(data)
                return codec.encode(attrs.evolve(packet, messages=kept), s[0]) if kept else None
        return data

    h.hook = hook
    joiner.join(host.local_address, h.now)
    assert h.run_until(lambda: all_connected([host, joiner]), 10.0)
    assert lost
    assert joiner.drops.get("unexpected", 0) == 0
    window = host.links.peers[joiner.local_address].mesh_window
    assert window is not None and window.statistics().retransmitted == 0
