"""CPU per delivered frame of a real-time `pianode mesh` session against a bare-Python floor, in one run.

    .venv/bin/python scripts/mesh_cpu_floor.py [--nodes 32 | --nodes 8,16,32] [--rate 60] [--seconds 5] [--rounds 3]
        [--version 5.18] [--backend cryptography] [--processes 1]

Rounds alternate: the floor, then the node's session, again and again, so that
load from other processes on the machine falls on both alike.

* The floor is :func:`pianode.bench.floor.bare_frame_floor`, the bench's: a plain loop with no Trio and no
  Pia state (split over as many processes as the node's, ``--processes``), one non-blocking socket per station, every round each station seals one frame per peer with the
  backend's cheapest AEAD call and sends it, then every socket is drained and each packet opened; its rounds
  run at the session's rate, as the session's ticks do.  CPU time over delivered frames.
* The node: :class:`pianode.sim.mesh_run.MeshRun` (or ProcessMeshRun) with
  the same stations, rate and duration; CPU time of all its processes over the
  frames delivered while they were sent.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

import trio

from pianode.bench.floor import bare_frame_floor
from pianode.mesh.config import NodeConfig
from pianode.sim.mesh_run import MeshRun


def floor(nodes: int, rate: float, seconds: float, backend: str, base: str, processes: int = 1) -> float:
    """CPU µs per delivered frame of the bare loop, paced at *rate* as the session, over as many processes
    (pianode.bench.floor)."""
    return bare_frame_floor(nodes, backend, seconds, rate=rate, first_address=base, processes=processes)["cpu_us_per_frame"]


class _MeasuredRun(MeshRun):
    """A MeshRun that measures its CPU time from the frame clock's start (after the warm-up, which sets each
    stream's fast path up once and sends no frame) until every frame has arrived (a process that falls
    behind is still working after the last frame was sent)."""

    cpu = 0.0
    _cpu_start = 0.0

    async def _frame_clock(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        self._cpu_start = time.process_time()
        await super()._frame_clock(*args, **kwargs)

    async def _realtime(self, nodes):  # type: ignore[no-untyped-def]
        await super()._realtime(nodes)
        with trio.move_on_after(60):
            while sum(r.frames for r in self.receivers.values()) < self.result.frames_expected:
                await trio.sleep(0.01)
        self.cpu = time.process_time() - self._cpu_start


def node(nodes: int, rate: float, seconds: float, version: str, backend: str, processes: int, base: str) -> tuple[float, dict]:
    config = NodeConfig(version=version, aead_backend=backend, seed=11)
    kw = dict(nodes=nodes, base_address=base, rate=rate, duration=seconds, freeze_gc=True, group_fanout="unicast")
    if processes > 1:
        # CPU of the workers: their load over the frame clock (an underestimate when they fall behind)
        from pianode.sim.mesh_procs import ProcessMeshRun

        result = trio.run(ProcessMeshRun(config, processes=processes, **kw).run)
        assert result.cpu_load is not None
        cpu = result.cpu_load * (seconds + 0.05)
    else:
        run = _MeasuredRun(config, **kw)
        result = trio.run(run.run)
        cpu = run.cpu
    return cpu / max(1, result.frames_delivered) * 1e6, result.summary()["frames"]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", default="32",
                   help="stations; several (8,16,32) also fit each side's cost as a fixed part per station and"
                        " tick plus a part per frame, by least squares over the medians")
    p.add_argument("--rate", type=float, default=60)
    p.add_argument("--seconds", type=float, default=5)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--version", default="5.18")
    p.add_argument("--backend", default="cryptography")
    p.add_argument("--processes", type=int, default=1)
    p.add_argument("--base", default="127.0.60.1")
    p.add_argument("--label", default="", help="printed before each line (which tree ran)")
    a = p.parse_args()
    medians = []
    for stations in [int(x) for x in str(a.nodes).split(",")]:
        floors, nodes_us = [], []
        for k in range(a.rounds):
            f = floor(stations, a.rate, a.seconds, a.backend, a.base, a.processes)
            n, frames = node(stations, a.rate, a.seconds, a.version, a.backend, a.processes, a.base)
            floors.append(f)
            nodes_us.append(n)
            print(f"{a.label}{stations} stations, round {k}: floor {f:.2f} µs/frame, node {n:.2f} µs/frame ({n / f:.2f}x);"
                  f" node frames {frames['within_threshold_pct']:.2f}% within 50 ms, p50 {frames['p50_ms']:.1f} ms, "
                  f"p99 {frames['p99_ms']:.1f} ms, CPU {frames['cpu_load_pct']:.0f}%", flush=True)
        f, n = statistics.median(floors), statistics.median(nodes_us)
        medians.append((stations, f, n))
        print(f"{a.label}{stations} stations, median: floor {f:.2f} µs/frame, node {n:.2f} µs/frame, ratio {n / f:.2f}x "
              f"(load average {os.getloadavg()[0]:.2f})", flush=True)
    if len(medians) >= 2:
        for side, col in (("floor", 1), ("node", 2)):
            per_tick, per_frame = _split_costs([(m[0], m[col]) for m in medians])
            print(f"{a.label}{side}: {per_tick:.1f} µs per station and tick + {per_frame:.2f} µs per frame")
    return 0


def _split_costs(points: list[tuple[int, float]]) -> tuple[float, float]:
    """Least squares of CPU per tick = a * stations + b * frames (frames = stations * (stations - 1))
    over (stations, µs per frame) medians: what a tick costs per station, and what each frame adds."""
    rows = [(s, s * (s - 1), us * s * (s - 1)) for s, us in points]
    sxx = sum(x * x for x, _, _ in rows)
    sxy = sum(x * y for x, y, _ in rows)
    syy = sum(y * y for _, y, _ in rows)
    sxz = sum(x * z for x, _, z in rows)
    syz = sum(y * z for _, y, z in rows)
    det = sxx * syy - sxy * sxy
    return (sxz * syy - syz * sxy) / det, (syz * sxx - sxz * sxy) / det


if __name__ == "__main__":
    sys.exit(main())
