"""The station handshake, on its own: what each station message does to a peer and what it queues (spec §5.3)."""

from __future__ import annotations

from mesh_parts import build

from pianode.mesh import wire
from pianode.mesh.peer import PeerState
from protocols.pia.versions import Proto

A = ("127.0.0.3", 40001)


def _request(constant_id: int = 0x77, *, conn_id: int = 5, inverse: bool = False, inverse_conn_id: int = 0) -> wire.ConnectRequest:
    return wire.ConnectRequest(conn_id, inverse, inverse_conn_id, wire.Location(A, constant_id, 0x4242), ack_id=31)


def _queued(p, peer):  # type: ignore[no-untyped-def]
    """The station messages queued to *peer*: plain ones, then those awaiting an ack."""
    profile = p.config.profile
    plain = [type(wire.decode_station(profile, m.payload)).__name__ for m in peer.outbox]
    acked = [type(wire.decode_station(profile, q.payload)).__name__ for q in peer.pending.values()]
    return plain, acked


def test_from_527_one_request_and_one_response_connect() -> None:
    p = build("5.29", membership=False)
    peer = p.links.new_peer(A, initiator=False, now=0.0)
    p.handshake.on_message(peer, _request(), 0.0)
    assert _queued(p, peer) == (["StationAck"], ["ConnectResponse"])
    assert peer.connected and ("connected", A) in p.host.calls
    assert (peer.constant_id, peer.variable_id) == (0x77, 0x4242)


def test_up_to_526_the_answer_is_an_inverse_request_then_the_response_connects() -> None:
    p = build("5.18", membership=False)
    peer = p.links.new_peer(A, initiator=False, now=0.0)
    p.handshake.on_message(peer, _request(), 0.0)
    assert _queued(p, peer) == (["StationAck"], ["ConnectRequest"]) and not peer.connected
    inverse = wire.decode_station(p.config.profile, next(iter(peer.pending.values())).payload)
    assert isinstance(inverse, wire.ConnectRequest) and inverse.inverse and inverse.inverse_conn_id == 5
    p.handshake.on_message(peer, wire.ConnectResponse(0, 32, wire.Location(A, 0x77, 0x4242)), 0.1)
    assert peer.connected and peer.peer_conn_id == 5 and p.host.names().count("connected") == 1


def test_glare_the_lower_constant_id_stays_the_initiator() -> None:
    for theirs, we_win in ((1, False), (2**64 - 1, True)):
        p = build("5.29", membership=False)
        peer = p.handshake.connect(A, 0.0)
        p.handshake.on_message(peer, _request(theirs), 0.0)
        connect_pending = any(q.kind == "connect" for q in peer.pending.values())
        assert connect_pending is we_win and peer.initiator is we_win
        assert p.tally.counters["connect_glare_won" if we_win else "connect_glare_yielded"] == 1


def test_a_station_not_in_a_mesh_denies_requests() -> None:
    p = build("5.29", membership=False)
    p.host.accepting = False
    peer = p.links.new_peer(A, initiator=False, now=0.0)
    p.handshake.on_message(peer, _request(), 0.0)
    plain, acked = _queued(p, peer)
    assert plain == ["StationAck", "ConnectResponse"] and acked == [] and not peer.connected
    denial = wire.decode_station(p.config.profile, peer.outbox[1].payload)
    assert isinstance(denial, wire.ConnectResponse) and denial.result == 1


def test_a_refusal_says_why_and_closes_the_peer() -> None:
    p = build("5.29", membership=False)
    peer = p.handshake.connect(A, 0.0)
    p.handshake.on_message(peer, wire.ConnectResponse(3, None), 0.1)
    assert ("refused", A, "our Pia version is too high for it") in p.host.calls
    assert peer.state is PeerState.CLOSED and A not in p.links.peers


def test_an_inverse_request_naming_another_connection_is_refused() -> None:
    p = build("5.18", membership=False)
    peer = p.handshake.connect(A, 0.0)
    p.handshake.on_message(peer, _request(inverse=True, inverse_conn_id=peer.own_conn_id ^ 1), 0.0)
    assert p.tally.drops["identity_mismatch"] == 1 and not peer.sent_response


def test_a_disconnect_is_answered_and_ends_the_link() -> None:
    p = build("5.29", membership=False)
    peer = p.links.new_peer(A, initiator=False, now=0.0)
    p.handshake.on_message(peer, wire.Disconnect(False), 0.0)
    assert _queued(p, peer)[0] == ["Disconnect"] and ("peer_lost", A, "left") in p.host.calls
    assert peer.outbox[0].protocol_type == p.outbox.protocol_ids[Proto.STATION]


def test_a_request_names_the_station_it_is_for_where_its_ids_are_known() -> None:
    """The joiner knows the host's ids from discovery, a newcomer its members' from the table: the request's
    target fields carry them (spec §5.3), not zeros."""
    from protocols.pia import station as pstation

    p = build("5.18", membership=False)
    peer = p.handshake.connect(A, 0.0, (0x1234_5678_9ABC, 0x77))
    request = pstation.decode_station_message(next(iter(peer.pending.values())).payload, p.config.profile)
    assert isinstance(request, pstation.ConnectionRequest)
    assert (request.target_constant_id, request.target_variable_id) == (0x1234_5678_9ABC, 0x77)


def test_a_connection_response_names_our_player_in_four_slots() -> None:
    """Spec §5.3: PlayerInfo x 2 or 4 (fragment 0: four slots, the unused ones zero-filled); NintendoClients
    fails on a response without them.  Ours names the node's player, and its number of player infos counts
    the one slot that describes a player (NintendoClients-2020 refuses a count that differs from the number
    of players)."""
    from protocols.pia import station as pstation

    for version in ("5.8", "5.18", "5.26", "5.29", "5.45"):
        p = build(version, membership=False, name="pianode-7")
        profile = p.config.profile
        if profile.inverse_handshake:
            # Up to 5.26 the initiator answers the other side's inverse request with the response.
            peer = p.handshake.connect(A, 0.0)
            p.handshake.on_message(peer, _request(inverse=True, inverse_conn_id=peer.own_conn_id), 0.1)
        else:
            peer = p.links.new_peer(A, initiator=False, now=0.0)
            p.handshake.on_message(peer, _request(), 0.0)
        decoded = [pstation.decode_station_message(q.payload, profile) for q in peer.pending.values()]
        (response,) = [m for m in decoded if isinstance(m, pstation.ConnectionResponse)]
        assert (response.player_count, response.participant_count, response.player_info_count) == (1, 1, 1), version
        assert len(response.players) == 4 and response.players[0].name_text == "pianode-7", version


def test_with_a_small_mtu_the_response_carries_fewer_player_slots() -> None:
    from protocols.pia import station as pstation

    p = build("5.29", membership=False, name="small", mtu=400)
    peer = p.links.new_peer(A, initiator=False, now=0.0)
    p.handshake.on_message(peer, _request(), 0.0)
    (response,) = [
        m for m in (pstation.decode_station_message(q.payload, p.config.profile) for q in peer.pending.values())
        if isinstance(m, pstation.ConnectionResponse)
    ]
    assert response.player_info_count == 1 and response.players[0].name_text == "small"
