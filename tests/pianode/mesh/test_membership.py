"""The membership, on its own: creating, admitting, updates, departures and host migration (spec §5.4)."""

from __future__ import annotations

from mesh_parts import build, decoded

from pianode.mesh import wire
from protocols.pia.versions import Proto
from pianode.mesh.events import HostChanged, MeshJoined, StationJoined, StationLeft
from pianode.mesh.table import StationEntry

HOST = ("127.0.0.2", 40000)
A = ("127.0.0.3", 40001)
B = ("127.0.0.4", 40002)


def _member(p, addr, constant_id):  # type: ignore[no-untyped-def]
    peer = p.links.new_peer(addr, initiator=False, now=0.0)
    p.links.learn(peer, constant_id, constant_id + 1)
    p.links.set_connected(peer, 0.0)
    return peer


def test_the_creator_is_host_and_index_zero() -> None:
    p = build()
    m = p.membership
    m.create(0.0)
    assert m.index == 0 and m.is_host() and m.joined and p.host.events == [MeshJoined(station_index=0, host_index=0)]


def test_the_host_admits_a_joiner_and_tells_the_others() -> None:
    p = build()
    m = p.membership
    m.create(0.0)
    a = _member(p, A, 0xA)
    m.on_message(a, wire.JoinRequest(ack_id=5), 0.0)
    b = _member(p, B, 0xB)
    m.on_message(b, wire.JoinRequest(ack_id=6), 0.0)
    assert (a.index, b.index) == (1, 2) and m.table.update_counter == 3
    assert [e.index for e in m.table.entries()] == [0, 1, 2]
    assert any(q.kind == "join-response" for q in b.pending.values())
    # The update goes to every member through its mesh window, the joiner too, after its join response.
    assert a.mesh_window is not None and not a.mesh_window.idle()
    assert b.mesh_window is not None and not b.mesh_window.idle()
    assert [e for e in p.host.events if isinstance(e, StationJoined)] == [
        StationJoined(station_index=1, constant_id=0xA, address=A),
        StationJoined(station_index=2, constant_id=0xB, address=B),
    ]


def test_the_joiner_hears_its_join_response_before_the_update_mesh() -> None:
    """As the real 3DS host does (mgba frames 13-14): join response, then update mesh."""
    p = build()
    m = p.membership
    m.create(0.0)
    a = _member(p, A, 0xA)
    m.on_message(a, wire.JoinRequest(ack_id=5), 0.0)
    kinds = _mesh_kinds(p, a, 0.0)
    assert kinds.index("JoinResponse") < kinds.index("reliable mesh"), kinds


def test_a_station_that_connects_hears_nothing_of_the_mesh_until_it_joins() -> None:
    """A joiner is not a member (spec §2.6): no update mesh rides ahead of its join request."""
    p = build()
    m = p.membership
    m.create(0.0)
    a = _member(p, A, 0xA)
    m.on_connected(a, 0.0)
    assert a.mesh_window is not None and a.mesh_window.idle() and not a.pending
    # A member joining later does not send the table to it either.
    b = _member(p, B, 0xB)
    m.on_message(b, wire.JoinRequest(ack_id=6), 0.0)
    assert a.mesh_window.idle()


def test_a_connected_station_that_never_asks_is_told_the_table_once_at_a_heal() -> None:
    """One our predecessor admitted just before leaving learns that it must join again."""
    p = build()
    m = p.membership
    m.create(0.0)
    a = _member(p, A, 0xA)
    m.on_connected(a, 0.0)
    m.handle_timer(1.0)
    assert a.mesh_window is not None and a.mesh_window.idle()
    m.handle_timer(3.5)
    assert not a.mesh_window.idle() and a.told_table
    assert _mesh_kinds(p, a, 3.5) == ["reliable mesh"]
    sent = a.mesh_window.in_flight
    m.handle_timer(7.0)
    _mesh_kinds(p, a, 7.0)  # a resend of the unacknowledged update, nothing new
    assert sent == a.mesh_window.in_flight == 1


def _mesh_kinds(p, peer, now):  # type: ignore[no-untyped-def]
    """The mesh messages the outbox sends *peer* at *now*, in order: a plain one by its
    class name, one on the reliable mesh stream (port 1) as "reliable mesh"."""
    mesh_id = p.config.profile.protocol_ids[Proto.MESH]
    kinds = []
    for _addr, proto, port, payload in decoded(p, p.outbox.drain(peer, now)):
        if proto != mesh_id:
            continue
        kinds.append("reliable mesh" if port else type(wire.decode_mesh(p.config.profile, payload)).__name__)
    return kinds


def test_a_full_mesh_denies_the_join() -> None:
    p = build(max_stations=2)
    m = p.membership
    m.create(0.0)
    m.on_message(_member(p, A, 0xA), wire.JoinRequest(ack_id=5), 0.0)
    late = _member(p, B, 0xB)
    m.on_message(late, wire.JoinRequest(ack_id=6), 0.0)
    assert late.index is None and p.tally.counters["joins_denied"] == 1
    denial = wire.decode_mesh(p.config.profile, late.outbox[-1].payload)
    assert isinstance(denial, wire.JoinDenied) and denial.reason_text == "mesh full"


def _joined_non_host(p):  # type: ignore[no-untyped-def]
    """This station at index 2 of a mesh hosted by index 0 (at HOST) with a member at index 1 (at A)."""
    m = p.membership
    host, other = _member(p, HOST, 0x1), _member(p, A, 0x2)
    m.join_host = HOST
    entries = [
        StationEntry(0, 0x1, 0x2, HOST, 0),
        StationEntry(1, 0x2, 0x3, A, 1),
        StationEntry(2, p.local.constant_id, p.local.variable_id, p.local.address, 2),
    ]
    m.on_message(host, wire.JoinResponse(0, 2, 1, 0, 4, tuple(entries), ack_id=9), 0.0)
    assert m.joined and m.index == 2 and host.index == 0 and other.index == 1
    return m, host, other


def test_an_update_from_a_member_that_is_not_the_host_is_refused() -> None:
    p = build(address=("127.0.0.9", 40009))
    m, host, other = _joined_non_host(p)
    forged = wire.UpdateMesh(host_index=0, update_counter=99, fragment_count=1, fragment_index=0, entries=())
    m.on_message(other, forged, 1.0)
    assert p.tally.drops["not_host"] == 1 and m.table.update_counter == 4 and len(m.table) == 3


def test_when_the_host_is_lost_the_lowest_remaining_index_takes_over() -> None:
    p = build(address=("127.0.0.9", 40009))
    m, host, other = _joined_non_host(p)
    m.peer_lost(host, "timeout", 5.0)
    assert m.table.host_index == 1 and not m.is_host()
    assert HostChanged(old_host_index=0, new_host_index=1) in p.host.events
    assert StationLeft(station_index=0, constant_id=0x1, reason="timeout") in p.host.events
    m.peer_lost(other, "left", 6.0)
    assert m.is_host() and m.table.update_counter == 5, "the new host announces its table"


def test_a_join_that_gets_no_answer_fails_with_a_reason() -> None:
    p = build()
    m = p.membership
    m.join(HOST, 0.0)
    assert HOST in p.links.peers
    assert m.handle_timer(p.config.join_timeout + 0.1) is False
    assert m.closed and m.failure == "no answer to the connection request"


def test_a_join_the_host_connects_but_never_answers_names_the_join_request() -> None:
    p = build()
    m = p.membership
    m.join(HOST, 0.0)
    host = p.links.peers[HOST]
    p.links.learn(host, 0x1, 0x2)
    p.links.set_connected(host, 0.1)
    assert m.handle_timer(p.config.join_timeout + 0.1) is False
    assert m.failure == "join request unanswered"


def test_a_join_whose_handshake_stops_halfway_says_so() -> None:
    p = build()
    m = p.membership
    m.join(HOST, 0.0)
    p.links.peers[HOST].got_response = True
    m.handle_timer(p.config.join_timeout + 0.1)
    assert m.failure is not None and m.failure.startswith("handshake incomplete")


def test_losing_the_host_while_joining_names_the_step_and_the_cause() -> None:
    p = build()
    m = p.membership
    m.join(HOST, 0.0)
    host = p.links.peers[HOST]
    p.links.learn(host, 0x1, 0x2)
    p.links.set_connected(host, 0.1)
    m.peer_lost(host, "silent for 5 s", 5.1)
    assert m.closed and m.failure == "join request unanswered (link ended: silent for 5 s)"


def test_a_join_request_with_trailing_bytes_is_admitted_and_counted() -> None:
    p = build()
    m = p.membership
    m.create(0.0)
    a = _member(p, A, 0xA)
    m.on_message(a, wire.JoinRequest(ack_id=5, trailing=8), 0.0)
    assert a.index == 1 and p.tally.counters["trailing_bytes"] == 1


def test_the_join_request_of_nintendoclients_2020_is_acked_with_its_own_ack_id() -> None:
    """NC-2020's 5.11+ join request carries a pad and a StationAddress before the ack id its resender
    appends last (bytes seen on the wire in the interop test).  The ack names that id: acking bytes 2-5
    instead leaves it resending the request, ten times, and being answered each time."""
    from protocols.pia import station as pstation

    p = build()
    profile = p.config.profile
    m = p.membership
    m.create(0.0)
    a = _member(p, A, 0xA)
    theirs = bytes([1, 253, 0, 0, 10, 251, 0, 3, 0xC0, 0x00]) + (0xA1B2C3D4).to_bytes(4, "big")
    msg = wire.decode_mesh(profile, theirs)
    assert msg == wire.JoinRequest(ack_id=0xA1B2C3D4, trailing=8)
    m.on_message(a, msg, 0.0)
    station_id = profile.protocol_ids[Proto.STATION]
    acks = [
        pstation.decode_station_message(payload, profile)
        for _addr, proto, _port, payload in decoded(p, p.outbox.drain(a, 0.0))
        if proto == station_id and payload[0] == 5
    ]
    assert [ack.ack_id for ack in acks] == [0xA1B2C3D4]
    assert a.index == 1 and p.tally.counters["trailing_bytes"] == 1


def test_the_members_connect_to_a_newcomer_and_the_newcomer_waits_for_them() -> None:
    """Spec §5.4 join sequence (wiki "Joining a mesh", step 6): after the host's update mesh "the other
    consoles now try to establish a connection with your console".  NintendoClients-2020's joiner waits for
    exactly that and never starts a handshake to a member itself."""
    me = ("127.0.0.9", 40009)

    # The newcomer (us, index 3): its join response lists the host and two members; it connects to no one.
    p = build(address=me)
    m = p.membership
    m.join(HOST, 0.0)
    host = p.links.peers[HOST]
    p.links.learn(host, 0x1, 0x2)
    p.links.set_connected(host, 0.1)
    m.on_connected(host, 0.1)
    table = (
        StationEntry(0, 0x1, 0x2, HOST, 0),
        StationEntry(1, 0xA, 0xB, A, 1),
        StationEntry(2, 0xC, 0xD, B, 2),
        StationEntry(3, p.local.constant_id, p.local.variable_id, me, 3),
    )
    m.on_message(host, wire.JoinResponse(0, 3, 1, 0, 4, table, ack_id=9), 0.2)
    assert m.joined and m.index == 3
    assert set(p.links.peers) == {HOST}
    # A member's request then gets its index from the table once the handshake completes.
    a = _member(p, A, 0xA)
    m.on_connected(a, 0.3)
    assert a.index == 1

    # A member (us, index 1): the host's update lists a newcomer at index 2; we start the handshake to it.
    q = build(address=me)
    n = q.membership
    n.join(HOST, 0.0)
    qhost = q.links.peers[HOST]
    q.links.learn(qhost, 0x1, 0x2)
    q.links.set_connected(qhost, 0.1)
    n.on_connected(qhost, 0.1)
    mine = (StationEntry(0, 0x1, 0x2, HOST, 0), StationEntry(1, q.local.constant_id, q.local.variable_id, me, 1))
    n.on_message(qhost, wire.JoinResponse(0, 1, 1, 0, 2, mine, ack_id=9), 0.2)
    qhost.index = 0
    n.on_message(qhost, wire.UpdateMesh(0, 3, 1, 0, (*mine, StationEntry(2, 0xC, 0xD, B, 2))), 0.3)
    newcomer = q.links.peers[B]
    assert newcomer.initiator and newcomer.index == 2 and newcomer.pending


def test_a_heal_names_the_member_it_connects_to() -> None:
    """A newcomer that no member connected to within a heal interval connects to them itself; its request
    names the member (target constant and variable id, spec §5.3) from the host's table, as any other
    connection to a known station does.  A station refuses a request naming another (NintendoClients-2020:
    "wrong pid"), so before, such a heal (which named 0 and 0) never connected to NC-2020."""
    from protocols.pia import station as pstation

    p = build(address=("127.0.0.9", 40009))
    m = p.membership
    host = _member(p, HOST, 0x1)
    m.join_host = HOST
    entries = [
        StationEntry(0, 0x1, 0x2, HOST, 0),
        StationEntry(1, 0xB0, 0xB1, B, 1),  # a member we have no link to
        StationEntry(2, p.local.constant_id, p.local.variable_id, p.local.address, 2),
    ]
    m.on_message(host, wire.JoinResponse(0, 2, 1, 0, 4, tuple(entries), ack_id=9), 0.0)
    assert B not in p.links.peers  # the newcomer waits for the members
    m.handle_timer(3.5)
    peer = p.links.peers[B]
    station_id = p.config.profile.protocol_ids[Proto.STATION]
    requests = [pstation.decode_station_message(payload, p.config.profile)
                for _addr, proto, _port, payload in decoded(p, p.outbox.drain(peer, 3.5)) if proto == station_id]  # fmt: skip
    assert [(r.target_constant_id, r.target_variable_id) for r in requests] == [(0xB0, 0xB1)]
