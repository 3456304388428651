"""The outbox, on its own: acked messages and their backoff, queues into packets, group packets, nonces."""

from __future__ import annotations

import pytest
from mesh_parts import build, decoded

from pianode.mesh import wire
from pianode.mesh.outbox import MAX_PENDING
from protocols.pia.versions import Proto

A = ("127.0.0.3", 40001)
B = ("127.0.0.4", 40002)


def _connected(p, addr, index, vid):  # type: ignore[no-untyped-def]
    peer = p.links.new_peer(addr, initiator=True, now=0.0)
    p.links.learn(peer, 1000 + index, vid)
    p.links.set_index(peer, index)
    p.links.set_connected(peer, 0.0)
    return peer


def test_an_acked_message_is_resent_with_backoff_until_the_peer_counts_as_lost() -> None:
    p = build(membership=False)
    peer = p.links.new_peer(A, initiator=True, now=0.0)
    ack = p.outbox.queue_acked(peer, Proto.STATION, 0, lambda a: b"\x09" + a.to_bytes(4, "big"), 0.0)
    assert ack and peer.pending[ack].payload[1:] == ack.to_bytes(4, "big")
    sends, now = [], 0.0
    lost = ("peer_lost", A, f"unacknowledged station message after {wire.MAX_TRIES} sends")
    while lost not in p.host.calls and now < 60:
        if p.outbox.drain(peer, now):
            sends.append(now)
        now = round(now + 0.05, 2)
    assert len(sends) == wire.MAX_TRIES
    gaps = [b - a for a, b in zip(sends, sends[1:])]
    assert gaps[0] == pytest.approx(p.config.resend_interval, abs=0.05)
    assert all(later >= earlier - 0.05 for earlier, later in zip(gaps, gaps[1:])) and max(gaps) <= 2.05
    # (counted at each try after the first, the one that gives up included)
    assert p.tally.counters["retransmissions"] == wire.MAX_TRIES


def test_pending_messages_are_bounded() -> None:
    p = build(membership=False)
    peer = p.links.new_peer(A, initiator=True, now=0.0)
    for _ in range(MAX_PENDING):
        assert p.outbox.queue_acked(peer, Proto.STATION, 0, lambda a: b"x", 0.0)
    assert p.outbox.queue_acked(peer, Proto.STATION, 0, lambda a: b"x", 0.0) == 0
    assert p.tally.drops["queue_full"] == 1 and len(peer.pending) == MAX_PENDING


def test_queued_messages_leave_bundled_within_the_mtu_in_order() -> None:
    p = build(membership=False, mtu=600)
    peer = _connected(p, A, 1, 0x1234)
    payloads = [bytes([i]) * 200 for i in range(6)]
    for data in payloads:
        p.outbox.send_data(peer, data, False, 0.0)
    out = p.outbox.datagrams_to_send(0.0)
    assert 1 < len(out) < len(payloads) and all(len(d) <= 600 for d, _ in out)
    assert [m[3] for m in decoded(p, out)] == payloads and {addr for _, addr in out} == {A}
    assert p.tally.counters["packets_sent"] == len(out) == peer.packets_sent


def test_header_nonces_never_repeat() -> None:
    outbox = build(membership=False).outbox
    nonces = [outbox.next_header_nonce() for _ in range(1000)]
    assert len(set(nonces)) == 1000 and all(len(n) == 8 for n in nonces)


def test_an_unreliable_broadcast_with_a_footer_is_one_group_packet() -> None:
    p = build("5.29", membership=False, group_broadcast=("127.255.255.255", 50123))
    a, b = _connected(p, A, 1, 0x10005), _connected(p, B, 2, 0x20007)
    assert p.outbox.broadcast_unreliable_now(b"frame", 0.0) is None  # one packet for all: not per station
    assert p.outbox.broadcast(b"frame", reliable=False, now=0.0) == 2
    (data, dst), = p.outbox.datagrams_to_send(0.0)
    assert dst == ("127.255.255.255", 50123)
    packet = p.outbox.codec.decode(data, p.local.address[0])  # type: ignore[union-attr]
    assert packet.footer == (0x0005, 0x0007) and [m.payload for m in packet.messages] == [b"frame"]
    assert packet.messages[0].destination == 0b110 and a.packets_sent == b.packets_sent == 1


def test_unreliable_data_is_sealed_at_once_only_when_nothing_is_queued() -> None:
    p = build("5.18", membership=False)
    peer = _connected(p, A, 1, 0)
    sealed = p.outbox.seal_unreliable(peer, b"now", 0.0)
    assert decoded(p, [sealed])[0][3] == b"now" and peer.sealer is not None
    assert p.outbox.idle()
    p.outbox.send_data(peer, b"queued", True, 0.0)
    assert not p.outbox.idle() and p.outbox.broadcast_unreliable_now(b"x", 0.0) is None


def test_a_station_not_yet_in_the_mesh_gets_connection_id_0_and_packet_id_0() -> None:
    """Spec §1.3, §2.6: a packet sent to an address rather than to a station index carries connection id 0
    and packet id 0; once the station has an index, our connection id and packet ids from 1."""
    p = build("5.18", membership=False)
    peer = p.links.new_peer(A, initiator=False, now=0.0)
    p.links.set_connected(peer, 0.0)
    codec = p.outbox.codec
    assert codec is not None
    p.outbox.send_data(peer, b"before", False, 0.0)
    (data, _), = p.outbox.datagrams_to_send(0.0)
    header = codec.decode(data, p.local.address[0]).header
    assert (header.connection_id, header.packet_id) == (0, 0)
    p.links.set_index(peer, 1)
    p.outbox.send_data(peer, b"after", False, 0.0)
    (data, _), = p.outbox.datagrams_to_send(0.0)
    header = codec.decode(data, p.local.address[0]).header
    assert (header.connection_id, header.packet_id) == (peer.own_conn_id, 1)
