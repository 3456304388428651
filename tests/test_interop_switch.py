"""A peer that cannot run is a loud skip on a developer's machine and a failure where interop must be proven."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

SUPPORT = pathlib.Path(__file__).resolve().parent / "support"
PROBE = """
import sys
sys.path.insert(0, {support!r})
from peers import peer_unavailable

def test_needs_a_peer():
    peer_unavailable("INTEROP NOT RUN: the peer could not be installed")
"""


def _run(tmp_path: pathlib.Path, **env: str) -> subprocess.CompletedProcess[str]:
    probe = tmp_path / "test_probe.py"
    probe.write_text(PROBE.format(support=str(SUPPORT)))
    clean = {k: v for k, v in os.environ.items() if k not in ("CI", "PIANODE_REQUIRE_INTEROP")}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", str(probe)],
        capture_output=True, text=True, timeout=60, cwd=tmp_path, env={**clean, **env},
    )


def test_a_missing_peer_is_a_loud_skip_on_a_developers_machine(tmp_path: pathlib.Path) -> None:
    done = _run(tmp_path)
    assert done.returncode == 0 and "1 skipped" in done.stdout and "INTEROP NOT RUN" in done.stdout


def test_a_missing_peer_fails_the_run_where_interop_is_required(tmp_path: pathlib.Path) -> None:
    for env in ({"PIANODE_REQUIRE_INTEROP": "1"}, {"CI": "true"}):
        done = _run(tmp_path, **env)
        assert done.returncode == 1 and "1 failed" in done.stdout and "INTEROP NOT RUN" in done.stdout, env


def test_ci_requires_interop() -> None:
    ci = (pathlib.Path(__file__).resolve().parents[1] / ".ci" / "run").read_text()
    assert "export PIANODE_REQUIRE_INTEROP=1" in ci
