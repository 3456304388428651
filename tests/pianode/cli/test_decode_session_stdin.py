"""``pianode decode CAPTURE --session -``: the session file from standard input.

It said "cannot read session file -: No such file or directory", as though ``-`` were
a file's name, where every other input of the command takes ``-`` for standard input.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SESSION = json.dumps({"version": "5.3", "hmac_key": "PokemonSIO"})


def _decode(*args: str, stdin: str | None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pianode", "decode", *args], input=stdin, capture_output=True,
                          text=True, timeout=60, check=False)


def test_session_settings_come_from_standard_input(captures: Path) -> None:
    frames = str(captures / "mgba-uds-frames.jsonl")
    piped = _decode(frames, "--session", "-", "--format", "jsonl", stdin=SESSION)
    assert piped.returncode == 0, piped.stderr
    rows = [json.loads(line) for line in piped.stdout.splitlines()]
    assert sum(1 for r in rows if r.get("kind") == "pia" and r.get("authenticated") is True) == 17
    flags = _decode(frames, "--version", "5.3", "--hmac-key", "PokemonSIO", "--format", "jsonl", stdin=None)
    assert piped.stdout == flags.stdout


def test_session_and_capture_cannot_both_be_standard_input(captures: Path) -> None:
    proc = _decode("-", "--session", "-", stdin=SESSION)
    assert proc.returncode == 2
    assert proc.stdout == "" and proc.stderr.count("\n") == 1
    assert "standard input" in proc.stderr and "--session" in proc.stderr


def test_session_from_closed_standard_input_is_said(captures: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "pianode", "decode", str(captures / "mgba-uds-frames.jsonl"),
                           "--session", "-"], stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60,
                          check=False)
    assert proc.returncode == 2 and proc.stderr.count("\n") == 1, proc.stderr
    assert "not JSON" in proc.stderr or "empty" in proc.stderr
