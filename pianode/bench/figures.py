"""What every benchmark section reports: figures with their targets, budgets, the report and the environment."""

from __future__ import annotations

import os
import platform
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs
from protocols.crypto.aead import available_backends

SECTIONS = ("codec", "receive", "formation", "memory", "rtt", "session")
CODEC_VERSIONS = ("5.3", "5.18", "5.29")
SIZES = (64, 256, 1024, 1400)
TARGET_SIZE = 1024  # the codec target applies at this payload size (issue 6 acceptance)
KEY = bytes.fromhex("9f1bba38de3b1df42ab5b29e7844d207")
SOURCE_IP = "127.0.0.2"
_BATCH = 64  # distinct packets/nonces cycled through by each codec measurement


@attrs.frozen
class Budget:
    """How much time each section may spend.  :data:`QUICK` is the ~30 s run."""

    repeats: int = 7
    cell_seconds: float = 0.1
    sizes: tuple[int, ...] = SIZES
    codec_versions: tuple[str, ...] = CODEC_VERSIONS
    backends: tuple[str, ...] = ()  # () = every installed backend
    version: str = "5.18"  # Pia version of the node sections
    node_backend: str | None = None
    receive_rounds: int = 5
    receive_seconds: float = 1.0
    receive_payload: int = 64
    receive_datagrams: int = 400_000  # sealed once each (a repeated nonce is a replay), split between rounds
    formation_sizes: tuple[int, ...] = (2, 4, 8, 16, 32)
    formation_repeats: int = 3
    memory_stations: int = 32
    memory_idle: float = 1.0
    rtt_rounds: int = 5
    rtt_pings: int = 1000
    session_nodes: int = 32
    #: The real-time sessions, ``VERSION[/FANOUT]``: 5.18 (one packet per station, every version before 5.27
    #: behaves so), 5.29 as ``pianode mesh --rate`` runs it (group packets broadcast once per frame, spec §1.6),
    #: and 5.29 with one unicast copy per station.
    session_runs: tuple[str, ...] = ("5.18", "5.29", "5.29/unicast")
    #: Processes the real-time sessions run in; None: as many as ``pianode mesh`` picks for them
    #: (:func:`pianode.sim.mesh_procs.default_processes`), so the figures are those of the command users run.
    session_processes: int | None = None
    #: The scheduling class the sessions' station processes ask for, as ``pianode mesh --scheduling``.
    session_scheduling: str = "auto"
    #: Seconds of the bare-Python frame loop measured before each session, and again after it (pianode.bench.floor).
    floor_seconds: float = 2.0
    session_rate: float = 60.0
    session_seconds: float = 30.0
    profile_dir: str | None = None
    profile_session_seconds: float = 5.0


QUICK = Budget(
    repeats=3,
    cell_seconds=0.02,
    receive_rounds=3,
    receive_seconds=0.4,
    receive_datagrams=150_000,
    formation_repeats=1,
    memory_idle=0.5,
    rtt_rounds=3,
    rtt_pings=300,
    session_seconds=3.0,
    floor_seconds=0.5,
    profile_session_seconds=3.0,
)


@attrs.frozen
class Figure:
    """One measured figure; ``passed`` is None when it has no target."""

    section: str
    name: str
    value: float | None
    unit: str
    target: str = ""
    passed: bool | None = None
    note: str = ""
    detail: dict[str, Any] = attrs.field(factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self)


def at_least(value: float | None, threshold: float) -> bool:
    return value is not None and value >= threshold


def below(value: float | None, threshold: float) -> bool:
    return value is not None and value < threshold


@attrs.define
class BenchReport:
    figures: list[Figure] = attrs.field(factory=list)
    environment: dict[str, Any] = attrs.field(factory=dict)
    budget: dict[str, Any] = attrs.field(factory=dict)
    errors: list[str] = attrs.field(factory=list)
    wall_time: float = 0.0

    @property
    def failed(self) -> list[Figure]:
        return [f for f in self.figures if f.passed is False]

    @property
    def ok(self) -> bool:
        return not self.failed and not self.errors

    def as_dict(self) -> dict[str, Any]:
        return {
            "environment": self.environment,
            "budget": self.budget,
            "figures": [f.as_dict() for f in self.figures],
            "errors": self.errors,
            "summary": {
                "passed": sum(1 for f in self.figures if f.passed),
                "failed": len(self.failed),
                "informational": sum(1 for f in self.figures if f.passed is None),
                "ok": self.ok,
            },
            "wall_time": self.wall_time,
        }

    def table(self) -> str:
        rows = [("section", "measurement", "value", "target", "verdict", "note")]
        for f in self.figures:
            verdict = "-" if f.passed is None else ("PASS" if f.passed else "FAIL")
            rows.append((f.section, f.name, _fmt(f.value, f.unit), f.target or "-", verdict, f.note))
        widths = [max(len(r[i]) for r in rows) for i in range(5)]
        lines = []
        for k, r in enumerate(rows):
            lines.append("  ".join(r[i].ljust(widths[i]) for i in range(5)) + ("  " + r[5] if r[5] else ""))
            if k == 0:
                lines.append("  ".join("-" * w for w in widths))
        env = self.environment
        lines.append("")
        lines.append(
            f"load average {env.get('loadavg_start')} -> {env.get('loadavg_end')} on {env.get('cpus')} CPUs;"
            f" {len(self.figures)} figures, {len(self.failed)} FAIL, wall {self.wall_time:.1f} s"
        )
        for e in self.errors:
            lines.append(f"ERROR: {e}")
        return "\n".join(lines)


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "%":
        return f"{value:.1f} %"
    if unit == "/s":
        return _rate(value)
    if unit == "s":
        return f"{value:.3f} s"
    if unit == "µs":
        return f"{value:.1f} µs"
    if unit == "ms":
        return f"{value:.2f} ms"
    if unit == "×":
        return f"{value:.2f} ×"
    if unit == "KiB":
        return f"{value:.0f} KiB"
    return f"{value:g} {unit}".strip()


def _rate(value: float) -> str:
    if value >= 1e6:
        return f"{value / 1e6:.2f}M/s"
    if value >= 1e3:
        return f"{value / 1e3:.1f}k/s"
    return f"{value:.0f}/s"


# ---------------------------------------------------------------------------- codec


def _timed(call: Callable[[Any], object], items: Sequence[Any], seconds: float) -> float:
    """Calls per second of ``call(item)`` cycling over *items*, for about *seconds*."""
    n = 0
    k = len(items)
    start = time.perf_counter()
    deadline = start + seconds
    while True:
        for item in items:
            call(item)
        n += k
        now = time.perf_counter()
        if now >= deadline:
            return n / (now - start)


def environment() -> dict[str, Any]:
    import trio

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "trio": trio.__version__,
        "cpus": os.cpu_count(),
        "backends": available_backends(),
        "loadavg_start": _loadavg(),
        "machine": platform.machine(),
    }
    try:
        import Crypto

        env["pycryptodome"] = Crypto.__version__
    except ImportError:  # pragma: no cover - a runtime dependency
        pass
    try:
        import cryptography

        env["cryptography"] = cryptography.__version__
    except ImportError:
        pass
    return env


def _loadavg() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:  # pragma: no cover - not on Linux
        return "?"
