"""``pianode bench``: every figure as a same-run ratio or against a fixed target.

Theory of operation
-------------------
This VM is shared and noisy (../shared/perf-limits.md §0, §6: single figures
move 10-40 %), so every rate is measured against a reference taken in the same
run, interleaved with it, and reported as the median over repeats:

1. **codec**: ``PacketCodec.encode`` (seal+encode) and ``decode`` (decode+open)
   packets/s for Pia 5.3 (AES-ECB + HMAC-MD5), 5.18 (GCM, 16-byte tag) and
   5.29 (GCM, 8-byte tag) at 64/256/1024/1400-byte payloads, and the node's
   per-packet stream calls (``PacketCodec.lone_sealer`` / ``lone_opener``), each
   divided by the AEAD library's own per-packet call on as many bytes, measured
   in the same repeat: ``AESGCM.encrypt`` / ``decrypt`` for *cryptography*,
   ``AES.new(..., MODE_GCM).encrypt_and_digest`` / ``decrypt_and_verify`` for
   *pycryptodome*; one cached ECB call plus one HMAC-MD5 for 5.3.  The
   project's own AEAD wrapper (``gcm(key).seal``, the reference before issue 21)
   is printed beside it.  Targets on seal+encode at 1024 B: ≥ 25 % of
   ``AESGCM.encrypt`` (a 1 KiB encryption costs about 0.6 µs there, less than
   the packet's Python work: header, message header, padding, nonce and copies),
   ≥ 50 % of pycryptodome's own call and of the 5.3 calls.
2. **receive**: one :class:`~pianode.mesh.node.Node` against a bare Trio
   draining receiver, twice: fed the same valid encrypted datagrams by a sender
   in another process (the sender's CPU share limits both), and draining a
   socket prefilled while neither could run (``pianode.bench.net``).  Target
   ≥ 25 % for each.
3. **formation**: wall time for 2..32 stations to form a full mesh
   (``MeshRun``).  Target: 32 stations in under 2 s.
4. **memory**: Python heap (tracemalloc) per idle node of a 32-station mesh.
   Target < 1 MiB.
5. **rtt**: median application round trip through two nodes against a bare
   Trio UDP echo in the same process.  Target: overhead < 100 µs.
6. **session**: ``MeshRun(nodes=32, rate=60)`` on 5.18 (one packet per
   station), 5.29 (group packets broadcast once per frame, as ``pianode mesh
   --rate``) and 5.29 with one unicast copy per station.  Targets: ≥ 99 % of
   frames within 50 ms, every reliable message delivered, no station dropped.
   Each run's CPU per delivered frame is divided by that of a bare-Python
   loop over the same sockets and AEAD measured just before it and again just
   after it, the mean of the two (``pianode.bench.floor``: the machine's speed
   drifts within minutes); target ≤ 2× on 5.18 unicast.

Wall time here is measured with ``time.perf_counter`` (what a benchmark is
for); the nodes themselves still read time only from Trio.  Every loop is
bounded by its budget; all traffic stays on 127.0.0.0/8.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
from protocols.crypto.aead import available_backends
from protocols.errors import ConfigError
from protocols.pia.versions import profile_for

from pianode.bench import net
from pianode.bench.codec import bench_codec
from pianode.bench.figures import (
    QUICK,
    SECTIONS,
    BenchReport,
    Budget,
    Figure,
    _loadavg,
    environment,
)
from pianode.bench.sessions import bench_formation, bench_session, parse_session_run


def run_benchmark(
    budget: Budget, sections: Sequence[str] = SECTIONS, *, progress: Callable[[str], None] | None = None
) -> BenchReport:
    """Run the chosen sections in order; a section that raises becomes an error line, not a crash."""
    report = BenchReport(environment=environment(), budget=attrs.asdict(budget))
    runners: dict[str, Callable[[Budget], list[Figure]]] = {
        "codec": bench_codec,
        "receive": net.bench_receive,
        "formation": bench_formation,
        "memory": net.bench_memory,
        "rtt": net.bench_rtt,
        "session": bench_session,
    }
    started = time.perf_counter()
    for name in sections:
        if progress is not None:
            progress(f"bench: {name} ...")
        t0 = time.perf_counter()
        try:
            figures = runners[name](budget)
        except Exception as exc:  # report and go on with the next section
            report.errors.append(f"{name}: {type(exc).__name__}: {exc}")
            continue
        report.figures.extend(figures)
        if progress is not None:
            progress(f"bench: {name} done in {time.perf_counter() - t0:.1f} s")
    if budget.profile_dir:
        try:
            report.environment["profiles"] = net.profile_hot_paths(budget, sections, progress)
        except Exception as exc:
            report.errors.append(f"profile: {type(exc).__name__}: {exc}")
    report.wall_time = time.perf_counter() - started
    report.environment["loadavg_end"] = _loadavg()
    return report


# ---------------------------------------------------------------------------- command line


def _csv(kind: Callable[[str], Any]) -> Callable[[str], tuple[Any, ...]]:
    def parse(text: str) -> tuple[Any, ...]:
        items = [x.strip() for x in text.split(",")]
        if any(items) and not all(items):  # ("" alone: the empty list, which the budget checks refuse by name)
            raise argparse.ArgumentTypeError(f"empty item in the list {text!r}")
        try:
            return tuple(kind(x) for x in items if x)
        except ValueError:
            raise argparse.ArgumentTypeError(f"bad list {text!r}") from None

    return parse


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--quick", action="store_true", help="small budgets: the whole run in about 30 s")
    p.add_argument("--sections", type=_csv(str), default=SECTIONS, help=f"comma list of sections (default all: {','.join(SECTIONS)})")
    p.add_argument("--json", metavar="FILE", help="also write every figure to FILE as JSON")
    p.add_argument("--version", default=None, help="Pia version of the node sections (default 5.18)")
    p.add_argument("--backend", choices=("cryptography", "pycryptodome"), default=None, help="only this AEAD backend (codec) and for the nodes")
    p.add_argument("--repeats", type=int, default=None, help="codec repeats (median)")
    p.add_argument("--cell-seconds", type=float, default=None, help="codec: seconds per measurement")
    p.add_argument("--sizes", type=_csv(int), default=None, help="codec payload sizes (default 64,256,1024,1400)")
    p.add_argument("--rounds", type=int, default=None, help="receive and rtt rounds (median)")
    p.add_argument("--receive-seconds", type=float, default=None, help="receive: seconds measured per round")
    p.add_argument("--datagrams", type=int, default=None, help="receive: datagrams sealed for the receive rounds (default 400000, quick 150000)")
    p.add_argument("--formation-sizes", type=_csv(int), default=None, help="formation: station counts (default 2,4,8,16,32)")
    p.add_argument("--stations", type=int, default=None, help="memory and session: station count (default 32)")
    p.add_argument("--rtt-pings", type=int, default=None, help="rtt: round trips per round")
    p.add_argument("--session-seconds", type=float, default=None, help="session: seconds of 60 Hz traffic (default 30)")
    p.add_argument("--rate", type=float, default=None, help="session: frames per second per station (default 60)")
    p.add_argument("--session-version", type=_csv(str), default=None,
                   help="session: comma list of VERSION[/unicast|/broadcast] runs (default 5.18,5.29,5.29/unicast)")
    p.add_argument("--session-processes", type=int, default=None, metavar="N",
                   help="session: processes to split the stations over (default: as pianode mesh picks)")
    p.add_argument("--scheduling", choices=("auto", "normal"), default=None,
                   help="session: the station processes' scheduling class, as pianode mesh --scheduling (default auto)")
    p.add_argument("--floor-seconds", type=float, default=None,
                   help="session: seconds of the bare-Python frame loop before each run, and again after it (default 2)")
    p.add_argument("--profile", metavar="DIR", default=None, help="also profile the receive path and the session, those of them among --sections (cProfile, DIR/*.pstats)")


def budget_from_args(args: argparse.Namespace) -> Budget:
    base = QUICK if args.quick else Budget()
    changes: dict[str, Any] = {}
    for arg, field in (
        ("version", "version"),
        ("repeats", "repeats"),
        ("cell_seconds", "cell_seconds"),
        ("sizes", "sizes"),
        ("receive_seconds", "receive_seconds"),
        ("datagrams", "receive_datagrams"),
        ("formation_sizes", "formation_sizes"),
        ("rtt_pings", "rtt_pings"),
        ("session_seconds", "session_seconds"),
        ("rate", "session_rate"),
        ("session_version", "session_runs"),
        ("floor_seconds", "floor_seconds"),
        ("session_processes", "session_processes"),
        ("scheduling", "session_scheduling"),
        ("profile", "profile_dir"),
    ):
        value = getattr(args, arg, None)
        if value is not None:
            changes[field] = value
    if args.rounds is not None:
        changes["receive_rounds"] = changes["rtt_rounds"] = args.rounds
    if args.stations is not None:
        changes["memory_stations"] = changes["session_nodes"] = args.stations
    if args.backend is not None:
        changes["backends"] = (args.backend,)
        changes["node_backend"] = args.backend
    budget = attrs.evolve(base, **changes)
    problems = []
    unknown = [s for s in args.sections if s not in SECTIONS]
    if unknown:
        problems.append(f"unknown section(s) {', '.join(unknown)}; choose from {', '.join(SECTIONS)}")
    elif budget.profile_dir is not None and not set(net.PROFILED) & set(args.sections):
        # (net.profile_hot_paths would make the folder and write nothing into it)
        problems.append(f"--profile profiles the {' and the '.join(net.PROFILED)} sections, and --sections "
                        f"{','.join(args.sections)} has neither: add one of them, or leave --profile out")  # fmt: skip
    if budget.repeats < 1 or budget.receive_rounds < 1 or budget.rtt_rounds < 1 or budget.formation_repeats < 1:
        problems.append("repeats and rounds must be at least 1")
    if budget.cell_seconds <= 0 or budget.receive_seconds <= 0 or budget.session_seconds <= 0 or budget.floor_seconds <= 0:
        problems.append("durations must be positive")
    if any(n < 2 or n > 32 for n in (*budget.formation_sizes, budget.memory_stations, budget.session_nodes)):
        problems.append("station counts must be 2..32")
    if budget.session_processes is not None and not 1 <= budget.session_processes <= budget.session_nodes:
        problems.append(f"--session-processes must be 1..{budget.session_nodes} (one station at least in each)")
    if not 100 <= budget.receive_datagrams <= 4_000_000:
        problems.append("--datagrams must be 100..4000000")
    if budget.rtt_pings < 1 or any(s < 0 or s > 4096 for s in budget.sizes):
        problems.append("--rtt-pings must be at least 1 and sizes 0..4096")
    session_runs = []
    for run in budget.session_runs:
        try:
            session_runs.append(parse_session_run(run))
        except ValueError as exc:
            problems.append(f"--session-version: {exc}")
    if not budget.session_runs:
        problems.append("--session-version: name at least one run")
    checks = [("--version", budget.version, None), *(("--session-version", v, f) for v, f in session_runs)]
    for flag, version, fanout in checks:
        try:
            profile = profile_for(version)
        except ConfigError as exc:
            # (the library's advice to allow the nearest version names a flag the benchmark does not have)
            said = str(exc).replace(" (allow the nearest version to use it anyway)", "")
            problems.append(f"{flag}: {' '.join(said.split())}")
            continue
        if not (5, 7) <= profile.version <= (5, 45) and not (6, 16) <= profile.version <= (6, 41):
            problems.append(f"{flag} {version}: the benchmarks run Pia 5.7-5.45 and 6.16-6.41")
        elif fanout == "broadcast" and profile.footer == "none":
            # The run would be unicast (run_shape), its figures reported as that of another fan-out than asked.
            problems.append(f"--session-version {version}/broadcast: broadcast needs a version with group packets "
                            f"(5.27+), not {profile.name}")
    if args.backend is not None and args.backend not in available_backends():
        problems.append(f"AEAD backend {args.backend} is not installed")
    if problems:
        raise ValueError("; ".join(problems))
    return budget


def run_from_args(args: argparse.Namespace) -> int:
    """Run the benchmark; exit status 0 when every targeted figure passed, 1 otherwise."""
    budget = budget_from_args(args)

    def progress(line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    report = run_benchmark(budget, args.sections, progress=progress)
    print(report.table())
    if args.json:
        from pianode.capture.output import output_file

        with output_file(args.json, "w") as f:  # whole or not at all
            json.dump(report.as_dict(), f, indent=2, sort_keys=True, default=str)
            f.write("\n")
    return 0 if report.ok else 1
