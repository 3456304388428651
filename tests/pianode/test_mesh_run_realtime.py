"""The real-time session of ``pianode mesh --rate``: shared frame clock, reliable
messages spread over the second, CPU load reported, heap frozen while it runs."""

from __future__ import annotations

import gc

from loopback_addresses import loopback_block

from pianode.config import NodeConfig
from pianode.mesh_run import MeshRun, _frozen_heap


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
    assert result.ok, result.problems
    frames = int(duration * rate)
    assert result.frames_expected == result.frames_delivered == nodes * (nodes - 1) * frames
    # One reliable message per station per second of frames, each to every other station.
    assert result.reliable_expected == result.reliable_delivered == nodes * (nodes - 1)
    summary = result.summary()["frames"]
    assert summary["cpu_load_pct"] is not None and 0 < summary["cpu_load_pct"] < 100
    assert gc.get_freeze_count() == 0
