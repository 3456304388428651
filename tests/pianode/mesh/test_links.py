"""Links, on their own: the peer registry, the group view, timers, keep-alive, RTT spacing and the packet checks."""

from __future__ import annotations

import pytest
from mesh_parts import build

from pianode.mesh import wire
from pianode.mesh.links import RTT_ASKED
from pianode.mesh.peer import PeerState
from protocols.pia.header import PacketHeader
from protocols.pia.message import Message
from protocols.pia.packet_values import Packet
from protocols.pia.versions import Proto

A = ("127.0.0.3", 40001)
B = ("127.0.0.4", 40002)


def test_a_closed_peer_keeps_its_replay_memory_for_two_station_timeouts() -> None:
    p = build()
    links = p.links
    peer = links.new_peer(A, initiator=False, now=0.0)
    assert peer.replay.accept(b"\x00" * 11 + b"\x05")
    links.close(peer)
    assert peer.state is PeerState.CLOSED and A not in links.peers
    retired = links.retired(A, now=1.0)
    assert retired is not None and not retired.accept(b"\x00" * 11 + b"\x05")  # the old nonce stays refused
    assert links.retired(A, now=2 * p.config.station_timeout + 0.1) is None
    again = links.new_peer(A, initiator=True, now=1.0)
    assert not again.replay.accept(b"\x00" * 11 + b"\x05"), "a new peer at the address inherits the memory"


def test_by_index_forgets_a_closed_peer() -> None:
    links = build().links
    peer = links.new_peer(A, initiator=True, now=0.0)
    links.set_index(peer, 3)
    assert links.by_index(3) is peer
    links.close(peer)
    assert links.by_index(3) is None


def test_the_group_view_follows_every_membership_change() -> None:
    links = build().links
    a, b = links.new_peer(A, initiator=True, now=0.0), links.new_peer(B, initiator=True, now=0.0)
    assert links.members() == ()
    for peer, index, vid in ((a, 1, 0x10005), (b, 4, 0x20007)):
        links.learn(peer, 100 + index, vid)
        links.set_index(peer, index)
        links.set_connected(peer, 0.0)
    members, destination, footer = links.view()
    assert set(members) == {a, b} and destination == 0b10010 and footer == (0x0005, 0x0007)
    links.close(b)
    assert links.view() == ((a,), 0b10, (0x0005,))
    assert links.view() == links.work_out_group_view()


def test_silence_past_the_station_timeout_loses_the_peer() -> None:
    p = build()
    links = p.links
    peer = links.new_peer(A, initiator=True, now=0.0)
    links.reschedule(peer)
    timeout = p.config.station_timeout
    assert links.next_deadline() == pytest.approx(timeout)
    assert links.due(timeout - 0.01) == []
    (due,) = links.due(timeout)
    links.on_timer(due, timeout)
    assert ("peer_lost", A, "silent for 5 s") in p.host.calls


def test_a_keepalive_fills_silence_only() -> None:
    p = build(membership=False)
    links = p.links
    interval = p.config.keepalive_interval
    peer = links.new_peer(A, initiator=True, now=0.0)
    links.set_connected(peer, 0.0)
    peer.next_rtt = 1e9  # (RTT probes are another test's)
    peer.last_sent = interval - 0.1  # something went to the peer just now
    assert links.on_timer(peer, interval) is False  # nothing was due: the peer is back on the heap
    assert ("enqueue", A, Proto.KEEP_ALIVE, 0) not in p.host.calls
    # Due when the silence reaches an interval, and not before.
    assert links.deadline(peer) == pytest.approx(2 * interval - 0.1)
    assert links.next_deadline() == pytest.approx(2 * interval - 0.1)
    assert links.due(2 * interval - 0.11) == []
    (due,) = links.due(2 * interval)
    assert links.on_timer(due, 2 * interval) is True
    assert p.host.calls.count(("enqueue", A, Proto.KEEP_ALIVE, 0)) == 1


def test_rtt_probes_of_peers_that_connected_together_are_spaced() -> None:
    p = build(membership=False, rtt_probe_rate=4.0)
    links = p.links
    peers = [links.new_peer((f"127.0.0.{10 + i}", 40000), initiator=True, now=0.0) for i in range(5)]
    for peer in peers:
        links.set_connected(peer, 0.0)
    slots = sorted(peer.next_rtt for peer in peers)
    assert [b - a for a, b in zip(slots, slots[1:])] == pytest.approx([0.25] * 4)


@pytest.mark.parametrize("rate", [8.0, 3.0])
def test_the_rtt_probes_of_every_node_fall_on_common_instants(rate: float) -> None:
    """Nodes in one process (one clock) probe at the same instants, multiples of 1 / rtt_probe_rate, so
    that their probes, the answers and the samples are one wake-up of the process, not one each: a
    32-station session at 60 Hz otherwise woke its process about 250 times a second between frames
    for RTT probes alone.  Each node's probes still leave at least 1 / rate apart."""
    spacing = 1.0 / rate
    slots = set()
    for node, start in enumerate((0.0, 0.013, 0.377, 1.91)):
        links = build(membership=False, rtt_probe_rate=rate).links
        peers = [links.new_peer((f"127.0.0.{10 + i}", 40000), initiator=True, now=start) for i in range(5)]
        times = []
        for k, peer in enumerate(peers):
            links.set_connected(peer, start + 0.001 * k)
            times.append(peer.next_rtt)
        for t in times:
            assert t >= start and round(t / spacing) == pytest.approx(t / spacing, abs=1e-6), (node, t)
        assert min(b - a for a, b in zip(sorted(times), sorted(times)[1:])) >= spacing - 1e-9
        slots.update(round(t / spacing) for t in times)
    # Four nodes with five peers each: twenty probes on shared instants, not twenty instants of their own.
    assert len(slots) <= 14


def test_an_rtt_request_is_answered_and_a_response_sampled() -> None:
    p = build(membership=False)
    links = p.links
    peer = links.new_peer(A, initiator=True, now=0.0)
    links.on_rtt(peer, wire.encode_rtt(p.config.profile, False, 1234), 0.5)
    assert ("enqueue", A, Proto.RTT, 1) in p.host.calls and p.tally.counters["rtt_requests_received"] == 1
    links.ask_rtt(peer, 1, 0.25)
    links.on_rtt(peer, wire.encode_rtt(p.config.profile, True, 250_000), 0.3)
    assert peer.rtt.smoothed == pytest.approx(0.05)


def test_an_rtt_response_sampled_only_for_a_request_still_waiting() -> None:
    """A response that echoes no request of ours (spec §5.6), or answers one a second time, gives no
    sample and is counted as a drop; requests older than a station timeout are forgotten."""
    p = build(membership=False)
    links = p.links
    peer = links.new_peer(A, initiator=True, now=0.0)
    links.on_rtt(peer, wire.encode_rtt(p.config.profile, True, 0), 20.0)
    assert peer.rtt.samples == 0 and p.tally.drops["unexpected"] == 1
    links.ask_rtt(peer, 1, 1.0)
    links.ask_rtt(peer, 1, 1.0)  # the same instant: one request
    assert sum(1 for c in p.host.calls if c[:3] == ("enqueue", A, Proto.RTT)) == 1
    links.on_rtt(peer, wire.encode_rtt(p.config.profile, True, 1_000_000), 1.01)
    links.on_rtt(peer, wire.encode_rtt(p.config.profile, True, 1_000_000), 1.02)
    assert peer.rtt.samples == 1 and peer.rtt.latest == pytest.approx(0.01) and p.tally.drops["unexpected"] == 2
    links.ask_rtt(peer, 1, 2.0)
    links.ask_rtt(peer, 1, 2.0 + p.config.station_timeout + 1)
    assert list(peer.rtt_asked) == [links._host.rtt_ticks(2.0 + p.config.station_timeout + 1)]
    for i in range(100):
        links.ask_rtt(peer, 1, 100.0 + i / 100)
    assert len(peer.rtt_asked) == RTT_ASKED


def test_identity_and_replay_checks_count_their_drops() -> None:
    p = build("5.18", membership=False)
    links = p.links
    peer = links.new_peer(A, initiator=True, now=0.0)
    peer.peer_conn_id = 9
    links.learn(peer, 0xABC, 0)
    links.set_connected(peer, 0.0)
    assert links.same_identity(peer, 9, None, None) and links.same_identity(peer, 0, None, 0xABC)
    assert not links.same_identity(peer, 8, None, None)
    assert not links.same_identity(peer, 9, None, 0xABD)
    assert p.tally.drops["identity_mismatch"] == 2
    assert links.fresh(peer, 77, 1.0) and peer.last_heard == 1.0
    assert not links.fresh(peer, 77, 2.0) and p.tally.drops["replayed"] == 1 and peer.last_heard == 1.0
    packet = Packet(PacketHeader(True, 1, 9), (Message(1, 0, b"", source_constant_id=0xABD),))
    assert not links.accept_header(peer, packet, b"n" * 12)
    assert p.tally.drops["identity_mismatch"] == 3


def test_a_peer_that_talks_but_never_acknowledges_reliable_data_is_lost_for_that_cause() -> None:
    """Not "timeout": the removal names the unacknowledged reliable data and how long it waited."""
    p = build()
    links = p.links
    peer = links.new_peer(A, initiator=True, now=0.0)
    links.learn(peer, 0xA, 0xB)
    links.set_connected(peer, 0.0)
    assert peer.mesh_window is not None
    p.outbox.window_send(peer, peer.mesh_window, b"table", 0.0)
    now = 0.0
    lost = lambda: [c for c in p.host.calls if c[0] == "peer_lost"]  # noqa: E731
    while not lost() and now < 60:
        peer.last_heard = now  # it keeps sending (unreliable data, keep-alives), never an ack
        p.outbox.drain(peer, now)
        links.on_timer(peer, now)
        now = round(now + 0.25, 2)
    give_up = 3 * p.config.station_timeout
    assert lost() == [("peer_lost", A, f"unacknowledged reliable data for {give_up:.0f} s")]
    assert now - 0.25 == pytest.approx(give_up, abs=0.3)


def test_a_contact_that_never_joins_is_lost_for_that_cause() -> None:
    p = build()
    links = p.links
    peer = links.new_peer(A, initiator=False, now=0.0)
    links.learn(peer, 0xA, 0xB)
    links.set_connected(peer, 0.0)
    limit = p.config.join_timeout + p.config.station_timeout
    peer.last_heard = limit
    links.on_timer(peer, limit)
    assert p.host.calls[-1] == ("peer_lost", A, f"connected for {limit:g} s without joining")
