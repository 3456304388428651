"""The real-time session of ``pianode mesh --rate``: shared frame clock, reliable
messages spread over the second, CPU load reported, heap frozen while it runs."""

from __future__ import annotations

import gc
import time

import trio

from loopback_addresses import loopback_block

from pianode.mesh.config import NodeConfig
from pianode.sim.mesh_run import MeshRun, _frozen_heap


def test_frozen_heap_only_while_the_session_runs() -> None:
    assert gc.get_freeze_count() == 0
    keep = [[i] for i in range(100)]  # tracked objects alive before the session
    with _frozen_heap(True):
        assert gc.get_freeze_count() >= len(keep)
    assert gc.get_freeze_count() == 0
    with _frozen_heap(False):
        assert gc.get_freeze_count() == 0


async def test_realtime_session_counts_frames_and_one_reliable_message_a_second() -> None:
    nodes, rate, duration = 5, 20, 1.0
    run = MeshRun(NodeConfig(version="5.29", seed=3), nodes=nodes, base_address=loopback_block() + "30",
                  rate=rate, duration=duration, group_fanout="broadcast", freeze_gc=True)
    result = await run.run()
    assert not result.problems, result.problems  # (on time or LATE: a timing matter, not checked here)
    frames = int(duration * rate)
    assert result.frames_expected == result.frames_delivered == nodes * (nodes - 1) * frames
    # One reliable message per station per second of frames, each to every other station.
    assert result.reliable_expected == result.reliable_delivered == nodes * (nodes - 1)
    summary = result.summary()["frames"]
    assert summary["cpu_load_pct"] is not None and 0 < summary["cpu_load_pct"] < 100
    assert gc.get_freeze_count() == 0


async def test_late_frames_are_placed_on_the_sessions_timeline() -> None:
    """A stall of the process 1.3 s into the session makes the frames due during it late,
    and the summary puts them all in second 1 (a stall, not load spread over the run)."""
    from pianode.cli.mesh import render_summary

    nodes, rate, duration = 3, 20, 2.5
    run = MeshRun(NodeConfig(version="5.29", seed=4), nodes=nodes, base_address=loopback_block() + "40",
                  rate=rate, duration=duration, group_fanout="broadcast")

    async def stall() -> None:
        with trio.fail_after(30):
            while run.result.session_start is None:
                await trio.sleep(0.005)
        await trio.sleep_until(run.result.session_start + 1.3)
        time.sleep(0.2)  # blocks the whole Trio run, as a stall of the machine would

    async with trio.open_nursery() as nursery:
        nursery.start_soon(stall)
        result = await run.run()
    assert result.frames_delivered == result.frames_expected
    frames = result.summary()["frames"]
    assert frames["late"] > 0
    assert frames["late_by_second"].keys() == {1}
    assert sum(frames["late_by_second"].values()) == frames["late"]
    assert "late frames in 1 second(s) of the session; most at 1 s (" in render_summary(result)
    # Every frame arrived, but more than 1 % of them late: the run missed its latency target, says so
    # and fails (pianode mesh exits 1 when not ok).
    assert frames["within_threshold_pct"] < 99
    assert result.late and not result.ok and result.summary()["ok"] is False and not result.problems
    assert render_summary(result).splitlines()[-1].startswith("result: LATE in ")


async def test_every_stream_is_warmed_up_before_the_frame_clock_starts() -> None:
    """5.18 unicast: each station sends one message on its stream to every other before the session's
    clock starts, so the first packet of each stream (which builds the node's sealer and opener for it)
    is not one of the session's frames; the frames are counted as before."""
    nodes, rate, duration = 4, 30, 0.5
    run = MeshRun(NodeConfig(version="5.18", seed=5), nodes=nodes, base_address=loopback_block() + "50",
                  rate=rate, duration=duration, group_fanout="unicast")
    result = await run.run()
    assert not result.problems, result.problems
    assert result.warm_up == (nodes * (nodes - 1), nodes * (nodes - 1))
    assert result.summary()["frames"]["warm_up"] == {"heard": 12, "sent": 12}
    assert result.frames_expected == result.frames_delivered == nodes * (nodes - 1) * int(duration * rate)
    for node in run.nodes:  # every stream's fast path was made by the warm-up
        for peer in node.session.peers.values():
            assert peer.sealer is not None and peer.sealer[1] is not None
            assert peer.opener is not None and peer.opener[1] is not None


async def test_host_migration_after_a_realtime_session_numbers_on_from_the_sessions_messages() -> None:
    """``pianode mesh --rate R --leave``: the reliable messages after the host leaves follow the
    session's own, numbered on from them, so each is delivered once (not counted as a duplicate)."""
    nodes, rate, duration = 3, 30, 1.0
    run = MeshRun(NodeConfig(version="5.29", seed=5), nodes=nodes, base_address=loopback_block() + "50",
                  rate=rate, duration=duration, leave_host=True, messages=4)  # fmt: skip
    result = await run.run()
    assert result.ok, result.problems
    assert result.duplicates == 0 and result.out_of_order == 0
    assert sorted(result.host_changes) == ["station 1: 0 -> 1", "station 2: 0 -> 1"]
    # One a second per station during the session, then messages // 2 from each of the two left.
    assert result.reliable_delivered == result.reliable_expected == nodes * (nodes - 1) + 2 * 1 * 2


async def test_the_frame_clock_reads_the_stations_itself_while_it_runs() -> None:
    """The frame clock reads every station's socket each tick (Node.receive_nowait), and the stations'
    drivers leave their sockets to it (Node.set_polled) while it runs, and only then."""
    nodes, rate, duration = 3, 30, 0.5
    seen: list[bool] = []

    class Watched(MeshRun):
        async def _ticks(self, stations, *args, **kwargs):  # type: ignore[no-untyped-def]
            seen.extend(node.polled for node, _, _, _ in stations)
            await super()._ticks(stations, *args, **kwargs)

    run = Watched(NodeConfig(version="5.18", seed=6), nodes=nodes, base_address=loopback_block() + "60",
                  rate=rate, duration=duration, group_fanout="unicast")
    result = await run.run()
    assert not result.problems, result.problems
    assert seen == [True] * nodes
    assert result.frames_expected == result.frames_delivered == nodes * (nodes - 1) * int(duration * rate)
    assert not any(node.polled for node in run.all_nodes)
