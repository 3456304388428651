"""Ctrl-C and SIGTERM end every command the documented way at any moment (pianode.cli.interrupt).

Ctrl-C: ``interrupted`` on stderr, exit status 130; SIGTERM where a command does not take it as the end
of its run: ``terminated``, exit status 143; both with the summary until then where the command has one,
never a traceback nor death by the signal.  Even while the program is still importing the command.
A scan or browse that SIGTERM stopped says so, not that its --timeout ran out.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loopback_addresses import free_port, loopback_block

PIANODE = [sys.executable, "-m", "pianode"]
#: The README's command: the console script the install puts beside the interpreter.
SCRIPT = [str(Path(sys.executable).parent / "pianode")]


def _popen(*argv: str, launcher: list[str] = PIANODE) -> subprocess.Popen[str]:
    return subprocess.Popen([*launcher, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _end(proc: subprocess.Popen[str], signum: int) -> tuple[str, str]:
    proc.send_signal(signum)
    try:
        return proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=5)


def _importing(proc: subprocess.Popen[str], timeout: float = 20) -> None:
    """Until *proc* is importing pianode's command line (its socket module is loaded, the command's are not)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with open(f"/proc/{proc.pid}/maps") as f:
            if "_socket." in f.read():
                return
        time.sleep(0.001)
    raise AssertionError("the process never got to its imports")


@pytest.mark.parametrize("launcher", [PIANODE, SCRIPT], ids=["python -m pianode", "pianode"])
@pytest.mark.parametrize(("signum", "line", "status"), [(signal.SIGINT, "interrupted", 130),
                                                        (signal.SIGTERM, "terminated", 143)])  # fmt: skip
def test_a_signal_while_the_command_imports(signum: int, line: str, status: int, launcher: list[str]) -> None:
    proc = _popen("mesh", "-n", "2", "--bind", loopback_block() + "2", "--duration", "30", launcher=launcher)
    _importing(proc)
    out, err = _end(proc, signum)
    assert (err, proc.returncode) == (f"{line}\n", status)


#: A weakref callback that spins until stopped, as the import machinery runs some: CPython drops an
#: exception raised inside one, so a KeyboardInterrupt there is lost and the program runs on.
_LOST_STOP = """
import sys, time, weakref
from pianode.cli import interrupt
interrupt.install_early()
class Thing: pass
def spin(_):
    print("spinning", flush=True)
    end = time.monotonic() + 10
    while time.monotonic() < end:
        pass
thing = Thing()
ref = weakref.ref(thing, spin)
del thing
print("ran on", flush=True)
"""


@pytest.mark.parametrize(("signum", "line", "status"), [(signal.SIGINT, "interrupted", 130),
                                                        (signal.SIGTERM, "terminated", 143)])  # fmt: skip
def test_a_stop_before_the_command_starts_cannot_be_lost(signum: int, line: str, status: int) -> None:
    proc = subprocess.Popen([sys.executable, "-c", _LOST_STOP], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "spinning\n"
    out, err = _end(proc, signum)
    assert (out, err, proc.returncode) == ("", f"{line}\n", status)


def test_sigterm_on_mesh_prints_the_summary_until_then_and_terminated() -> None:
    proc = _popen("mesh", "-n", "2", "--bind", loopback_block() + "2", "--duration", "30", "--format", "jsonl")
    time.sleep(2.0)  # formed and exchanging by then
    out, err = _end(proc, signal.SIGTERM)
    assert (err, proc.returncode) == ("terminated\n", 143)
    summary = json.loads(out.splitlines()[-1])
    assert summary["ok"] is False and summary["problems"][-1] == "terminated (SIGTERM): the figures are those until then"


@pytest.mark.parametrize("argv", [("ldn", "scan", "--discovery-port", "{port}", "--timeout", "60"),
                                  ("lan", "browse", "--game-key", "0123456789abcdef", "--broadcast",
                                   "127.255.255.255:{port}", "--timeout", "60")], ids=["ldn scan", "lan browse"])  # fmt: skip
def test_a_scan_stopped_by_sigterm_says_so(argv: tuple[str, ...]) -> None:
    proc = _popen(*(a.format(port=free_port()) for a in argv))
    time.sleep(2.0)
    out, err = _end(proc, signal.SIGTERM)
    assert proc.returncode == 1 and "Traceback" not in err
    assert len(err.splitlines()) == 1 and "before SIGTERM stopped it after " in err and "within 60 s" not in err


@pytest.mark.parametrize(
    ("signum", "word", "status", "processes"),
    [(signal.SIGINT, "interrupted", 130, 1), (signal.SIGINT, "interrupted", 130, 2), (signal.SIGTERM, "terminated", 143, 2)],
)
def test_a_real_time_run_ends_at_once_with_the_figures_until_then(
    signum: int, word: str, status: int, processes: int
) -> None:
    # In the middle of the frame clock: the summary counts what the stations sent and received until then
    # (one process: its receivers; split: each worker ends its clock on the coordinator's word and sends
    # what it has), and nobody waits for the rest of --duration.
    proc = _popen("mesh", "-n", "6", "--rate", "30", "--duration", "60", "--processes", str(processes), "--bind",
                  loopback_block() + "2", "--format", "jsonl")  # fmt: skip
    time.sleep(4)  # formed (a 6-station mesh forms in well under a second) and well into the session
    assert proc.poll() is None, proc.communicate()
    sent = time.monotonic()
    out, err = _end(proc, signum)
    took = time.monotonic() - sent
    assert err.strip().splitlines()[-1] == word and proc.returncode == status, err
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["processes"] == processes and summary["result"] == "FAILED"
    frames = summary["frames"]
    assert frames["expected"] > 0 and frames["delivered"] > 0, frames
    assert summary["reliable"]["delivered"] > 0 and len(summary["stations"]) == 6, summary["reliable"]
    assert took < 8, f"{took:.1f} s after the signal"
