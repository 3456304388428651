"""Sections of whole meshes: formation time (in one process, MeshRun), and the real-time sessions as
``pianode mesh --rate`` runs them (over its processes, in its scheduling class), with their CPU per delivered
frame against the bare-Python loop of :mod:`pianode.bench.floor`."""

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


def parse_session_run(text: str) -> tuple[str, str | None]:
    """``"5.29/unicast"`` → ``("5.29", "unicast")``; ``"5.18"`` → ``("5.18", None)`` (the version's default)."""
    version, _, fanout = text.partition("/")
    if fanout not in ("", "unicast", "broadcast"):
        raise ValueError(f"session run {text!r}: the fan-out after / is unicast or broadcast")
    return version, fanout or None


def session_processes(budget: Budget) -> int:
    """How many processes the bench's real-time sessions run in: the budget's, or what ``pianode mesh`` picks."""
    from pianode.sim.mesh_procs import default_processes

    if budget.session_processes is not None:
        return budget.session_processes
    return default_processes(budget.session_nodes, budget.session_rate)


def session_run(budget: Budget, seconds: float, run: str | None = None, *, split: bool = True) -> Any:
    """The real-time session of the bench, *seconds* long, of *run* (``VERSION[/FANOUT]``, default the
    budget's first): as ``pianode mesh --rate`` runs it, over :func:`session_processes` processes
    (:class:`pianode.sim.mesh_procs.ProcessMeshRun`) or in this one (:class:`pianode.sim.mesh_run.MeshRun`,
    and always so with ``split=False``: ``--profile`` runs the same session where cProfile sees it)."""
    from pianode.mesh.config import NodeConfig
    from pianode.sim.mesh_run import MeshRun

    version, fanout = run_shape(run or budget.session_runs[0])
    config = NodeConfig(version=version, aead_backend=budget.node_backend, seed=7)
    shared = dict(nodes=budget.session_nodes, rate=budget.session_rate, duration=seconds, group_fanout=fanout,
                  freeze_gc=True, scheduling=budget.session_scheduling)  # fmt: skip
    processes = session_processes(budget) if split else 1
    if processes > 1:
        from pianode.sim.mesh_procs import ProcessMeshRun

        return ProcessMeshRun(config, processes=processes, **shared)
    return MeshRun(config, **shared)


def run_shape(run: str) -> tuple[str, str]:
    """(version, fan-out) of a session run: a version with a footer broadcasts its group packets unless told
    otherwise (as ``pianode mesh --rate``); one without sends one packet per station (spec §1.6)."""
    from protocols.pia.versions import profile_for

    version, fanout = parse_session_run(run)
    if profile_for(version).footer == "none":
        if fanout == "broadcast":  # (never measured as unicast and reported as the broadcast asked for)
            raise ValueError(f"session run {run!r}: broadcast needs a version with group packets (5.27+)")
        return version, "unicast"
    return version, fanout or "broadcast"


def bench_session(budget: Budget) -> list[Figure]:
    """Each real-time session run, with its CPU per delivered frame against the bare-Python floor measured
    just before and just after it (:func:`pianode.bench.floor.bare_frame_floor`, unicast, the same sockets
    and AEAD)."""
    import trio

    figures: list[Figure] = []
    for spec in budget.session_runs:
        run = session_run(budget, budget.session_seconds, spec)
        # The floor over the same processes as the session (a frame between them crosses cores in both),
        # and, for a split session, in one process too (reported beside it).  Measured just before the
        # session and again just after it: this machine's speed drifts by ±10-20 % within minutes
        # (the same code, measured minutes apart), so one measurement on one side of a 30 s session
        # can be off by that much; the mean of the two brackets the session.
        processes = getattr(run, "processes", 1)
        before = _floors(budget, processes)
        started = time.perf_counter()
        result = trio.run(run.run)
        wall = time.perf_counter() - started
        after = _floors(budget, processes)
        floor = _bracket(before, after)
        figures.extend(_session_figures(budget, run_shape(spec), result, wall, floor, processes))
    return figures


def _floors(budget: Budget, processes: int) -> dict[str, Any]:
    """The bare loop's figures over *processes* (and, when split, in one process too, as ``one_process``)."""
    from pianode.bench.floor import bare_frame_floor

    floor = bare_frame_floor(budget.session_nodes, budget.node_backend, budget.floor_seconds, rate=budget.session_rate,
                             processes=processes)  # fmt: skip
    if processes > 1:
        floor["one_process"] = bare_frame_floor(budget.session_nodes, budget.node_backend, budget.floor_seconds,
                                                rate=budget.session_rate)  # fmt: skip
    return floor


def _bracket(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    """The floor of a session from the measurements before and after it: each per-frame figure their mean,
    frames their sum; the two measurements kept (``before``, ``after``) for the report."""
    floor = dict(before)
    for key in ("cpu_us_per_frame", "socket_us_per_frame"):
        floor[key] = (before[key] + after[key]) / 2
    floor["frames"] = before["frames"] + after["frames"]
    floor["before"], floor["after"] = before["cpu_us_per_frame"], after["cpu_us_per_frame"]
    if "one_process" in before:
        floor["one_process"] = _bracket(before["one_process"], after["one_process"])
    return floor


def _session_figures(
    budget: Budget, shape: tuple[str, str], result: Any, wall: float, floor: dict[str, Any], processes: int
) -> list[Figure]:
    s = result.summary()
    frames = s.get("frames") or {}
    on_time = frames.get("within_threshold_pct") if frames else None
    rel = s["reliable"]
    kept = len(s["stations"])
    # The frame clock's own pace (MeshRunResult.clock_pace): the run's wall time also holds forming the mesh,
    # a split run's process start and warm-up, and the settling at the end, none of them the session's.
    pace = result.clock_pace
    version, fanout = shape
    split = f", {processes} processes" if processes > 1 else ""
    name = (f"{budget.session_nodes} × {budget.session_rate:g} Hz for {budget.session_seconds:g} s"
            f" (Pia {version}, {fanout}{split})")  # fmt: skip
    detail = {"summary": {k: v for k, v in s.items() if k != "stations"}, "wall_time": wall}
    note = ""
    if frames:
        note = (
            f"p50 {frames['p50_ms']:.1f} ms, p99 {frames['p99_ms']:.1f} ms, max {frames['max_ms']:.1f} ms;"
            f" {frames['delivered']}/{frames['expected']} delivered; wall {wall:.1f} s"
        )
        if frames.get("cpu_load_pct") is not None:
            whose = f"the {processes} processes' CPU together" if processes > 1 else "process CPU"
            note += f"; {whose} {frames['cpu_load_pct']:.0f}% of one core"
        if frames.get("scheduling"):
            from pianode.sim.scheduling import describe

            note += f"; {describe(frames['scheduling'])}"
        if frames.get("late_by_second"):
            note += f"; late frames in {len(frames['late_by_second'])} second(s) of {budget.session_seconds:g}"
    elif result.problems:
        note = result.problems[0]
    figures = [
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
            f"{name}: kept real time (frame clock's wall time ÷ its schedule)",
            pace,
            "×",
            "≤ 1.10",
            pace is not None and pace <= 1.10,
            "frames are stamped with their scheduled time, so a session that falls behind shows in the"
            " latency figure too",
            {"wall_time": wall, "formation_time": result.formation_time},
        ),
    ]
    # CPU per delivered frame: the session's process CPU while its frames were sent (MeshRunResult.cpu_time)
    # over the frames delivered, everything the nodes do included (acks, reliable messages, keep-alives),
    # against the floor's measured the same way.  A run that falls behind delivers part of its frames after
    # that phase, so its figure reads low: its latency figure fails then anyway.
    cpu_time, delivered = result.cpu_time, frames.get("delivered")
    node_us = 1e6 * cpu_time / delivered if cpu_time is not None and delivered else None
    floor_us = floor["cpu_us_per_frame"]
    ratio = node_us / floor_us if node_us is not None and floor_us else None
    # Issue 21 sets the target on 5.18 unicast (one packet per station, the heaviest path); the rest is reported.
    targeted = version == "5.18" and fanout == "unicast"
    figures.append(
        Figure(
            "session",
            f"{name}: CPU per delivered frame vs a bare-Python loop",
            ratio,
            "×",
            "≤ 2.00" if targeted else "",
            (ratio is not None and ratio <= 2.0) if targeted else None,
            (f"node {node_us:.1f} µs" if node_us is not None else "node n/a")
            + f" vs bare loop {floor_us:.1f} µs ({floor['backend']}, unicast, {_pace(floor)}, {_split_as(floor)}, same run:"
            f" {_bracketed(floor)};"
            f" of which sockets {floor['socket_us_per_frame']:.1f} µs){_one_process(floor, node_us)}",
            {"node_us": node_us, "floor": floor},
        )
    )
    return figures


# ---------------------------------------------------------------------------- driver


def _bracketed(floor: dict[str, Any]) -> str:
    """When the bare loop was measured: just before the session and just after it, each figure."""
    if "before" not in floor:
        return "measured once"
    return f"the mean of {floor['before']:.1f} µs just before the session and {floor['after']:.1f} µs just after"


def _split_as(floor: dict[str, Any]) -> str:
    """Over how many processes the bare loop ran (as the session)."""
    n = floor.get("processes", 1)
    return f"over {n} processes as the session" if n > 1 else "one process"


def _one_process(floor: dict[str, Any], node_us: float | None) -> str:
    """For a split session: the bare loop in one process, and the node against it."""
    one = floor.get("one_process")
    if one is None:
        return ""
    ratio = f", node {node_us / one['cpu_us_per_frame']:.2f} × that" if node_us is not None and one["cpu_us_per_frame"] else ""
    return f"; in one process the bare loop is {one['cpu_us_per_frame']:.1f} µs{ratio}"


def _pace(floor: dict[str, Any]) -> str:
    """How the bare loop ran: at the session's rate, or flat out."""
    return f"at {floor['rate']:g} Hz as the session" if floor.get("rate") else "flat out"
