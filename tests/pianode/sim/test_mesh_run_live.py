"""The live station table of `pianode mesh`: MeshRun hands the renderer fresh rows while the run goes on."""

from __future__ import annotations

from typing import Any

import trio

from pianode.cli.mesh import render_rows
from pianode.mesh.config import NodeConfig
from pianode.sim.mesh_run import MeshRun

COLUMNS = {"index", "host", "address", "rtt_ms", "sent", "received", "lost"}


def test_live_rows_arrive_during_the_run_and_grow() -> None:
    snapshots: list[list[dict[str, Any]]] = []
    run = MeshRun(
        NodeConfig(version="5.18", seed=7),
        nodes=3,
        base_address="127.0.0.151",
        duration=1.0,
        messages=10,
        live=snapshots.append,
        live_interval=0.2,
    )
    result = trio.run(run.run)
    assert result.ok, result.problems
    assert len(snapshots) >= 3
    last = snapshots[-1]
    assert [row["index"] for row in last] == [0, 1, 2]
    assert all(COLUMNS <= set(row) for row in last)
    assert sum(row["host"] for row in last) == 1
    # Traffic counters only grow from one refresh to the next.
    first_sent = sum(row["sent"] for row in snapshots[0])
    assert sum(row["sent"] for row in last) > first_sent
    table = render_rows(last)
    assert table[0].split()[:3] == ["idx", "host", "address"]
    assert len(table) == 2 + 3 and "*" in table[2]
