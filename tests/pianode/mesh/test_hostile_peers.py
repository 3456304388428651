"""Attacks on a formed mesh, sans-IO: redirected replays, a malicious member, replayed first contacts.

Each test forms a mesh in the in-memory harness, mounts one attack with what
the attacker has (captured datagrams, or a member's own session and key), and
asserts the figure the hostile-peers issue asks for: nothing redirected is
delivered and later data still arrives exactly once, tables unchanged and no
foreign address contacted, no station dropped, amplification bounded.
"""

from __future__ import annotations

import types
from collections.abc import Callable

import pytest
from mesh_harness import BatchHarness, MeshHarness, all_connected, form, recorder

from pianode.mesh import wire
from pianode.mesh.config import NodeConfig
from pianode.mesh.events import DataReceived
from pianode.mesh.session import MeshSession
from pianode.mesh.table import MeshTable, StationEntry
from protocols.pia.message import Message
from protocols.pia.packet_values import Packet
from protocols.pia.versions import Proto

FOREIGN = ("127.0.0.99", 4321)


def _received(h: MeshHarness, i: int) -> list[tuple[int, bytes, bool]]:
    return [(e.source_index, e.data, e.reliable) for e in h.events[i] if isinstance(e, DataReceived)]


def _copy_from_now(h: MeshHarness, src: MeshSession, dst: MeshSession) -> list[bytes]:
    """From now until ``h.hook`` is cleared, a copy of every datagram *src* sends *dst* (they are still delivered)."""
    captured: list[bytes] = []

    h.hook = recorder(captured, src.local_address, dst.local_address)
    return captured


def _capture(h: MeshHarness, src: MeshSession, dst: MeshSession, seconds: float) -> list[bytes]:
    """Run *seconds*, keeping a copy of every datagram *src* sends *dst* (they are still delivered)."""
    captured = _copy_from_now(h, src, dst)
    h.run_for(seconds)
    h.hook = None
    return captured


def _watch_addresses(h: MeshHarness) -> list[tuple[str, int]]:
    """Every destination a session sends to from now on that is not a session of the harness."""
    foreign: list[tuple[str, int]] = []
    known = {s.local_address for s in h.sessions}

    def send_all() -> None:
        for s in h.sessions:
            if s.local_address in h.dead:
                continue
            out = s.datagrams_to_send(h.now)
            for data, dst in out:
                if dst not in known and dst != h.group:
                    foreign.append(dst)
                else:
                    h._route(data, s.local_address, dst)
            while (ev := s.next_event()) is not None:
                h.events[h.sessions.index(s)].append(ev)

    h._send_all = send_all  # type: ignore[method-assign]
    return foreign


@pytest.mark.parametrize("version", ["5.18", "5.29", "5.45"])
def test_a_datagram_redirected_to_another_member_is_not_delivered(version: str) -> None:
    """B's datagrams to C, replayed to A from B's own address (no key needed): A delivers none of
    them, counts them, and B's next reliable message to A arrives exactly once."""
    _redirect_and_check(version, "lan")


@pytest.mark.parametrize(
    ("version", "network"), [("6.20", "lan"), ("6.30", "ldn"), ("6.32", "ldn"), ("6.41", "ldn"), ("4.10", "ldn"), ("5.6", "lan")]
)
def test_a_datagram_redirected_to_another_member_is_not_delivered_in_6x_and_before_5_7(version: str, network: str) -> None:
    """The same in 6.x, where from 6.32 no message names its receivers and neither the header nor the
    nonce does so under the tag (spec §2.1, §3.1, §3.2), and in the ECB + HMAC versions."""
    _redirect_and_check(version, network)


def _redirect_and_check(version: str, network: str) -> None:
    h = BatchHarness(3, version=version, network=network)
    a, b, c = form(h)
    assert a.index is not None and b.index is not None and c.index is not None
    b.send(c.index, b"reliable for C", reliable=True, now=h.now)
    b.send(c.index, b"frame for C", reliable=False, now=h.now)
    captured = _capture(h, b, c, 0.5)
    assert captured
    before = sum(a.drops.values())
    for data in captured:
        a.receive_datagram(data, b.local_address, h.now)
    h._send_all()
    assert [r for r in _received(h, 0) if r[0] == b.index] == []
    assert sum(a.drops.values()) - before == len(captured)
    b.send(a.index, b"genuine", reliable=True, now=h.now)
    h.run_for(2.0)
    assert [r for r in _received(h, 0) if r[0] == b.index] == [(b.index, b"genuine", True)]


def _forge_update(member: MeshSession, *, host_index: int, entries: list[StationEntry], counter: int) -> list[bytes]:
    table = MeshTable(max_stations=member.config.max_stations)
    table.replace_all(entries, host_index, counter)
    return wire.encode_update_mesh(member.profile, table, member.config.mtu)


@pytest.mark.parametrize("version", ["5.18", "5.29"])
def test_a_member_cannot_make_itself_host(version: str) -> None:
    """A member (with the key) sends every other station an update that names it host and
    moves index 0 to a foreign address: every table stays as it was, nobody contacts the address."""
    h = BatchHarness(4, version=version)
    group = form(h)
    host, rogue = group[0], group[2]
    before = [[(e.index, e.address) for e in s.table.entries()] for s in group]
    foreign = _watch_addresses(h)
    entries = [
        StationEntry(0, 0x1234, 0x5678, FOREIGN, 0),
        *[StationEntry(e.index, e.constant_id, e.variable_id, e.address, e.join_order) for e in rogue.table.entries() if e.index != 0],
    ]
    payloads = _forge_update(rogue, host_index=rogue.index or 0, entries=entries, counter=rogue.table.update_counter + 5)
    for peer in rogue.links.members():
        assert peer.mesh_window is not None
        for payload in payloads:
            rogue.outbox.window_send(peer, peer.mesh_window, payload, h.now)
        rogue.links.touched[peer] = None
    h.run_for(3.0)
    assert [[(e.index, e.address) for e in s.table.entries()] for s in group if s is not rogue] == [
        rows for s, rows in zip(group, before) if s is not rogue
    ]
    assert all(s.table.host_index == 0 for s in group if s is not rogue) and host.is_host()
    assert foreign == []
    assert sum(s.drops["not_host"] for s in group if s is not rogue) >= len(group) - 1


@pytest.mark.parametrize("version", ["5.18", "5.29"])
def test_the_rightful_successor_still_takes_over(version: str) -> None:
    """The rule that refuses a member's update keeps migration working: the host leaves, index 1 takes over,
    and a newcomer joins through it."""
    h = BatchHarness(5, version=version)
    group = form(h, [0, 1, 2, 3])
    group[0].leave(h.now)
    assert h.run_until(lambda: all(s.table.host_index == 1 and len(s.table) == 3 for s in group[1:]), 20.0)
    late = h.sessions[4]
    late.join(group[1].local_address, h.now)
    assert h.run_until(lambda: all_connected([*group[1:], late]), 20.0)


@pytest.mark.parametrize("version", ["5.18", "5.29"])
def test_a_join_response_that_does_not_list_the_joiner_is_a_failed_join(version: str) -> None:
    """A host whose join response leaves the joiner out of the table (and lists a foreign address)
    is not followed: the join fails and the joiner contacts nobody it names."""
    h = BatchHarness(2, version=version)
    host, joiner = h.sessions
    foreign = _watch_addresses(h)
    host.create(h.now)
    real = wire.encode_join_response

    def forged(profile, table, joiner_index, max_stations, mtu):  # type: ignore[no-untyped-def]
        fake = MeshTable(max_stations=max_stations)
        fake.replace_all([StationEntry(0, 1, 2, host.local_address, 0), StationEntry(1, 3, 4, FOREIGN, 1)], 0, 2)
        return real(profile, fake, joiner_index, max_stations, mtu)

    wire.encode_join_response = forged  # type: ignore[assignment]
    try:
        joiner.join(host.local_address, h.now)
        assert h.run_until(lambda: joiner.closed, 15.0)
    finally:
        wire.encode_join_response = real  # type: ignore[assignment]
    assert not joiner.joined and joiner.failure is not None and "do not list us" in joiner.failure
    assert foreign == []


@pytest.mark.parametrize("version", ["5.18", "5.29"])
def test_a_replayed_connection_request_does_not_split_the_mesh(version: str) -> None:
    """The first datagrams C sent each member (its connection requests among them), replayed to the
    host from C's address long after: no station is dropped, and data still flows."""
    h = BatchHarness(4, version=version)
    host, b, c, d = h.sessions
    host.create(h.now)
    captured: list[bytes] = []

    def hook(data: bytes, s: tuple[str, int], dst: tuple[str, int]) -> bytes:
        if s == c.local_address and len(captured) < 12:
            captured.append(data)
        return data

    h.hook = hook
    b.join(host.local_address, h.now)
    assert h.run_until(lambda: all_connected([host, b]), 30.0)
    c.join(host.local_address, h.now)
    d.join(host.local_address, h.now)
    assert h.run_until(lambda: all_connected([host, b, c, d]), 30.0)
    h.hook = None
    h.run_for(5.0)  # C's counter moves on
    for target in (host, b, d):
        for data in captured:
            target.receive_datagram(data, c.local_address, h.now)
    h.run_for(2 * host.config.station_timeout)
    assert all_connected([host, b, c, d])
    assert [s.counters["restarts"] for s in (host, b, d)] == [0, 0, 0]
    assert c.index is not None and host.index is not None
    c.send(host.index, b"still here", reliable=True, now=h.now)
    h.run_for(1.0)
    assert (c.index, b"still here", True) in _received(h, 0)


@pytest.mark.parametrize("version", ["5.18", "5.29"])
def test_a_resent_join_request_is_not_amplified(version: str) -> None:
    """A member that re-sends join requests gets at most its join response again, rate-limited: what the
    host sends in answer stays within 2x what the member sent, and the others hear nothing of it."""
    h = BatchHarness(8, version=version)
    group = form(h)
    host, member = group[0], group[3]
    peer = member.links.peers[host.local_address]
    assert peer.mesh_window is not None
    counts = {"member": 0, "host": 0}
    baseline = {s.local_address: s.counters["packets_sent"] for s in group}
    request = wire.encode_join_request(member.profile, member.local_address, 77)

    def hook(data: bytes, s: tuple[str, int], d: tuple[str, int]) -> bytes:
        if s == member.local_address:
            counts["member"] += len(data)
        elif s == host.local_address:
            counts["host"] += len(data)
        return data

    h.hook = hook
    for _ in range(20):
        member.outbox.window_send(peer, peer.mesh_window, request, h.now)
        member.links.touched[peer] = None
        h.run_for(0.2)
    h.hook = None
    others = [s for s in group if s not in (host, member)]
    keepalive_budget = 12  # keep-alives and RTT probes over 4 s
    assert all(s.counters["packets_sent"] - baseline[s.local_address] <= keepalive_budget * len(group) for s in others)
    assert counts["host"] <= 2 * counts["member"], counts


@pytest.mark.parametrize("version", ["5.29", "5.45"])
def test_a_group_packet_for_other_stations_is_not_delivered(version: str) -> None:
    """A group packet whose footer names other stations is dropped as not addressed (the receivers check)."""
    h = BatchHarness(3, version=version, group_broadcast=("127.255.255.255", 50999))
    s0, s1, s2 = form(h)
    assert s0.codec is not None and s2.index is not None
    header = wire.group_header(s0.profile, s0.variable_id, 77, s0.next_header_nonce())
    message = Message(s0.protocol_ids[Proto.UNRELIABLE], 0, b"for s2", s0.profile.bitmap_flag, 1 << s2.index)
    data = s0.codec.encode(Packet(header, (message,), (s2.variable_id & 0xFFFF,)), s0.local_address[0])
    s1.receive_group_datagram(data, s0.local_address, h.now)
    h._send_all()
    assert s1.drops["not_addressed"] == 1 and [r for r in _received(h, 1) if r[1] == b"for s2"] == []


@pytest.mark.parametrize("version", ["5.29", "5.45"])
def test_a_group_packet_under_another_members_identity_is_refused(version: str) -> None:
    """A group packet sealed with s0's variable id but sent from s2's address is an identity mismatch."""
    h = BatchHarness(3, version=version, group_broadcast=("127.255.255.255", 50998))
    s0, s1, s2 = form(h)
    assert s2.codec is not None and s1.index is not None
    header = wire.group_header(s2.profile, s0.variable_id, 78, s2.next_header_nonce())
    message = Message(s2.protocol_ids[Proto.UNRELIABLE], 0, b"posing", s2.profile.bitmap_flag, 1 << s1.index)
    footer = tuple(sorted({s1.variable_id & 0xFFFF, s0.variable_id & 0xFFFF}))
    data = s2.codec.encode(Packet(header, (message,), footer), s2.local_address[0])
    s1.receive_group_datagram(data, s2.local_address, h.now)
    h._send_all()
    assert s1.drops["identity_mismatch"] == 1 and [r for r in _received(h, 1) if r[1] == b"posing"] == []


@pytest.mark.parametrize("version", ["5.18", "5.29"])
def test_a_departed_stations_datagrams_stay_refused(version: str) -> None:
    """After a member leaves, its recorded connection request replayed from its address opens no new
    connection (the retired replay memory)."""
    h = BatchHarness(3, version=version)
    host, b, c = h.sessions
    host.create(h.now)
    captured: list[bytes] = []

    def hook(data: bytes, s: tuple[str, int], d: tuple[str, int]) -> bytes:
        if s == b.local_address and d == host.local_address and len(captured) < 1:
            captured.append(data)
        return data

    h.hook = hook
    b.join(host.local_address, h.now)
    c.join(host.local_address, h.now)
    assert h.run_until(lambda: all_connected([host, b, c]), 30.0)
    h.hook = None
    assert captured
    b.leave(h.now)
    h.dead.add(b.local_address)
    assert h.run_until(lambda: b.local_address not in host.peers, 10.0)
    host.receive_datagram(captured[0], b.local_address, h.now)
    assert b.local_address not in host.peers and host.drops["replayed"] >= 1


def _first_request(h: MeshHarness, host: MeshSession, victim: MeshSession) -> bytes:
    """*host* creates a mesh and *victim* asks to join it; returns the victim's first connection request,
    which the victim sends no more of (its address is dead from now on: the request is the attacker's)."""
    host.create(h.now)
    victim.join(host.local_address, h.now)
    (request, dst), *_ = victim.datagrams_to_send(h.now)
    assert dst == host.local_address
    h.dead.add(victim.local_address)
    return request


@pytest.mark.parametrize("version", ["5.18", "5.29"])
def test_a_legitimate_joiner_joins_during_a_replay_flood_from_many_ports(version: str) -> None:
    """One captured connection request, replayed from 64 ports of its IP every second (the nonce binds the IP,
    not the port): a real joiner from elsewhere still joins, and the flood holds at most one provisional peer."""
    h = BatchHarness(3, version=version)
    host, victim, joiner = h.sessions
    request = _first_request(h, host, victim)
    victim_ip = victim.local_address[0]

    def flood() -> None:
        for port in range(20000, 20064):
            host.receive_datagram(request, (victim_ip, port), h.now)

    flood()
    joiner.join(host.local_address, h.now)
    for _ in range(10):
        h.run_for(1.0)
        flood()
    assert joiner.joined and all_connected([host, joiner])
    assert sum(1 for addr in host.peers if addr[0] == victim_ip) <= 1
    assert host.drops["replayed"] >= 63 * 11


@pytest.mark.parametrize("version", ["5.18", "5.29"])
def test_a_station_that_connects_but_never_joins_is_dropped(version: str) -> None:
    """A keyholder that completes the handshake and keeps the link alive but never asks to join is forgotten
    after the join timeout and a station timeout."""
    h = BatchHarness(2, version=version)
    host, idler = h.sessions
    host.create(h.now)
    idler.join(host.local_address, h.now)
    joined_request = idler.links.peers[host.local_address]

    def no_join_request(data: bytes, s: tuple[str, int], d: tuple[str, int]) -> bytes | None:
        if s == idler.local_address and idler.codec is not None:
            packet = idler.codec.decode(data, s[0])
            mesh = idler.protocol_ids[Proto.MESH]
            if any(m.protocol_type == mesh and m.protocol_port == 0 for m in packet.messages):
                return None  # it never asks to join (its mesh window's acks still go)
        return data

    h.hook = no_join_request
    idler.membership._join_deadline = None  # and never gives up (a hostile idler)
    limit = host.config.join_timeout + host.config.station_timeout
    end = h.now + limit + 2.0
    while h.now < end:
        h.run_for(0.25)
        for ack_id in [k for k, p in joined_request.pending.items() if p.proto is Proto.MESH]:
            del joined_request.pending[ack_id]  # its join request never leaves, so nothing times out here
    assert not idler.closed, "the idler kept its link alive all along"
    assert idler.local_address not in host.peers


@pytest.mark.parametrize("version", ["5.18", "5.29"])
def test_zlib_bombs_in_reliable_data_are_refused_and_counted(version: str) -> None:
    """A member sends reliable messages flagged zlib that inflate to 1 MiB each (about 1 KiB on the wire):
    none is delivered, each is counted, and the receiver holds a few MiB at most, not hundreds."""
    import tracemalloc
    import zlib

    from pianode.mesh import reliable as rel

    h = BatchHarness(2, version=version)
    a, b = form(h)
    assert a.index is not None
    window = b.links.peers[a.local_address].data_window
    assert window is not None
    bomb = zlib.compress(bytes(1 << 20), 9)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for _ in range(100):
            window.send(bomb, h.now)
            last = window._out[window._next - 1]
            window._out[window._next - 1] = rel._Out(last.flags | rel._ZLIB, last.payload)  # a hostile sender's flag
            b.links.touched[b.links.peers[a.local_address]] = None
            h.run_for(0.05)
        h.run_for(1.0)
        held = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert not [r for r in _received(h, 0) if r[2]]
    assert a.drops["oversized"] == 100
    assert held < 8 << 20, f"{held / (1 << 20):.0f} MiB held"
    b.send(a.index, b"small and fine", reliable=True, now=h.now)
    h.run_for(1.0)
    assert (b.index, b"small and fine", True) in _received(h, 0)


def test_data_held_for_a_station_without_an_index_is_bounded_in_bytes() -> None:
    """Data from a connected station the mesh table does not name yet is held, up to a bound in bytes."""
    from pianode.mesh.session import HELD_BYTES

    h = BatchHarness(2, version="5.29")
    a, b = h.sessions
    a.create(h.now)
    peer = a.links.new_peer(b.local_address, initiator=False, now=h.now)
    a.links.set_connected(peer, h.now)
    for _ in range(1000):
        a.deliver(peer, bytes(60_000), reliable=False)
    assert peer.held_bytes <= HELD_BYTES and sum(len(d) for d, _ in peer.held) == peer.held_bytes
    assert a.drops["queue_full"] == 1000 - len(peer.held)


def _restart_at(h: MeshHarness, old: MeshSession, seed: int) -> MeshSession:
    """A new session at *old*'s address (a restart, or the same user joining again): a new identity,
    and a header nonce counter that starts below everything *old* sent (it starts anywhere, spec §3.2)."""
    cfg = NodeConfig(version=old.config.profile.name, network=old.config.network.value, session_key=old.config.session_key,
                     bind=old.local_address, seed=seed)
    new = MeshSession(cfg, old.local_address, now=h.now)
    assert old.outbox._nonce_counter > 1 << 33
    new.outbox._nonce_counter = old.outbox._nonce_counter - (1 << 32)
    h.sessions[h.sessions.index(old)] = new
    h.by_addr[old.local_address] = new
    return new


#: Where each header keeps the sender's variable id (spec §1.1), which the tag does not cover.
_SOURCE_VID = {"5.29": (9, 4), "6.20": (7, 2), "6.30": (7, 2), "6.32": (8, 2), "6.41": (8, 2)}


@pytest.mark.parametrize(("version", "network"), [("6.20", "lan"), ("6.30", "ldn"), ("6.32", "ldn"), ("6.41", "ldn")])
def test_a_departed_stations_leave_does_not_evict_the_station_that_rejoined_at_its_address(version: str, network: str) -> None:
    """B leaves (its leave request to the host is captured) and joins again from the same address as a new
    session.  The captured leave, replayed to the host with the new identity written into the header (which
    the tag does not cover; 6.x nonces name only the IP, spec §3.2), evicts nobody, and is counted."""
    h = BatchHarness(3, version=version, network=network)
    a, b, c = form(h)
    captured = _capture_while(h, b, a, lambda: b.leave(h.now), lambda: b.closed and len(a.table) == 2)
    assert captured
    h.run_for(2.0)
    b2 = _restart_at(h, b, seed=4242)
    b2.join(a.local_address, h.now)
    assert h.run_until(lambda: all_connected([a, b2, c]), 30.0)
    h.run_for(1.0)
    before = sum(a.drops.values())
    _replay_as(h, captured, version, b2, to=a)
    assert all_connected([a, b2, c]) and b2.index in a.table
    assert sum(a.drops.values()) - before >= len(captured)


def _replay_as(h: MeshHarness, captured: list[bytes], version: str, new: MeshSession, *, to: MeshSession) -> None:
    """Replay *captured* (an earlier incarnation's) to *to* from *new*'s address with *new*'s variable id
    written into each header, where the tag does not cover it, then run 3 s."""
    offset, size = _SOURCE_VID[version]
    for data in captured:
        forged = bytearray(data)
        forged[offset:offset + size] = new.variable_id.to_bytes(size, "big")
        to.receive_datagram(bytes(forged), new.local_address, h.now)
    h.run_for(3.0)


def _capture_while(
    h: MeshHarness, src: MeshSession, dst: MeshSession, start: Callable[[], None], until: Callable[[], bool]
) -> list[bytes]:
    """Call *start*, then run until *until*, keeping a copy of every datagram *src* sends *dst*."""
    captured = _copy_from_now(h, src, dst)
    start()
    assert h.run_until(until, 10.0)
    h.hook = None
    return captured


def _capture_join(h: MeshHarness, member: MeshSession, joiner: MeshSession, *, deny: bool = False,
                  conn_id: int | None = None) -> list[bytes]:
    """*joiner* asks *member* to connect (denied when *deny*: it does not accept stations then); every
    datagram *member* sends *joiner* meanwhile is kept (many carry destination 0: the joiner has no index)."""
    if deny:
        member.accepts_stations = lambda: False  # type: ignore[method-assign]
    joiner.membership._join_deadline = None
    if conn_id is not None:  # the connection id the joiner draws for *member*
        joiner.links._rng = types.SimpleNamespace(randrange=lambda low, high: conn_id)  # type: ignore[assignment]
    joiner.join(member.local_address, h.now)
    captured = _capture(h, member, joiner, 1.5)
    if deny:
        del member.accepts_stations
    return captured


def _replay_everywhere(h: MeshHarness, captured: list[bytes], sender: MeshSession, group: list[MeshSession]) -> int:
    """Replay *captured* (what *sender* sent a joiner) to every other member from *sender*'s address;
    returns how many drops that made."""
    before = sum(sum(s.drops.values()) for s in group)
    for target in group:
        if target is not sender:
            for data in captured:
                target.receive_datagram(data, sender.local_address, h.now)
    h._send_all()
    return sum(sum(s.drops.values()) for s in group) - before


@pytest.mark.parametrize(("version", "network"), [("5.6", "lan"), ("4.10", "ldn"), ("5.18", "lan"), ("5.29", "lan"), ("5.45", "lan")])
def test_a_connection_denial_meant_for_a_joiner_does_not_evict_its_sender(version: str, network: str) -> None:
    """A refuses a joiner's connection (its denial carries destination 0: the joiner has no index), and
    the denial, replayed to the other members from A's address, makes none of them drop A."""
    h = BatchHarness(4, version=version, network=network)
    group = form(h, [0, 1, 2])
    a, joiner = group[1], h.sessions[3]
    captured = _capture_join(h, a, joiner, deny=True)
    assert captured
    _replay_everywhere(h, captured, a, group)
    h.run_for(2 * a.config.station_timeout)
    assert all_connected(group)
    assert all(sum(s._tally.departures.values()) == 0 for s in group)


@pytest.mark.parametrize(("version", "network"), [("5.6", "lan"), ("4.10", "ldn"), ("5.18", "lan")])
def test_a_connection_request_meant_for_a_joiner_does_not_change_its_senders_link(version: str, network: str) -> None:
    """A's inverse connection request to a joiner (up to 5.26; destination 0) replayed to the other members
    from A's address changes no connection id there: A is not dropped.  From 5.7 the request names the
    joiner's connection id, which a member's own id for A equals once in 254 joins: that case is forced."""
    h = BatchHarness(4, version=version, network=network)
    group = form(h, [0, 1, 2])
    a, b, joiner = group[1], group[2], h.sessions[3]

    captured = _capture_join(h, a, joiner, conn_id=b.links.peers[a.local_address].own_conn_id)
    assert captured
    ids = {s.local_address: (s.links.peers[a.local_address].peer_conn_id, s.links.peers[a.local_address].constant_id)
           for s in group if s is not a}
    _replay_everywhere(h, captured, a, group)
    assert {s.local_address: (s.links.peers[a.local_address].peer_conn_id, s.links.peers[a.local_address].constant_id)
            for s in group if s is not a} == ids
    h.run_for(2 * a.config.station_timeout)
    assert all_connected(group)
    assert all(sum(s._tally.departures.values()) == 0 for s in group)


@pytest.mark.parametrize("version", ["5.18", "5.29"])
def test_a_disconnect_sent_to_an_address_does_not_evict_a_member(version: str) -> None:
    """A disconnect message with destination 0 (sent to a station with no index yet, as a third-party station
    may), sealed by A and replayed to members from A's address, ends no link: a member A reaches by its
    index would carry its destination bit."""
    h = BatchHarness(4, version=version)
    group = form(h, [0, 1, 2])
    a, joiner = group[1], h.sessions[3]
    captured: list[bytes] = []

    def disconnect_to_joiner() -> None:
        peer = a.links.peers.get(joiner.local_address)
        if peer is not None:
            for response in (False, True):
                a.outbox.enqueue(peer, Proto.STATION, 0, wire.encode_disconnect(a.profile, response))

    captured = _capture_join(h, a, joiner)
    disconnect_to_joiner()
    captured += _capture(h, a, joiner, 0.2)
    assert captured
    drops = _replay_everywhere(h, captured, a, group)
    h.run_for(2 * a.config.station_timeout)
    assert all_connected(group)
    assert all(sum(s._tally.departures.values()) == 0 for s in group)
    assert drops >= 2


def _throwaway_connections(h: MeshHarness, target: MeshSession, ip: str, count: int) -> None:
    """A key holder's churn: *count* connections to *target* from ports of its own *ip*, each ended by a
    disconnection request as soon as it is up (so *target* closes each and keeps its replay memory)."""
    from protocols.pia import session6

    for port in range(40000, 40000 + count):
        addr = (ip, port)
        cfg = NodeConfig(version=target.config.profile.name, network=target.config.network.value,
                         session_key=target.config.session_key, bind=addr, seed=port)
        m = MeshSession(cfg, addr, now=h.now)
        m.join(target.local_address, h.now)
        for _ in range(20):  # the handshake, a few round trips
            for data, dst in m.datagrams_to_send(h.now):
                if dst == target.local_address:
                    target.receive_datagram(data, addr, h.now)
            for data, dst in target.datagrams_to_send(h.now):
                if dst == addr:
                    m.receive_datagram(data, target.local_address, h.now)
                else:
                    h._route(data, target.local_address, dst)
            peer = m.links.peers.get(target.local_address)
            if peer is not None and peer.connected and addr in target.peers and target.peers[addr].connected:
                break
            h.now += 0.001
        peer = m.links.peers[target.local_address]
        m.outbox.enqueue(peer, Proto.STATION, 0, wire.encode_disconnect(session6.session_profile(m.profile), False))
        for data, dst in m.datagrams_to_send(h.now):
            target.receive_datagram(data, addr, h.now)
        assert addr not in target.peers


@pytest.mark.parametrize(("version", "network"), [("6.20", "lan"), ("6.32", "ldn")])
def test_a_key_holders_churn_does_not_push_out_a_departed_stations_memory(version: str, network: str) -> None:
    """B leaves (its leave to the host captured); a key holder then opens and ends 300 connections to the
    host from ports of its own IP, more than the host keeps replay memory for.  B joins again from its
    address as a new session, and its captured leave, replayed with the new identity written in, evicts
    nobody: one IP's churn pushes out only that IP's memory."""
    h = BatchHarness(4, version=version, network=network)
    a, b, c = form(h, [0, 1, 2])
    churner_ip = h.sessions[3].local_address[0]
    captured = _capture_while(h, b, a, lambda: b.leave(h.now), lambda: b.closed and len(a.table) == 2)
    assert captured
    h.run_for(0.5)
    _throwaway_connections(h, a, churner_ip, 300)
    b2 = _restart_at(h, b, seed=4343)
    b2.join(a.local_address, h.now)
    assert h.run_until(lambda: all_connected([a, b2, c]), 30.0)
    h.run_for(1.0)
    _replay_as(h, captured, version, b2, to=a)
    assert all_connected([a, b2, c]) and b2.index in a.table


@pytest.mark.parametrize(("version", "network"), [("5.6", "lan"), ("4.10", "ldn")])
def test_a_vanished_host_is_not_kept_alive_by_its_replayed_unnumbered_datagrams(version: str, network: str) -> None:
    """Up to 5.6 the replay checks read the packet id, which the HMAC covers (spec §1.4, §3.1); the
    datagrams of a handshake carry none.  The host's, captured as the mesh formed and replayed to the
    members from its address every second after it vanished, do not keep it in the mesh: it is
    removed for its silence and a member takes over."""
    h = BatchHarness(3, version=version, network=network)
    a, b, c = h.sessions
    captured: list[bytes] = []

    def hook(data: bytes, s: tuple[str, int], d: tuple[str, int]) -> bytes:
        if s == a.local_address and a.codec is not None and a.codec.decode(data, s[0]).header.packet_id == 0:
            captured.append(data)
        return data

    h.hook = hook
    form(h)
    h.hook = None
    assert captured
    h.dead.add(a.local_address)
    for _ in range(int(3 * a.config.station_timeout)):
        for target in (b, c):
            for data in captured:
                target.receive_datagram(data, a.local_address, h.now)
        h.run_for(1.0)
    assert all(a.local_address not in [e.address for e in s.table.entries()] for s in (b, c))
    assert b.table.host_index == c.table.host_index != 0
    assert b.drops["replayed"] > 0
