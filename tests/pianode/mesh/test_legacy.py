"""pianode.mesh.legacy: the Pia 3.3-5.6 rules of the node, one by one."""

from __future__ import annotations

import attrs
import pytest

from pianode.mesh import legacy
from pianode.mesh.config import NodeConfig, node_refusal
from pianode.mesh.packet_ids import PacketIdCounter
from pianode.mesh.rtt import HeaderTimers
from protocols.pia.header import PacketHeader
from protocols.pia.versions import NetworkType, profile_for


@attrs.define
class FakePeer:
    connected: bool = False
    index: int | None = None
    own_conn_id: int = 77
    tx_ids: PacketIdCounter = attrs.field(factory=PacketIdCounter)
    header_timers: HeaderTimers = attrs.field(factory=lambda: HeaderTimers(0.0))


def test_header_connection_id_rule() -> None:
    p = profile_for("4.10")
    peer = FakePeer()
    # Our own index unknown (253): connection id 1, packet id 0.
    h = legacy.make_header(p, peer, None, False, 1.0)
    assert (h.connection_id, h.packet_id, h.encrypted, h.source_timer, h.destination_timer) == (1, 0, False, 1000, 0)
    # We have an index, the peer has none in our table: 0 / 0.
    assert (legacy.make_header(p, peer, 0, True, 1.0).connection_id, 0) == (0, 0)
    # Both known: our own id, packet ids from 1.
    peer.connected, peer.index = True, 1
    ids = [(h.connection_id, h.packet_id) for h in (legacy.make_header(p, peer, 0, True, 1.0) for _ in range(3))]
    assert ids == [(77, 1), (77, 2), (77, 3)]
    # The destination timer estimates the peer's clock once it was heard (spec §1.5).
    peer.header_timers.on_receive(500, 0, 2.0)
    assert legacy.make_header(p, peer, 0, True, 2.010).destination_timer == 510


def test_replay_filter_unwraps_packet_ids() -> None:
    f = legacy.PacketIdReplayFilter()
    # Packets without a packet id (connection set-up) are judged at first contact, not here.
    zero = legacy.replay_nonce(PacketHeader(True, 0, tag=bytes(range(16))))
    assert zero == b"\x00" + bytes(range(7)) and f.accept(zero) and f.accept(zero)
    seq = [*range(65530, 65536), *range(1, 6)]  # a rollover, 0 skipped (spec §1.4)
    assert all(f.accept(legacy.replay_nonce(PacketHeader(True, i))) for i in seq)
    assert not f.accept(legacy.replay_nonce(PacketHeader(True, 65533)))  # replayed across the rollover
    assert not f.accept(legacy.replay_nonce(PacketHeader(True, 3)))
    assert f.accept(legacy.replay_nonce(PacketHeader(True, 7)))
    assert f.accept(legacy.replay_nonce(PacketHeader(True, 6)))  # reordered, not seen: fresh
    # Once the connection numbers its packets, one without a packet id is a replay (spec §1.3, §1.4),
    # but where its sender has lost its own index (connection id 1: joining again), each passes once.
    assert not f.accept(zero)
    rejoin = legacy.replay_nonce(PacketHeader(True, 0, 1, tag=bytes(range(1, 17))))
    assert f.accept(rejoin) and not f.accept(rejoin)


def test_replay_filter_starts_anywhere() -> None:
    f = legacy.PacketIdReplayFilter()
    assert f.accept_value(40000) and f.accept_value(40001) and not f.accept_value(40000)
    assert f.accept_value(39990)  # within the window below the first id seen


@pytest.mark.parametrize(("version", "network", "runs"), [
    ("3.3", "nex", True), ("3.3", "ldn", True), ("3.3", "lan", False), ("4.10", "lan", False),
    ("5.2", "lan", True), ("5.6", "ldn", True), ("5.7", "lan", True), ("5.45", "nex", True),
])  # fmt: skip
def test_which_versions_run(version: str, network: str, runs: bool) -> None:
    why = node_refusal(profile_for(version), NetworkType(network))
    assert (why is None) is runs
    if runs:
        NodeConfig(version=version, network=network)


def test_profile_facts() -> None:
    assert legacy.rtt_port(profile_for("4.10")) == 0 and legacy.rtt_port(profile_for("5.7")) == 1
    assert legacy.plain_packets(profile_for("5.6"), NetworkType.LDN)
    assert not legacy.plain_packets(profile_for("5.6"), NetworkType.LAN)
    assert not legacy.plain_packets(profile_for("5.7"), NetworkType.LDN)
    assert [legacy.platform(profile_for(v)) for v in ("3.10", "4.10", "5.6")] == [3, 2, 4]
    assert legacy.message_source_id(NetworkType.NEX, 0x654D48) == 0x654D48  # a PID, as in the nDPI capture
    assert legacy.message_source_id(NetworkType.LDN, 5) == 0 == legacy.message_source_id(NetworkType.LAN, 1 << 40)
    assert legacy.default_network(profile_for("4.10")) is NetworkType.NEX
    assert legacy.default_network(profile_for("5.2")) is NetworkType.LAN
    # 4.x (3DS) names are UTF-16LE as the real frames show, 3.x (Wii U) big-endian.
    assert legacy.token(profile_for("4.10"), "BB") == "BB".encode("utf-16-le")
    assert legacy.token(profile_for("3.10"), "BB") == "BB".encode("utf-16-be")


@pytest.mark.parametrize(("version", "network"), [("3.10", "nex"), ("4.10", "ldn"), ("5.6", "lan")])
def test_forms_under_loss_duplication_and_reordering(version: str, network: str) -> None:
    """10 % loss, 5 % duplicates, 10 % reordering, 40 seeds: every 4-station mesh forms and data flows
    (a lost connection response, join response or update mesh is what the counter-less 3.x/4.x join
    and the answers-as-acks must survive)."""
    from mesh_harness import Link, MeshHarness, all_connected

    for seed in range(40):
        h = MeshHarness(4, version=version, network=network, link=Link(loss=0.1, duplicate=0.05, reorder=0.1, seed=seed))
        h.sessions[0].create(h.now)
        for s in h.sessions[1:]:
            s.join(h.sessions[0].local_address, h.now)
        assert h.run_until(lambda: all_connected(h.sessions), 20), f"seed {seed}"
        h.sessions[3].send(0, b"ping", reliable=True, now=h.now)
        h.sessions[0].send(h.sessions[3].index, b"pong", reliable=True, now=h.now)
        h.run_for(3.0)
        assert [e.data for e in h.events[0] if type(e).__name__ == "DataReceived"] == [b"ping"], f"seed {seed}"
        assert [e.data for e in h.events[3] if type(e).__name__ == "DataReceived"] == [b"pong"], f"seed {seed}"


def _timed(packet_id: int, source_timer: int, own_timer: int) -> bytes:
    return legacy.replay_nonce(PacketHeader(True, packet_id, 9, source_timer=source_timer, destination_timer=0), own_timer)


def test_replay_filter_takes_a_packet_id_at_most_max_leap_ahead() -> None:
    f = legacy.PacketIdReplayFilter()
    assert f.accept_value(100)
    assert not f.accept_value(100 + legacy.MAX_LEAP + 1)  # (spec §1.4: a recorded id come round again)
    assert f.accept_value(100 + legacy.MAX_LEAP)
    # The sender's own next packets, MAX_LEAP behind, are still inside the window.
    assert all(f.accept_value(i) for i in range(101, 140))
    assert not f.accept_value(120)
    high = 100 + legacy.MAX_LEAP
    assert not f.accept_value(high - legacy.ID_WINDOW) and f.accept_value(high - legacy.ID_WINDOW + 1)
    # Far behind, or just past half the id space ahead: refused either way.
    assert not f.accept_value((high + 0x8001) & 0xFFFF) and not f.accept_value((high + 0x7FFF) & 0xFFFF)


def test_replay_filter_judges_source_timers_against_the_senders_clock() -> None:
    f = legacy.PacketIdReplayFilter()
    assert f.accept(_timed(1, 50_000, 1_000))  # the sender's clock leads ours by 49,000 ms
    # Settling (2 s): a packet that took less time than the first raises the estimate.
    assert f.accept(_timed(2, 50_600, 1_500))  # 100 ms earlier than the first's delay suggests
    # Settled (the sender's clock reads 52,400 when ours reads 3,300):
    assert f.accept(_timed(3, 52_000, 3_200))  # on time (300 ms of delay, within 2.5 s)
    assert not f.accept(_timed(4, 52_400 - 2_600, 3_300))  # 2.6 s late: recorded long ago
    assert not f.accept(_timed(5, 52_400 + 300, 3_300))  # 300 ms early: no delay is that much shorter
    assert f.accept(_timed(6, 52_400 + 200, 3_300))  # 200 ms early: a shorter delay than any before
    assert not f.accept(_timed(7, 52_400 + 400, 3_300))  # (the estimate rose by 1 ms, not by 200)
    # Timers wrap at 2**16 ms on both sides.
    assert f.accept(_timed(8, (52_400 + 65_000) & 0xFFFF, (3_300 + 65_000) & 0xFFFF))
    # A timer refused leaves its packet id unseen: the real packet with that id still counts.
    assert f.accept(_timed(4, (52_400 + 65_000) & 0xFFFF, (3_300 + 65_000) & 0xFFFF))


def test_replay_filter_clock_starts_again_on_a_next_connection() -> None:
    f = legacy.PacketIdReplayFilter()
    assert f.accept(_timed(1, 30_000, 1_000)) and f.accept(_timed(2, 30_100, 1_100))
    assert not f.accept(_timed(3, 5_000, 1_200))  # a restarted sender's clock, on the old connection
    f.restart()  # (pianode.mesh.links, when the connection closes)
    assert f.accept(_timed(3, 5_000, 1_200)) and f.accept(_timed(4, 5_100, 1_300))


def test_real_splatoon2_flows_pass_the_timer_and_id_checks_and_their_replays_do_not(captures) -> None:
    """Every numbered packet of the nDPI Splatoon 2 capture (Pia <= 5.6 over the internet, jitter of
    tens of ms) passes, judged at the capture's own times; the same flow replayed a minute later does not."""
    from pianode.capture.pcap import open_capture

    flows: dict[tuple[str, str, int], list[tuple[float, int, int]]] = {}
    with open_capture(captures / "nDPI-nintendo.pcap") as capture:
        datagrams = list(capture)
    for d in datagrams:
        p = d.data
        if p[:4] == b"\x32\xab\x98\x64" and p[5] not in (0, 1) and int.from_bytes(p[6:8], "big"):
            flows.setdefault((d.src, d.dst, p[5]), []).append(
                (d.time, int.from_bytes(p[6:8], "big"), int.from_bytes(p[8:10], "big"))
            )
    assert len(flows) == 12 and sum(map(len, flows.values())) == 723
    for key, packets in flows.items():
        f = legacy.PacketIdReplayFilter()
        start = packets[0][0]
        own = [int((t - start) * 1000 + 7_000) & 0xFFFF for t, _, _ in packets]  # the receiver's clock
        assert all(f.accept(_timed(pid, st, at)) for (_, pid, st), at in zip(packets, own, strict=True)), key
        late = int((packets[-1][0] - start + 60) * 1000 + 7_000) & 0xFFFF  # a minute after the last
        assert not any(f.accept(_timed(pid, st, late)) for _, pid, st in packets), key
