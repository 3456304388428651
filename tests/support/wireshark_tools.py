"""Running the real tshark with pianode's Lua dissector, and pianode's own CLI, for the Wireshark tests.

:func:`dissect` runs ``tshark -r FILE -X lua_script:<dissector> -T json -e ...``
and returns one dict per frame: field name → list of strings (tshark's own
text for each occurrence, in tree order).  tshark missing is a test failure
(CI installs it), never a skip.  :func:`pianode` runs the CLI in this process
and returns its status, stdout and stderr; :func:`decode_jsonl` is ``pianode
decode --format jsonl`` as records.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from pianode.cli.main import main as cli_main
from pianode.wireshark import DISSECTOR_PATH

__all__ = ["as_int", "decode_jsonl", "dissect", "message_payloads", "pianode", "tshark"]

# Bounds every tshark run: the largest file here is read in about a second.
TSHARK_TIMEOUT = 120


def tshark() -> str:
    path = shutil.which("tshark")
    if path is None:
        pytest.fail("tshark is not installed: the Wireshark tests need it (CI installs it; apt-get install tshark)")
    return path


def dissect(
    path: Path, *fields: str, prefs: tuple[str, ...] = (), display_filter: str | None = None
) -> list[dict[str, list[str]]]:
    """Per frame, the values of *fields* as tshark prints them with pianode's dissector loaded."""
    cmd = [tshark(), "-n", "-r", str(path), "-X", f"lua_script:{DISSECTOR_PATH}", "-T", "json"]
    for p in prefs:
        cmd += ["-o", p]
    if display_filter:
        cmd += ["-Y", display_filter]
    # A Lua error in the dissector, and an exception Wireshark caught in it ("Malformed Packet (Exception
    # occurred)"), are expert messages: they are asked for every time, and fail the test wherever they show.
    checks = [f for f in ("_ws.expert.message",) if f not in fields]
    for f in ("frame.number", *fields, *checks):
        cmd += ["-e", f]
    # An empty home: a pianode.lua installed in the user's plugin folder (pianode wireshark install) or personal
    # preferences would load beside the dissector under test.
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "HOME": home, "XDG_CONFIG_HOME": home}
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TSHARK_TIMEOUT, check=False, env=env)
    errors = [line for line in proc.stderr.splitlines() if "Running as user" not in line and line.strip()]
    assert proc.returncode == 0 and not errors, f"tshark failed ({proc.returncode}): {errors}"
    frames = [frame["_source"]["layers"] for frame in json.loads(proc.stdout or "[]")]
    for frame in frames:
        lua = [m for m in frame.get("_ws.expert.message", []) if m.startswith("Lua Error") or "Exception occurred" in m]
        assert not lua, f"frame {frame['frame.number']}: {lua}"
        for f in checks:
            frame.pop(f, None)
    return frames


def as_int(text: str) -> int:
    return int(text, 0)


def pianode(*argv: str) -> tuple[int, str, str]:
    """Run the pianode CLI in this process: (status, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = cli_main(list(argv))
        except SystemExit as exc:  # argparse errors exit
            status = int(exc.code or 0)
    return status, out.getvalue(), err.getvalue()


def decode_jsonl(*argv: str) -> list[dict[str, Any]]:
    status, out, err = pianode("decode", *argv, "--format", "jsonl")
    assert status == 0, err
    return [json.loads(line) for line in out.splitlines()]


def message_payloads(frame: dict[str, list[str]]) -> list[str]:
    """Each message's payload (hex): ``pia.msg.payload`` is present for the messages whose ``pia.msg.length`` > 0."""
    lengths = [int(x) for x in frame.get("pia.msg.length", [])]
    payloads = iter(frame.get("pia.msg.payload", []))
    out = [next(payloads) if n else "" for n in lengths]
    assert next(payloads, None) is None, f"frame {frame['frame.number']}: more payloads than non-empty messages"
    assert [len(p) // 2 for p in out] == lengths
    return out
