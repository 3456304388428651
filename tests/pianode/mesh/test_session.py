"""The sans-IO mesh session, driven by the in-memory harness (no Trio, explicit time).

Covers formation (2, 4 and 32 stations; Pia 5.18 and 5.29; lan, ldn and nex),
lowest-free index assignment, denial of a join into a full mesh, a member's and
the host's departure, host migration by the lowest-remaining-index rule after a
leave and after silence, keep-alive and the station timeout, RTT, retransmission,
and reliable delivery exactly once and in order under loss, duplication and
reordering.  Every expectation comes from the issue and the migration rule in
``pianode.mesh.table``, not from running the code.
"""

from __future__ import annotations


import attrs

import pytest
from mesh_harness import BatchHarness, Link, MeshHarness, all_connected, connected, events_of, form

from pianode.mesh import wire as mw
from pianode.mesh.config import NodeConfig
from pianode.mesh.events import DataReceived, HostChanged, MeshDestroyed, MeshJoined, StationJoined, StationLeft
from pianode.mesh.links import Links
from pianode.mesh.reliable import MessageTooLarge
from pianode.mesh.session import MeshSession
from protocols.errors import ConfigError
from protocols.pia.message import Message
from protocols.pia.packet import Packet
from protocols.pia.versions import Proto

VERSIONS = ("5.18", "5.29")
NETWORKS = ("lan", "ldn", "nex")
TIMEOUT = 5.0  # NodeConfig.station_timeout default
def table_rows(s: MeshSession) -> list[tuple[int, int, tuple[str, int]]]:
    return [(e.index, e.constant_id, e.address) for e in s.table.entries()]


def received(h: MeshHarness, i: int, *, reliable: bool = True) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for e in events_of(h, i, DataReceived):
        if e.reliable == reliable:
            out.setdefault(e.source_index, []).append(e.data)
    return out


def payload(src: int, dst: int, k: int) -> bytes:
    return f"{src}->{dst}#{k}".encode() + bytes(k % 7)


def exchange(h: MeshHarness, group: list[MeshSession], count: int, *, gap: float = 0.01, timeout: float = 60.0) -> None:
    """Every station sends *count* numbered reliable messages to every other one.

    Asserts that each arrives exactly once and in send order (per sender), and
    that nothing else arrives.
    """
    ids = [h.sessions.index(s) for s in group]
    before = {i: received(h, i) for i in ids}
    for k in range(count):
        for s in group:
            assert s.index is not None
            for other in group:
                if other is not s:
                    assert other.index is not None
                    s.send(other.index, payload(s.index, other.index, k), reliable=True, now=h.now)
        h.run_for(gap)

    def done() -> bool:
        return all(
            sum(len(v) for v in received(h, i).values()) - sum(len(v) for v in before[i].values())
            >= count * (len(group) - 1)
            for i in ids
        )

    assert h.run_until(done, timeout)
    h.run_for(1.0)  # late duplicates would show up here
    for i, s in zip(ids, group, strict=True):
        assert s.index is not None
        got = received(h, i)
        expect_from = {o.index for o in group if o is not s}
        new = {src: got.get(src, [])[len(before[i].get(src, [])) :] for src in set(got) | expect_from}
        assert set(k for k, v in new.items() if v) == expect_from
        for src in expect_from:
            assert src is not None
            assert new[src] == [payload(src, s.index, k) for k in range(count)], (i, src)


# ---------------------------------------------------------------- formation


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("network", NETWORKS)
@pytest.mark.parametrize("n", [2, 4, 32])
def test_formation(version: str, network: str, n: int) -> None:
    h = BatchHarness(n, version=version, network=network)
    group = form(h)
    # Distinct indexes 0..N-1: the host hands out the lowest free index each time.
    assert sorted(s.index for s in group) == list(range(n))
    assert group[0].index == 0
    # One host everywhere (the creator), one table everywhere.
    assert {s.table.host_index for s in group} == {0}
    assert [s.is_host() for s in group] == [True] + [False] * (n - 1)
    reference = table_rows(group[0])
    assert len(reference) == n
    assert {addr for _, _, addr in reference} == {s.local_address for s in group}
    for s in group:
        assert table_rows(s) == reference
        rows = s.stations()
        assert [r.is_self for r in rows].count(True) == 1
        assert [r.index for r in rows if r.is_host] == [0]
        mine = next(r for r in rows if r.is_self)
        assert (mine.index, mine.constant_id, mine.address) == (s.index, s.constant_id, s.local_address)
    # Events: each joiner learned its index and the host; every station saw N-1 others join.
    for i, s in enumerate(group):
        joined = events_of(h, i, MeshJoined)
        assert joined == [MeshJoined(station_index=s.index, host_index=0)]
        seen = events_of(h, i, StationJoined)
        assert sorted(e.station_index for e in seen) == sorted(o.index for o in group if o is not s)


@pytest.mark.parametrize("version", VERSIONS)
def test_unreliable_and_reliable_data_and_rtt(version: str) -> None:
    h = BatchHarness(3, version=version)
    group = form(h)
    for s in group:
        assert s.broadcast(b"u" + bytes([s.index or 0]), reliable=False, now=h.now) == 2
    exchange(h, group, 5)
    for i, s in enumerate(group):
        got = received(h, i, reliable=False)
        assert got == {o.index: [b"u" + bytes([o.index or 0])] for o in group if o is not s}
    # RTT probes run once a second; the harness's one-way delay is 1 ms.
    h.run_for(3.0)
    for s in group:
        for row in s.stations():
            if not row.is_self:
                assert row.rtt is not None and row.rtt == pytest.approx(0.002, abs=0.0015)
                assert row.packets_sent > 0 and row.packets_received > 0


def test_send_to_unknown_station_is_refused() -> None:
    h = BatchHarness(2)
    group = form(h)
    with pytest.raises(KeyError):
        group[0].send(7, b"x", reliable=True, now=h.now)


# ---------------------------------------------------------------- denial


@pytest.mark.parametrize("version", VERSIONS)
def test_join_denied_when_mesh_full(version: str) -> None:
    h = BatchHarness(3, version=version, max_stations=2)
    host, member = form(h, [0, 1])
    late = h.sessions[2]
    late.join(host.local_address, h.now)
    assert h.run_until(lambda: late.closed, 15.0)
    assert not late.joined and late.index is None
    assert late.failure is not None and "full" in late.failure
    destroyed = events_of(h, 2, MeshDestroyed)
    assert len(destroyed) == 1 and "full" in destroyed[0].reason
    assert host.counters["joins_denied"] == 1
    # The mesh is untouched.
    for s in (host, member):
        assert len(s.table) == 2 and s.table.host_index == 0
        assert late.local_address not in {e.address for e in s.table.entries()}
    assert not events_of(h, 0, StationLeft) and not events_of(h, 1, StationLeft)


def test_join_through_a_member_is_refused() -> None:
    h = BatchHarness(3)
    form(h, [0, 1])
    late = h.sessions[2]
    late.join(h.sessions[1].local_address, h.now)
    assert h.run_until(lambda: late.closed, 15.0)
    assert not late.joined and late.failure is not None and "host" in late.failure
    assert len(h.sessions[0].table) == 2


def test_join_without_answer_times_out() -> None:
    h = BatchHarness(2)
    h.dead.add(h.sessions[0].local_address)
    s = h.sessions[1]
    s.join(h.sessions[0].local_address, h.now)
    assert h.run_until(lambda: s.closed, 30.0)
    assert not s.joined and s.failure is not None
    assert h.now <= s.config.join_timeout + 1.0


# ---------------------------------------------------------------- leaving


@pytest.mark.parametrize("version", VERSIONS)
def test_member_leave(version: str) -> None:
    h = BatchHarness(4, version=version)
    group = form(h)
    counter = group[0].table.update_counter
    leaver = group[2]
    leaver.leave(h.now)
    rest = [group[0], group[1], group[3]]
    assert h.run_until(lambda: leaver.closed and all(len(s.table) == 3 for s in rest), 10.0)
    assert events_of(h, 2, MeshDestroyed) == [MeshDestroyed(reason="left")]
    for s in rest:
        i = h.sessions.index(s)
        assert [(e.station_index, e.reason) for e in events_of(h, i, StationLeft)] == [(2, "left")]
        assert 2 not in s.table
        assert [e.index for e in s.table.entries()] == [0, 1, 3]
        assert s.table.host_index == 0
        assert not events_of(h, i, HostChanged)
    assert group[0].table.update_counter > counter
    # The host's update reaches the members: one table everywhere.
    assert h.run_until(lambda: len({s.table.update_counter for s in rest}) == 1, 5.0)
    assert all(table_rows(s) == table_rows(group[0]) for s in rest)
    exchange(h, rest, 3)


@pytest.mark.parametrize("version", VERSIONS)
def test_freed_index_is_reused_lowest_first(version: str) -> None:
    h = BatchHarness(5, version=version)
    group = form(h, [0, 1, 2, 3])
    group[1].leave(h.now)
    assert h.run_until(lambda: all(len(s.table) == 3 for s in (group[0], group[2], group[3])), 10.0)
    newcomer = h.sessions[4]
    newcomer.join(group[0].local_address, h.now)
    members = [group[0], group[2], group[3], newcomer]
    assert h.run_until(lambda: all_connected(members), 15.0)
    assert newcomer.index == 1  # lowest free, not 4
    assert sorted(s.index for s in members) == [0, 1, 2, 3]
    exchange(h, members, 2)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("network", NETWORKS)
def test_host_leave_migrates_to_lowest_remaining_index(version: str, network: str) -> None:
    h = BatchHarness(4, version=version, network=network)
    group = form(h)
    before = {h.sessions.index(s): s.index for s in group}
    group[0].leave(h.now)
    rest = group[1:]
    assert h.run_until(lambda: group[0].closed and all(s.table.host_index == 1 and len(s.table) == 3 for s in rest), 10.0)
    for s in rest:
        i = h.sessions.index(s)
        assert s.index == before[i]  # indexes unchanged
        assert events_of(h, i, HostChanged) == [HostChanged(old_host_index=0, new_host_index=1)]
        assert [(e.station_index, e.reason) for e in events_of(h, i, StationLeft)] == [(0, "left")]
        assert [e.index for e in s.table.entries()] == [1, 2, 3]
    assert [s.is_host() for s in rest] == [True, False, False]
    exchange(h, rest, 4)


@pytest.mark.parametrize("version", VERSIONS)
def test_silent_host_migrates_after_station_timeout(version: str) -> None:
    h = BatchHarness(4, version=version)
    group = form(h)
    h.run_for(2.0)
    silenced = h.now
    h.dead.add(group[0].local_address)
    rest = group[1:]
    assert h.run_until(lambda: all(s.table.host_index == 1 for s in rest), 3 * TIMEOUT)
    # Not before the peer was silent for the whole timeout, and not much later.
    assert TIMEOUT - 1.0 <= h.now - silenced <= TIMEOUT + 1.5
    for s in rest:
        i = h.sessions.index(s)
        assert events_of(h, i, HostChanged) == [HostChanged(old_host_index=0, new_host_index=1)]
        assert [(e.station_index, e.reason) for e in events_of(h, i, StationLeft)] == [(0, f"silent for {TIMEOUT:g} s")]
        assert s.statistics()["departures"] == {f"silent for {TIMEOUT:g} s": 1}
    assert [s.index for s in rest] == [1, 2, 3]
    assert h.run_until(lambda: all(len(s.table) == 3 for s in rest), 5.0)
    exchange(h, rest, 3)


@pytest.mark.parametrize("version", VERSIONS)
def test_keepalive_holds_a_quiet_mesh_and_timeout_removes_a_silent_member(version: str) -> None:
    # No RTT probes after the first: only keep-alives fill the silence.
    h = BatchHarness(4, version=version, rtt_interval=3600.0)
    group = form(h)
    # Three station timeouts with no application data: keep-alives hold the mesh.
    h.run_for(3 * TIMEOUT)
    assert all_connected(group)
    assert all(not events_of(h, i, StationLeft) for i in range(4))
    for s in group:
        # About one keep-alive per second from each of three peers.
        assert s.counters["keepalives_received"] >= 3 * (3 * TIMEOUT - 2)
    counter = group[0].table.update_counter
    silenced = h.now
    h.dead.add(group[3].local_address)
    rest = group[:3]
    assert h.run_until(lambda: all(len(s.table) == 3 for s in rest), 3 * TIMEOUT)
    assert TIMEOUT - 1.0 <= h.now - silenced <= TIMEOUT + 1.5
    # The host removed it and announced a new table.
    assert group[0].table.update_counter > counter
    assert h.run_until(lambda: len({s.table.update_counter for s in rest}) == 1, 5.0)
    for i, s in enumerate(rest):
        assert [e.station_index for e in events_of(h, i, StationLeft)] == [3]
        assert s.table.host_index == 0 and 3 not in s.table
    exchange(h, rest, 2)


@pytest.mark.parametrize("rate", [8.0, 3.5])
def test_rtt_probes_bounded_per_node(rate: float) -> None:
    h = BatchHarness(8, version="5.29", rtt_probe_rate=rate)
    group = form(h)
    before = [s.counters["rtt_requests_received"] for s in group]
    h.run_to(h.now + 20.0)
    got = [s.counters["rtt_requests_received"] - b for s, b in zip(group, before)]
    # Seven peers each: one probe a second from each (8/s allows it), or one
    # every 7 / 3.5 = 2 s when the node may send only 3.5 probes a second.
    per_peer_interval = max(1.0, 7 / rate)
    expected = 7 * 20.0 / per_peer_interval
    assert all(expected * 0.85 <= g <= expected * 1.15 for g in got), (got, expected)
    # Every station still has an RTT estimate for every other one.
    assert all(row.rtt is not None for s in group for row in s.stations() if not row.is_self)


@pytest.mark.parametrize("rate", [8.0, 3.5])
def test_rtt_probes_never_leave_in_a_burst(rate: float, monkeypatch: pytest.MonkeyPatch) -> None:
    """A node's probes leave at least 1 / rtt_probe_rate apart, even for peers that
    connected at the same moment: in step, 31 peers' probes (and their answers)
    would land together every few seconds and stall a real-time session."""
    h = BatchHarness(8, version="5.29", rtt_probe_rate=rate)
    sent: dict[int, list[tuple[float, int | None]]] = {}
    real_enqueue = MeshSession.enqueue  # the links queue their probes through it

    def enqueue(self: MeshSession, peer: object, proto: Proto, port: int, payload: bytes) -> None:
        if proto is Proto.RTT and not mw.decode_rtt(self.profile, payload)[0]:
            sent.setdefault(id(self), []).append((h.now, peer.index))  # type: ignore[attr-defined]
        real_enqueue(self, peer, proto, port, payload)  # type: ignore[arg-type]

    monkeypatch.setattr(MeshSession, "enqueue", enqueue)
    group = form(h)
    h.run_to(h.now + 20.0)
    for s in group:
        probes = sent[id(s)]
        gaps = [b[0] - a[0] for a, b in zip(probes, probes[1:])]
        assert min(gaps) >= 1 / rate - 1e-9, (s.index, min(gaps))
        late = [index for t, index in probes if t > h.now - 10.0]
        assert set(late) == {o.index for o in group if o is not s}  # every peer still probed


@pytest.mark.parametrize("version", VERSIONS)
def test_keepalives_only_fill_silence(version: str) -> None:
    h = BatchHarness(3, version=version, rtt_interval=3600.0)
    group = form(h)
    before = [s.counters["keepalives_received"] for s in group]
    # Unreliable data to everyone every 200 ms for three seconds: never a second of silence.
    for _ in range(15):
        for s in group:
            s.broadcast(b"tick", reliable=False, now=h.now)
        h.run_to(h.now + 0.2)
    assert all_connected(group)
    assert [s.counters["keepalives_received"] for s in group] == before
    # Then silence: keep-alives resume, about one a second from each peer.
    h.run_to(h.now + 4.0)
    assert all(s.counters["keepalives_received"] - b >= 2 * 3 for s, b in zip(group, before))


@pytest.mark.parametrize("version", VERSIONS)
def test_a_deadline_that_passed_with_nothing_due_costs_the_peer_no_drain(version: str) -> None:
    """A peer's deadline on the heap is not moved later as things change: an ack that empties its window
    leaves the retransmission time there, and frames sent at once (no queue, no reschedule) move the
    keep-alive on.  When such a time comes, nothing is due for the peer: the session then has no output
    for it (it once drained the peer's queues for nothing, about 2,000 times a second in a 32-station
    session at 60 Hz) and its next timer is the peer's real deadline."""
    h = BatchHarness(2, version=version, rtt_interval=3600.0)
    a, b = form(h)
    h.run_to(h.now + 2.0)  # (past the first RTT probes)
    peer = a.links.by_index(b.index)
    assert peer is not None and peer.data_window is not None
    # 1. A reliable message, acknowledged long before its retransmission time.
    a.send(b.index, b"r", reliable=True, now=h.now)
    assert h.run_until(lambda: peer.data_window.idle(), 0.1)
    stale, real = peer.scheduled, a.links.deadline(peer)
    assert stale is not None and real is not None and stale < real
    a.handle_timer(stale)
    assert not a.has_output() and a.datagrams_to_send(stale) == []
    assert a.links.next_deadline() == pytest.approx(real)
    # 2. Frames sealed at once every 100 ms past the keep-alive time: no keep-alive, and nothing to drain.
    h.run_to(stale)
    keepalive = max(peer.next_keepalive, peer.last_sent + a.config.keepalive_interval)
    heard = b.counters["keepalives_received"]
    sent = 0
    while h.now < keepalive + 0.5:
        datagram = a.send_unreliable_now(b.index, b"frame", h.now)
        assert datagram is not None
        h.deliver(datagram[0], a.local_address, datagram[1])
        sent += 1
        if (due := a.get_timer()) is not None and due <= h.now + 0.1:
            a.handle_timer(due)
            assert not a.has_output() and a.datagrams_to_send(due) == []
        h.now += 0.1
    assert sent >= 10 and b.counters["keepalives_received"] == heard
    assert a.links.deadline(peer) == pytest.approx(h.now - 0.1 + a.config.keepalive_interval)  # the last frame's


@pytest.mark.parametrize("version", VERSIONS)
def test_newcomer_joins_through_the_new_host(version: str) -> None:
    h = BatchHarness(5, version=version)
    group = form(h, [0, 1, 2, 3])
    group[0].leave(h.now)
    rest = group[1:]
    assert h.run_until(lambda: group[0].closed and all(s.table.host_index == 1 and len(s.table) == 3 for s in rest), 10.0)
    newcomer = h.sessions[4]
    newcomer.join(rest[0].local_address, h.now)
    members = [*rest, newcomer]
    assert h.run_until(lambda: all_connected(members), 15.0)
    # Index 0 is free again, and the host hands out the lowest free index; host stays 1.
    assert newcomer.index == 0
    assert {s.table.host_index for s in members} == {1}
    assert events_of(h, 4, MeshJoined) == [MeshJoined(station_index=0, host_index=1)]
    assert all(table_rows(s) == table_rows(rest[0]) for s in members)
    exchange(h, members, 3)


# ---------------------------------------------------------------- loss


@pytest.mark.parametrize("version", VERSIONS)
def test_retransmission_under_loss(version: str) -> None:
    h = BatchHarness(3, version=version, link=Link(loss=0.3, seed=7))
    group = form(h, timeout=60.0)
    exchange(h, group, 30, timeout=120.0)
    assert h.dropped > 0
    # Station/mesh retransmissions and data-window retransmissions both happened.
    assert sum(s.counters["retransmissions"] for s in group) > 0
    assert sum(row.lost for s in group for row in s.stations()) > 0


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("loss", [0.1, 0.2])
@pytest.mark.parametrize("seed", [1, 2])
def test_reliable_exactly_once_in_order_under_faults(version: str, loss: float, seed: int) -> None:
    h = BatchHarness(4, version=version, link=Link(loss=loss, duplicate=0.1, reorder=0.1, seed=seed))
    group = form(h, timeout=60.0)
    assert sorted(s.index for s in group) == [0, 1, 2, 3]
    assert {s.table.host_index for s in group} == {0}
    exchange(h, group, 40, timeout=120.0)
    assert h.dropped > 0
    # Duplicated datagrams are refused by the replay filter, not delivered twice.
    assert sum(s.drops.get("replayed", 0) for s in group) > 0


@pytest.mark.parametrize("version", VERSIONS)
def test_migration_under_faults(version: str) -> None:
    h = BatchHarness(4, version=version, link=Link(loss=0.1, duplicate=0.1, reorder=0.1, seed=3))
    group = form(h, timeout=60.0)
    group[0].leave(h.now)
    rest = group[1:]
    assert h.run_until(lambda: all(s.table.host_index == 1 and 0 not in s.table for s in rest), 3 * TIMEOUT)
    exchange(h, rest, 10, timeout=120.0)


# ---------------------------------------------------------------- timers


def _pump(sessions: list[MeshSession], now: float) -> None:
    """Run due timers and hand every datagram over at once (zero delay), until quiet."""
    by_addr = {s.local_address: s for s in sessions}
    for s in sessions:
        t = s.get_timer()
        if t is not None and t <= now:
            s.handle_timer(now)
    for _ in range(100):
        moved = False
        for s in sessions:
            for data, dst in s.datagrams_to_send(now):
                if dst in by_addr:
                    by_addr[dst].receive_datagram(data, s.local_address, now)
                    moved = True
        if not moved:
            return
    raise AssertionError("datagrams still flowing after 100 rounds")


def test_silence_deadline_makes_progress_when_handled() -> None:
    """A due silence deadline, once handled, is gone (it once stayed due forever: a busy loop)."""
    host = MeshSession(_config(1), ("127.0.0.1", 49152), now=0.0)
    member = MeshSession(_config(2), ("127.0.0.2", 49152), now=0.0)
    host.create(0.0)
    member.join(host.local_address, 0.0)
    # Talk every 0.5 s; the host last hears from the member at exactly 14.007.
    for now in [k * 0.001 for k in range(1, 50)] + [0.5 * k for k in range(1, 28)]:
        _pump([host, member], now)
    assert connected(host) == 1
    member.send(0, b"last words", reliable=False, now=14.007)
    _pump([host, member], 14.007)
    assert [e for e in iter(host.next_event, None) if isinstance(e, DataReceived)][-1].data == b"last words"
    # 14.007 + 5.0 == 19.006999999999998, and 19.006999999999998 - 14.007 < 5.0.
    deadlines = []
    for _ in range(50):
        t = host.get_timer()
        assert t is not None
        deadlines.append(t)
        host.handle_timer(t)
        host.datagrams_to_send(t)
        if 1 not in host.table:
            break
        after = host.get_timer()
        assert after is not None and after > t, f"deadline {t!r} is still due after handle_timer({t!r})"
    assert 1 not in host.table
    assert deadlines[-1] == pytest.approx(14.007 + TIMEOUT)


def _config(i: int) -> NodeConfig:
    return NodeConfig(version="5.18", session_key=bytes(range(16)), bind=(f"127.0.0.{i}", 49152), seed=i)


# ---------------------------------------------------------------- fragmentation, restarts, versions


@pytest.mark.parametrize("version", VERSIONS)
def test_tables_fragment_to_fit_a_small_mtu_under_loss(version: str) -> None:
    mtu = 400
    h = BatchHarness(16, version=version, mtu=mtu, link=Link(loss=0.1, duplicate=0.1, reorder=0.1, seed=5))
    sizes: list[int] = []

    def measure(data: bytes, src: tuple[str, int], dst: tuple[str, int]) -> bytes:
        sizes.append(len(data))
        return data

    h.hook = measure
    group = form(h, timeout=60.0)
    assert sorted(s.index for s in group) == list(range(16))
    assert all(table_rows(s) == table_rows(group[0]) for s in group)
    # Sixteen station entries cannot travel in one 400-byte datagram: the join
    # responses and update-mesh messages were split, and nothing exceeded the MTU.
    assert max(sizes) <= mtu
    exchange(h, group, 3, timeout=120.0)


def test_a_join_burst_with_a_small_mtu_never_raises() -> None:
    try:
        h = BatchHarness(32, mtu=300)
    except ConfigError:
        return  # refusing an MTU too small for a full mesh is fine too
    form(h)


@pytest.mark.parametrize(
    "version",
    [
        "5.18",
        "5.29",
    ],
)
def test_member_restarted_at_the_same_address_joins_again(version: str) -> None:
    h = BatchHarness(4, version=version)
    group = form(h)
    # Station 3 crashes and comes straight back on the same address, with no leave.
    old = group[3]
    fresh = MeshSession(attrs.evolve(old.config, seed=4242), old.local_address, now=h.now)  # new random draws
    h.sessions[3] = fresh
    h.by_addr[fresh.local_address] = fresh
    fresh.join(group[0].local_address, h.now)
    members = [*group[:3], fresh]
    assert h.run_until(lambda: all_connected(members), TIMEOUT + fresh.config.join_timeout)
    assert fresh.index == 3
    exchange(h, members, 2)


@pytest.mark.parametrize("version", ["5.18", "5.29"])
@pytest.mark.parametrize("after_timeout", [False, True], ids=["at-once", "after-its-timeout"])
def test_a_restarted_member_whose_nonce_counter_starts_lower_joins_again(version: str, after_timeout: bool) -> None:
    # A station's header nonce counter starts anywhere (NC-2020: random per socket, spec §9), so a
    # station restarted on the same address may count from below its old self.  The departed
    # identity's replay memory must not judge the new one: neither at the host (the station
    # timed out there first) nor at the members that connect to it after the host's update.
    h = BatchHarness(4, version=version)
    group = form(h)
    old = group[3]
    if after_timeout:
        h.dead.add(old.local_address)  # it vanishes (no leave) until every station has dropped it
        assert h.run_until(lambda: all(len(s.table) == 3 for s in group[:3]), 3 * TIMEOUT)
        h.dead.discard(old.local_address)
    fresh = MeshSession(attrs.evolve(old.config, seed=4242), old.local_address, now=h.now)
    fresh.outbox._nonce_counter = 0  # below everything its old self sent
    h.sessions[3] = fresh
    h.by_addr[fresh.local_address] = fresh
    fresh.join(group[0].local_address, h.now)
    members = [*group[:3], fresh]
    assert h.run_until(lambda: all_connected(members), TIMEOUT + fresh.config.join_timeout)
    exchange(h, members, 2)
    assert not any(s.statistics()["drops"].get("replayed") for s in members)


@pytest.mark.parametrize(("version", "network"), [("5.7", "lan"), ("5.18", "lan"), ("5.29", "lan"), ("6.32", "ldn")])
@pytest.mark.parametrize("mtu", [1364, 1472])
def test_unreliable_data_up_to_what_one_datagram_carries_and_no_more(version: str, network: str, mtu: int) -> None:
    # Unreliable data is never split (spec §5.8) and a console receives at most 1472 bytes (spec
    # §1.8): every unreliable message up to the limit arrives whole in a datagram of at most mtu
    # bytes, unicast and broadcast (5.27+: one group packet with its footer), the empty one too;
    # one byte more is refused at the sender instead of vanishing on the way.
    h = BatchHarness(4, version=version, network=network, mtu=mtu)
    group = form(h)
    a, b = group[0], group[1]
    limit = a.outbox.max_unreliable
    assert limit >= mtu - 80
    sizes: list[int] = []
    h.hook = lambda data, src, dst: sizes.append(len(data)) or data
    assert b.index is not None
    for data in (b"", b"x", bytes(limit)):
        a.send(b.index, data, reliable=False, now=h.now)
        sealed = a.send_unreliable_now(b.index, data, h.now)
        if sealed is not None:
            h.deliver(sealed[0], a.local_address, sealed[1])
            sizes.append(len(sealed[0]))
        a.broadcast(data, reliable=False, now=h.now)
        h.run_for(0.5)
        got = [e.data for e in events_of(h, 1, DataReceived) if not e.reliable]
        assert got[-3:] == [data] * 3
        assert all([e.data for e in events_of(h, i, DataReceived) if not e.reliable][-1:] == [data] for i in (2, 3))
        h.events[1].clear()
    assert sizes and max(sizes) <= mtu
    for send in (
        lambda: a.send(b.index, bytes(limit + 1), reliable=False, now=h.now),  # type: ignore[arg-type]
        lambda: a.send_unreliable_now(b.index, bytes(limit + 1), h.now),  # type: ignore[arg-type]
        lambda: a.broadcast(bytes(limit + 1), reliable=False, now=h.now),
        lambda: a.broadcast_unreliable_now(bytes(limit + 1), h.now),
    ):
        with pytest.raises(MessageTooLarge, match=f"unreliable message of {limit + 1} bytes"):
            send()
    # Reliably, the window splits it.
    a.send(b.index, bytes(4 * mtu), reliable=True, now=h.now)
    h.run_for(2.0)
    assert [e.data for e in events_of(h, 1, DataReceived) if e.reliable][-1:] == [bytes(4 * mtu)]


@pytest.mark.parametrize(("version", "theirs"), [("5.14", 4), ("5.18", 3)])
def test_a_header_version_of_the_same_layout_but_another_version_is_counted_as_such(version: str, theirs: int) -> None:
    # H-C carries header version 3 (5.11-5.17) or 4 (5.18-5.21), spec §0.3; NintendoClients e8f85f5
    # writes 4 at every version from 5.11 (spec §10.1 item 1) with that version's messages.  The
    # version byte is not authenticated (no associated data, spec §3.1), so it is rewritten here.
    h = BatchHarness(2, version=version)
    host, joiner = h.sessions

    def rewrite(data: bytes, src: tuple[str, int], dst: tuple[str, int]) -> bytes:
        return data[:4] + bytes([0x80 | theirs]) + data[5:] if src == joiner.local_address else data

    h.hook = rewrite
    host.create(h.now)
    joiner.join(host.local_address, h.now)
    h.run_for(3.0)
    assert not joiner.joined
    drops = host.statistics()["drops"]
    assert isinstance(drops, dict) and set(drops) == {"other_version"} and drops["other_version"] >= 2


def test_a_joiner_of_another_version_is_told_why() -> None:
    h = BatchHarness(2, version="5.18")
    stranger = MeshSession(
        NodeConfig(version="5.29", session_key=bytes(range(16)), bind=("127.0.0.2", 49152), seed=9),
        ("127.0.0.2", 49152),
        now=0.0,
    )
    h.sessions[1] = stranger
    h.by_addr[stranger.local_address] = stranger
    h.sessions[0].create(0.0)
    stranger.join(h.sessions[0].local_address, 0.0)
    assert h.run_until(lambda: stranger.closed, 30.0)
    assert not stranger.joined and len(h.sessions[0].table) == 1
    assert stranger.failure is not None and "version" in stranger.failure


def _block_reliable(h: MeshHarness, src: MeshSession, dst: MeshSession, start: float, seconds: float) -> None:
    """Drop every datagram from *src* to *dst* that carries reliable data, for *seconds* (keep-alives pass)."""
    reliable_id = src.profile.protocol_id(Proto.RELIABLE)

    def hook(data: bytes, s: tuple[str, int], d: tuple[str, int]) -> bytes | None:
        if s == src.local_address and d == dst.local_address and start <= h.now < start + seconds:
            assert src.codec is not None
            if any(m.protocol_type == reliable_id for m in src.codec.decode(data, s[0]).messages):
                return None
        return data

    h.hook = hook


@pytest.mark.parametrize("version", VERSIONS)
def test_reliable_data_outlives_an_eight_second_outage(version: str) -> None:
    h = BatchHarness(3, version=version)
    group = form(h)
    a, b = group[1], group[2]
    _block_reliable(h, a, b, h.now, 8.0)
    assert b.index is not None
    a.send(b.index, b"late but sure", reliable=True, now=h.now)
    h.run_for(20.0)
    assert received(h, 2) == {1: [b"late but sure"]}
    assert all_connected(group)
    assert not any(events_of(h, i, StationLeft) for i in range(3))


@pytest.mark.parametrize("version", VERSIONS)
def test_members_whose_window_gave_up_reconnect(version: str) -> None:
    h = BatchHarness(3, version=version)
    group = form(h)
    a, b = group[1], group[2]
    _block_reliable(h, a, b, h.now, 20.0)  # longer than the window's give-up time
    assert b.index is not None
    a.send(b.index, b"lost cause", reliable=True, now=h.now)
    h.run_for(20.0)
    # Everyone still hears everyone (keep-alives passed): the mesh must converge
    # again, with every station in the host's table connected to every other.
    assert h.run_until(
        lambda: all_connected([s for s in group if s.index in group[0].table]) and len(group[0].table) >= 2, 30.0
    )
    members = [s for s in group if s.index in group[0].table]
    assert all(table_rows(s) == table_rows(group[0]) for s in members)


@pytest.mark.parametrize("version", VERSIONS)
def test_join_racing_the_host_leave_converges(version: str) -> None:
    h = BatchHarness(4, version=version)
    group = form(h, [0, 1, 2])
    newcomer = h.sessions[3]
    newcomer.join(group[0].local_address, h.now)
    h.run_for(0.002)  # the join request is on its way
    group[0].leave(h.now)
    rest = [group[1], group[2]]
    assert h.run_until(lambda: group[0].closed and all(s.table.host_index == 1 for s in rest), 10.0)
    h.run_for(TIMEOUT + 5.0)
    # Either the newcomer made it (everyone lists and reaches it) or it was told it did not.
    if newcomer.joined and not newcomer.closed:
        members = [*rest, newcomer]
        assert all_connected(members)
        assert all(table_rows(s) == table_rows(rest[0]) for s in members)
    else:
        assert newcomer.failure is not None
        assert all(len(s.table) == 2 for s in rest)


def test_every_counter_the_session_bumps_is_declared() -> None:
    # counters is a plain dict seeded from COUNTERS: an undeclared key would raise KeyError at run time.
    import pathlib
    import re

    import pianode.mesh.session as session_module
    from pianode.mesh.stats import COUNTERS

    # Every part of the session bumps counters through the one Tally.
    source = "".join(p.read_text() for p in pathlib.Path(session_module.__file__).parent.glob("*.py"))
    used = set(re.findall(r'counters\["([a-z_]+)"\]', source)) | set(re.findall(r'"([a-z_]+)" if reliable else "([a-z_]+)"', source)[0])
    assert used and used <= set(COUNTERS)


def test_harness_catches_a_stale_group_view(monkeypatch: pytest.MonkeyPatch) -> None:
    """The harness checks every session's cached group view after every step
    (mesh_harness.check_group_view); without the resets it fails at once."""
    monkeypatch.setattr(Links, "membership_changed", lambda self: None)
    h = BatchHarness(3, version="5.29")
    with pytest.raises(AssertionError, match="stale group view"):
        form(h)


@pytest.mark.parametrize("version", ["5.29", "5.43"])
def test_group_frames_follow_membership(version: str) -> None:
    """Group frames (one packet, receivers in the footer) reach exactly the
    current members through joins, a departure and a newcomer."""
    h = BatchHarness(5, version=version)
    group = form(h, [0, 1, 2, 3])
    sender = group[1]

    def frame(tag: bytes) -> set[int]:
        before = {i: len(received(h, i, reliable=False).get(sender.index, [])) for i in range(5)}
        sender.broadcast(tag, reliable=False, now=h.now)
        h.run_to(h.now + 0.05)
        return {
            s.index  # type: ignore[misc]
            for i, s in enumerate(h.sessions)
            if len(received(h, i, reliable=False).get(sender.index, [])) > before[i]
        }

    assert frame(b"a") == {group[0].index, group[2].index, group[3].index}
    group[3].leave(h.now)
    assert h.run_until(lambda: group[3].closed and all(len(s.table) == 3 for s in group[:3]), 10.0)
    assert frame(b"b") == {group[0].index, group[2].index}
    newcomer = h.sessions[4]
    newcomer.join(group[0].local_address, h.now)
    assert h.run_until(lambda: newcomer.joined and all_connected([*group[:3], newcomer]), 10.0)
    assert frame(b"c") == {group[0].index, group[2].index, newcomer.index}
    assert sender.counters["group_packets_sent"] == 3


GROUP = ("127.255.255.255", 40000)


@pytest.mark.parametrize("link", [Link(), Link(loss=0.2, duplicate=0.1, reorder=0.1, seed=5)], ids=["clean", "lossy"])
def test_reliable_broadcast_goes_out_as_one_group_packet(link: Link) -> None:
    """With group broadcast on (5.27+), a reliable broadcast is one group packet
    holding each station's segment (its own sequence, its destination bit);
    receivers keep their own segment only and ack it; retransmissions go to the
    station alone.  Every message arrives exactly once, in order, loss or not."""
    h = BatchHarness(5, version="5.29", link=link, group_broadcast=GROUP, rtt_interval=3600.0)
    routed: list[tuple[str, int]] = []

    def count(data: bytes, src: tuple[str, int], dst: tuple[str, int]) -> bytes:
        routed.append(dst)
        return data

    group = form(h)
    h.hook = count
    sent_before = sum(s.counters["group_packets_sent"] for s in group)
    for k in range(20):
        for s in group:
            assert s.broadcast(b"b%d:%d" % (s.index or 0, k), reliable=True, now=h.now) == 4
        h.run_to(h.now + 0.02)
    assert h.run_until(lambda: all(len(sum(received(h, i).values(), [])) == 80 for i in range(5)), 30.0)
    h.run_to(h.now + 0.1)
    for i, s in enumerate(group):
        assert received(h, i) == {o.index: [b"b%d:%d" % (o.index or 0, k) for k in range(20)] for o in group if o is not s}
    # One group packet per reliable broadcast (and none for the retransmissions).
    assert sum(s.counters["group_packets_sent"] for s in group) - sent_before == 100
    if link.loss:
        # Losses were repaired by retransmissions to the station alone.
        assert sum(w.statistics().retransmitted for s in group for p in s.peers.values() if (w := p.data_window)) > 0
        return
    assert sum(1 for dst in routed if dst == GROUP) == 100
    assert all(s.counters["retransmissions"] == 0 for s in group)
    # Each receiver skipped the three segments meant for the others, in each of the
    # 80 packets it heard (all but its own 20).
    assert all(s.counters["group_messages_for_others"] == 80 * 3 for s in group)


def test_reliable_broadcast_without_group_broadcast_stays_unicast() -> None:
    h = BatchHarness(4, version="5.29")
    group = form(h)
    before = sum(s.counters["group_packets_sent"] for s in group)
    for s in group:
        s.broadcast(b"x", reliable=True, now=h.now)
    h.run_to(h.now + 0.1)
    assert sum(s.counters["group_packets_sent"] for s in group) == before
    assert all(received(h, i) == {o.index: [b"x"] for o in group if o is not s} for i, s in enumerate(group))


def test_group_message_reaches_only_the_stations_its_destination_names() -> None:
    """Unreliable data in a group packet whose destination names one station is
    delivered to that station only, even though the footer names them all."""
    h = BatchHarness(3, version="5.29", group_broadcast=GROUP)
    s0, s1, s2 = form(h)
    assert s0.codec is not None and s1.index is not None
    _, _, footer = s0.links.view()
    header = mw.group_header(s0.profile, s0.variable_id, 77, s0.next_header_nonce())
    message = Message(s0.protocol_ids[Proto.UNRELIABLE], 0, b"only for s1", s0.profile.bitmap_flag, 1 << s1.index)
    data = s0.codec.encode(Packet(header, (message,), footer), s0.local_address[0])
    for s in (s1, s2):
        s.receive_group_datagram(data, s0.local_address, h.now)
        s.receive_group_datagram(data, s0.local_address, h.now)  # a replay changes nothing
    h._send_all()
    assert received(h, 1, reliable=False) == {s0.index: [b"only for s1"]}
    assert received(h, 2, reliable=False) == {}
    assert s2.counters["group_messages_for_others"] == 1 and s2.drops["replayed"] == 1


def test_a_frame_for_every_station_takes_the_fast_lane() -> None:
    """A group frame of unreliable data addressed to every member goes straight to
    the application: the receiver never walks its messages one by one."""
    h = BatchHarness(3, version="5.29", group_broadcast=GROUP)
    s0, s1, s2 = form(h)
    assert s0.broadcast(b"frame", reliable=False, now=h.now) == 2
    (data, dst), = [d for d in s0.datagrams_to_send(h.now) if d[1] == GROUP]
    assert s0.codec is not None and s0._nonce_builder is not None
    decoded = mw.shared_decode(
        s0.codec, s1._codec_key, data, s0.local_address[0], s0._nonce_builder, s0.protocol_ids[Proto.UNRELIABLE]
    )

    class Opaque:
        header = decoded.packet.header

        @property
        def messages(self) -> tuple[Message, ...]:
            raise AssertionError("the frame's messages were walked one by one")

    mw._LAST.group = attrs.evolve(decoded, packet=Opaque())
    for s in (s1, s2):
        s.receive_group_datagram(data, s0.local_address, h.now)
    h._send_all()
    assert received(h, 1, reliable=False) == {s0.index: [b"frame"]}
    assert received(h, 2, reliable=False) == {s0.index: [b"frame"]}


@pytest.mark.parametrize("version", ["5.18", "5.29"])
def test_a_session_that_needs_no_flush_has_none_to_do(version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Node.receive_nowait skips the flush after a read when MeshSession.needs_flush() is False (a frame
    # clock's read of every station, most ticks): a flush then must send nothing, hand over no event and
    # close nothing.  Checked before every flush of a mesh's life: data both ways, then a station that
    # leaves while its data is in flight and its first packets are lost (the last ack it waits for may
    # be a data ack, which touches nothing), then the host leaving (migration).
    h = BatchHarness(4, version=version)
    group = form(h)
    skipped: list[int] = []
    flush = MeshSession.datagrams_to_send

    def checked(session: MeshSession, now: float) -> list[tuple[bytes, tuple[str, int]]]:
        needs, closed, events = session.needs_flush(), session.closed, session.has_events()
        out = flush(session, now)
        if not needs:
            skipped.append(1)
            assert (out, session.closed, events, session.has_events()) == ([], closed, False, False)
        return out

    monkeypatch.setattr(MeshSession, "datagrams_to_send", checked)
    exchange(h, group, 3)
    sender, receiver = group[1], group[3]  # unreliable data: an event, and nothing to send back
    assert receiver.index is not None
    sender.send(receiver.index, b"frame", reliable=False, now=h.now)
    for data, _ in flush(sender, h.now):
        receiver.receive_datagram(data, sender.local_address, h.now)
    assert receiver.has_events() and not receiver.has_output() and receiver.needs_flush()
    leaver = group[2]
    lost_until = h.now + 0.3
    h.hook = lambda data, src, dst: None if src == leaver.local_address and h.now < lost_until else data
    for index in (0, 1, 3):
        leaver.send(index, b"last words", reliable=True, now=h.now)
    leaver.leave(h.now)
    flush(leaver, h.now)  # (lost)
    assert not leaver.has_output() and leaver.needs_flush()  # a leave may complete in any flush
    rest = [group[0], group[1], group[3]]
    assert h.run_until(lambda: leaver.closed and all(len(s.table) == 3 for s in rest), 10.0)
    h.hook = None
    group[0].leave(h.now)
    assert h.run_until(lambda: group[0].closed and group[1].table.host_index == 1, 10.0)
    assert len(skipped) > 20
