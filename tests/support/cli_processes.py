"""CLI processes for the tests that run ``pianode`` as separate programs: output collected, stopped by SIGTERM.

Theory of operation: :class:`CliProcess` runs one command under Trio with its
stdout and stderr piped; stdout is split into lines as it arrives (the
commands print one JSON record a line with ``--format jsonl``), so a test can
poll :meth:`CliProcess.records` while the process is still running.
:func:`run_mesh` is the order every multi-process mesh test follows: the host
first (until it prints), then the joiners; once each process has had enough,
SIGTERM the joiners and then the host (the command prints its summary, leaves
the mesh and exits).  Every wait here is unbounded on its own: callers put
them under ``trio.fail_after``.  :func:`kill_leftovers` is the ``finally`` of
the tests that run commands with blocking ``subprocess.Popen`` instead.
"""

from __future__ import annotations

import functools
import json
import pathlib
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from typing import Any

import trio


def pianode(*argv: str, timeout: float = 90, cwd: pathlib.Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m pianode ARGV`` to its end, output collected as text."""
    return subprocess.run(
        [sys.executable, "-m", "pianode", *argv], capture_output=True, text=True, timeout=timeout, cwd=cwd
    )


def summary(out: subprocess.CompletedProcess[str]) -> dict[str, Any]:
    """The one JSON line a ``--format jsonl`` run prints."""
    lines = [line for line in out.stdout.splitlines() if line.strip()]
    assert len(lines) == 1, out.stdout
    return json.loads(lines[0])


class CliProcess:
    """A CLI process whose output lines are collected as they come, so a test can wait on them."""

    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.lines: list[str] = []
        self.stderr = b""
        self.returncode: int | None = None
        self._process: trio.Process | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            start = functools.partial(trio.run_process, self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      check=False)  # fmt: skip
            process: trio.Process = await nursery.start(start)
            self._process = process
            task_status.started()
            assert process.stdout is not None and process.stderr is not None
            nursery.start_soon(self._read_stderr, process.stderr)
            pending = b""
            async for chunk in process.stdout:
                *done, pending = (pending + chunk).split(b"\n")
                self.lines.extend(line.decode() for line in done)
        self.returncode = process.returncode

    async def _read_stderr(self, stream: trio.abc.ReceiveStream) -> None:
        async for chunk in stream:
            self.stderr += chunk

    def stop(self) -> None:
        """SIGTERM: the command prints its summary, leaves the mesh and exits.

        (Under ``ip netns exec`` too: it execs the command, so the signal reaches pianode.)
        """
        assert self._process is not None
        if self._process.returncode is None:
            self._process.send_signal(signal.SIGTERM)

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines]

    def received_from(self) -> Counter[int]:
        """How many data records arrived from each source station index."""
        return Counter(r["source_index"] for r in self.records() if r["event"] == "data")


async def until(predicate: Callable[[], bool]) -> None:
    """Poll *predicate* every 50 ms until it holds (bound it with the caller's fail_after)."""
    while not predicate():
        await trio.sleep(0.05)


async def run_mesh(host: CliProcess, joiners: list[CliProcess], enough: Callable[[CliProcess], bool]) -> None:
    """Host first (until it prints), then the joiners; once every process has had *enough*, SIGTERM
    the joiners, then the host, and wait for all of them.  Bounded by the caller's fail_after."""
    async with trio.open_nursery() as nursery:
        await nursery.start(host.run)
        await until(lambda: bool(host.lines))
        for j in joiners:
            await nursery.start(j.run)
        await until(lambda: all(enough(p) or p.returncode is not None for p in (host, *joiners)))
        for j in joiners:
            j.stop()
        await until(lambda: all(j.returncode is not None for j in joiners))
        host.stop()


def kill_leftovers(procs: Iterable[subprocess.Popen[str]], timeout: float = 5.0) -> None:
    """Kill and reap every process in *procs* still running (a test's cleanup after a failure)."""
    for p in procs:
        if p.poll() is None:
            p.kill()
            p.communicate(timeout=timeout)
