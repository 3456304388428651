"""Output files are written whole or not at all, and only where they were asked for.

``--decrypted-pcap``, ``--record`` and ``bench --json`` go through
:func:`pianode.capture.output.output_file`: a file appears complete or not at all (a failure leaves the
target as it was and no temporary file), and a device or FIFO (``/dev/null``, a pipe a reader waits on)
is written into, never replaced by a regular file nor opened before the run to probe it (opening a FIFO
waits for its reader).  ``-`` is standard output where a flag takes it (``--decrypted-pcap``), refused
where it cannot (``--record`` writes two files); flags of a printed output that an export does not print
are refused.
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from pianode.capture.output import output_file
from support.cli_processes import pianode

PCAPNG_MAGIC = b"\x0a\x0d\x0d\x0a"


def _capture(tmp_path: Path) -> Path:
    capture = tmp_path / "x.jsonl"
    capture.write_text(json.dumps({"hex": "00"}) + "\n" + json.dumps({"hex": "01"}) + "\n")
    return capture


def test_a_failed_write_leaves_the_target_as_it_was_and_no_temporary_file(tmp_path: Path) -> None:
    target = tmp_path / "out.bin"
    target.write_bytes(b"before")
    with pytest.raises(OSError) as caught, output_file(target) as f:
        f.write(b"half of it")
        raise OSError(errno.ENOSPC, "No space left on device")
    assert caught.value.filename == str(target)  # a write error names the file it was writing
    assert target.read_bytes() == b"before"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]
    with output_file(target) as f:
        f.write(b"after")
    assert target.read_bytes() == b"after" and sorted(p.name for p in tmp_path.iterdir()) == ["out.bin"]


def test_a_fifo_is_written_into_not_replaced(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    done = pianode("decode", str(_capture(tmp_path)), "--decrypted-pcap", str(fifo), timeout=60)
    reader.join(10)
    assert done.returncode == 0, done.stderr
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert got and got[0][:4] == PCAPNG_MAGIC


def test_decrypted_pcap_dash_is_standard_output(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pianode", "decode", str(_capture(tmp_path)), "--decrypted-pcap", "-"],
                          capture_output=True, timeout=60, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout[:4] == PCAPNG_MAGIC
    assert done.stderr.decode().startswith("wrote 2 datagrams to standard output")
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize("flag", [["--flows"], ["--format", "jsonl"], ["--format", "table"]])
def test_decrypted_pcap_refuses_the_flags_of_a_printed_output(tmp_path: Path, flag: list[str]) -> None:
    out = tmp_path / "out.pcapng"
    done = pianode("decode", str(_capture(tmp_path)), "--decrypted-pcap", str(out), *flag, timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"pianode decode: {flag[0]} shapes the printed output, and --decrypted-pcap prints none"
                           " (it writes the capture): use one or the other\n")
    assert not out.exists()


def test_record_refuses_standard_output_and_an_unwritable_session_file(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, "-m", "pianode", "mesh", "-n", "2", "--record", "-"],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)  # fmt: skip
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == ("pianode mesh: --record -: --record writes a file, not standard output: give a file name"
                           " (./- for a file named -)\n")
    (tmp_path / "r.session.json").mkdir()
    done = pianode("ldn", "host", "--game-key", "0123456789abcdef", "--record", str(tmp_path / "r.pcap"), timeout=60)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"pianode ldn host: --record (its session file) {tmp_path}/r.session.json: is a directory\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.session.json"]


def test_record_into_a_pipe_writes_the_pcap_alone(tmp_path: Path) -> None:
    """``--record >(tshark -r -)`` or a FIFO: a pipe (or a device such as /dev/null) has nothing beside it, so
    the session file is not written (it was refused as '/dev/fd/63.session.json: cannot be written', and
    /dev/null got a /dev/null.session.json); the summary says where the settings went: nowhere."""
    out = tmp_path / "got.pcap"
    done = subprocess.run(["bash", "-c", 'exec "$0" -m pianode mesh -n 2 --duration 0.2 --record >(cat > "$1")',
                           sys.executable, str(out)], capture_output=True, text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "no session file" in done.stdout, done.stdout
    fifo = tmp_path / "pipe.pcap"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()), daemon=True)
    reader.start()
    done = pianode("mesh", "-n", "2", "--duration", "0.2", "--record", str(fifo), "--format", "jsonl", timeout=60)
    reader.join(10)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["record"]["session"] is None
    assert got and got[0][:4] == bytes.fromhex("d4c3b2a1")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["got.pcap", "pipe.pcap"]
    for _ in range(50):  # the shell's cat may still be writing when bash returns
        if out.stat().st_size:
            break
        threading.Event().wait(0.1)
    assert out.read_bytes()[:4] == bytes.fromhex("d4c3b2a1")


def test_decrypted_pcap_into_a_pipe_of_the_shell(tmp_path: Path) -> None:
    """``--decrypted-pcap >(tshark -r -)``: /dev/fd/63 is a pipe, written into (it was 'No such file or directory',
    a temporary file tried beside 'pipe:[1234]')."""
    out = tmp_path / "got.pcapng"
    done = subprocess.run(["bash", "-c", 'exec "$0" -m pianode decode "$2" --decrypted-pcap >(cat > "$1")',
                           sys.executable, str(out), str(_capture(tmp_path))], capture_output=True, text=True,
                          timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    for _ in range(50):  # the shell's cat may still be writing when bash returns
        if out.stat().st_size:
            break
        threading.Event().wait(0.1)
    assert out.read_bytes()[:4] == PCAPNG_MAGIC


def test_a_recording_that_cannot_be_written_at_the_end_keeps_the_runs_summary() -> None:
    """The disk fills up during the run (/dev/full): the summary is still printed, the failure said, exit 1
    (the summary was lost: one line 'pianode mesh: /dev/full: No space left on device')."""
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    mesh = pianode("mesh", "-n", "2", "--duration", "0.2", "--record", "/dev/full", timeout=60)
    assert mesh.returncode == 1, mesh.stderr
    assert "result: FAILED" in mesh.stdout and "Traceback" not in mesh.stderr, (mesh.stdout, mesh.stderr)
    assert "PROBLEM: the recording was not written: /dev/full: No space left on device" in mesh.stdout
    ldn = pianode("ldn", "host", "--game-key", "0123456789abcdef", "--duration", "0.5", "--port", "0", "--record",
                  "/dev/full", "--format", "jsonl", timeout=60)  # fmt: skip
    assert ldn.returncode == 1, ldn.stderr
    summary = json.loads(ldn.stdout.splitlines()[-1])
    assert summary["role"] == "host", summary
    assert ldn.stderr == "pianode ldn host: --record /dev/full: the recording was not written (No space left on device)\n"
