"""Sections of whole meshes in one process: formation time and the real-time session (MeshRun)."""

from __future__ import annotations

import statistics
import time
from typing import Any

from pianode.bench.figures import Budget, Figure, at_least, below


def bench_formation(budget: Budget) -> list[Figure]:
    import trio

    from pianode.mesh.config import NodeConfig
    from pianode.sim.mesh_run import MeshRun

    figures = []
    for n in budget.formation_sizes:
        times: list[float] = []
        problems: list[str] = []
        for r in range(budget.formation_repeats):
            config = NodeConfig(version=budget.version, aead_backend=budget.node_backend, seed=1 + r)
            run = MeshRun(config, nodes=n, duration=0.0, messages=0)
            result = trio.run(run.run)
            if result.formation_time is None:
                problems.extend(result.problems or ["did not form"])
            else:
                times.append(result.formation_time)
        value = statistics.median(times) if times else None
        targeted = n == 32
        figures.append(
            Figure(
                "formation",
                f"{n} stations form a mesh (Pia {budget.version})",
                value,
                "s",
                "< 2 s" if targeted else "",
                below(value, 2.0) if targeted else None,
                f"{len(times)}/{budget.formation_repeats} formed" + (f"; {problems[0]}" if problems else ""),
                {"times": times, "problems": problems},
            )
        )
    return figures


def session_run(budget: Budget, seconds: float) -> Any:
    """The real-time session of the bench (a :class:`pianode.sim.mesh_run.MeshRun`), *seconds* long;
    ``--profile`` runs the same one."""
    from pianode.mesh.config import NodeConfig
    from pianode.sim.mesh_run import MeshRun

    config = NodeConfig(version=budget.session_version, aead_backend=budget.node_backend, seed=7)
    fanout = "broadcast" if config.profile.footer != "none" else "unicast"
    return MeshRun(
        config,
        nodes=budget.session_nodes,
        rate=budget.session_rate,
        duration=seconds,
        group_fanout=fanout,
        freeze_gc=True,
    )


def bench_session(budget: Budget) -> list[Figure]:
    import trio

    run = session_run(budget, budget.session_seconds)
    started = time.perf_counter()
    result = trio.run(run.run)
    wall = time.perf_counter() - started
    s = result.summary()
    frames = s.get("frames") or {}
    on_time = frames.get("within_threshold_pct") if frames else None
    rel = s["reliable"]
    kept = len(s["stations"])
    # MeshRun's fixed overheads: forming the mesh and a 0.2 s settling sleep at the end.
    formed = result.formation_time
    pace = (wall - formed - 0.2) / budget.session_seconds if formed is not None else None
    name = f"{budget.session_nodes} × {budget.session_rate:g} Hz for {budget.session_seconds:g} s (Pia {budget.session_version})"
    detail = {"summary": {k: v for k, v in s.items() if k != "stations"}, "wall_time": wall}
    note = ""
    if frames:
        note = (
            f"p50 {frames['p50_ms']:.1f} ms, p99 {frames['p99_ms']:.1f} ms, max {frames['max_ms']:.1f} ms;"
            f" {frames['delivered']}/{frames['expected']} delivered; wall {wall:.1f} s"
        )
        if frames.get("cpu_load_pct") is not None:
            note += f"; process CPU {frames['cpu_load_pct']:.0f}% of one core"
        if frames.get("late_by_second"):
            note += f"; late frames in {len(frames['late_by_second'])} second(s) of {budget.session_seconds:g}"
    elif result.problems:
        note = result.problems[0]
    return [
        Figure("session", f"{name}: frames within 50 ms", on_time, "%", "≥ 99 %", at_least(on_time, 99.0), note, detail),
        Figure(
            "session",
            f"{name}: reliable messages delivered",
            100.0 * rel["delivered"] / rel["expected"] if rel["expected"] else None,
            "%",
            "100 %",
            bool(rel["expected"]) and rel["delivered"] == rel["expected"] and not rel["duplicates"],
            f"{rel['delivered']}/{rel['expected']}, {rel['duplicates']} duplicates, {rel['out_of_order']} out of order",
        ),
        Figure(
            "session",
            f"{name}: stations still in the mesh",
            float(kept),
            "",
            f"{budget.session_nodes}",
            kept == budget.session_nodes and result.formation_time is not None,
            "; ".join(result.problems[:2]),
        ),
        Figure(
            "session",
            f"{name}: kept real time (wall ÷ session time)",
            pace,
            "×",
            "≤ 1.10",
            pace is not None and pace <= 1.10,
            "frames are stamped with their scheduled time, so a session that falls behind shows in the"
            " latency figure too",
            {"wall_time": wall, "formation_time": result.formation_time},
        ),
    ]


# ---------------------------------------------------------------------------- driver
