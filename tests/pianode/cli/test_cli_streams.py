"""The standard streams a command is given: closed, full, or a pipe whose reader went away.

Each is said in one line on stderr with exit status 2 (standard output that cannot be written is an output
that cannot be written, like a ``--record`` path), never a traceback, never "Exception ignored", never a
silent exit 0; a reader that stops reading (``| head -1``) ends the command quietly with its own status.
The processes run through ``sh -c 'exec ... >&-'`` so that the descriptor is really closed, as a shell
closes it.
"""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest

from loopback_addresses import free_port

from pianode.capture.pcap import PcapWriter

PIANODE = [sys.executable, "-m", "pianode"]


def run_redirected(redirect: str, *argv: str, cwd: pathlib.Path | None = None,
                   env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """``pianode ARGV REDIRECT`` as a shell runs it (``>&-``, ``2>&-``, ``<&-``, ``>/dev/full``)."""
    return subprocess.run(["sh", "-c", f'exec "$0" "$@" {redirect}', *PIANODE, *argv], capture_output=True,
                          text=True, timeout=60, cwd=cwd, env=env, stdin=subprocess.DEVNULL)  # fmt: skip


def one_line(err: str) -> str:
    assert "Traceback" not in err and "Exception ignored" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def capture(tmp_path: pathlib.Path) -> pathlib.Path:
    """A capture whose decode is longer than a pipe holds (so a reader that stops early is noticed)."""
    path = tmp_path / "many.pcap"
    with path.open("wb") as f:
        writer = PcapWriter(f)
        for i in range(3000):
            writer.write_udp(bytes([i % 256]) * 40, "127.0.0.1:1", "127.0.0.2:2", 1.0 + i)
    return path


# ---------------------------------------------------------------- standard output closed


@pytest.mark.parametrize("argv", [
    ("--help",), ("-V",), ("decode", "--help"), ("wireshark", "path"), ("decode", "CAPTURE"),
    ("decode", "CAPTURE", "--format", "table"), ("mesh", "-n", "2", "--duration", "0.2", "--record", "REC"),
], ids=" ".join)  # fmt: skip
def test_a_closed_standard_output_is_one_line_and_exit_2_before_any_work(
    argv: tuple[str, ...], capture: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    argv = tuple(str(capture) if a == "CAPTURE" else str(tmp_path / "rec.pcap") if a == "REC" else a for a in argv)
    out = run_redirected(">&-", *argv)
    line = one_line(out.stderr)
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert "standard output is closed" in line, line
    assert not (tmp_path / "rec.pcap").exists()  # refused before the run: nothing half done


def test_with_stderr_closed_an_error_never_lands_on_standard_output(tmp_path: pathlib.Path) -> None:
    out = run_redirected("2>&-", "decode", str(tmp_path / "missing.pcap"))
    assert out.returncode == 2 and out.stdout == "", (out.returncode, out.stdout)
    bad_flag = run_redirected("2>&-", "mesh", "--loss", "2")
    assert bad_flag.returncode == 2 and bad_flag.stdout == "", (bad_flag.returncode, bad_flag.stdout)


def test_with_stderr_closed_a_run_still_prints_its_result_and_nothing_else(tmp_path: pathlib.Path) -> None:
    rec = tmp_path / "rec.pcap"
    out = run_redirected("2>&-", "mesh", "-n", "2", "--duration", "0.3", "--record", str(rec), "-q")
    assert out.returncode == 0, out.stdout
    assert out.stdout.startswith("result: OK"), out.stdout
    assert rec.read_bytes()[:4] == bytes.fromhex("d4c3b2a1")  # the recording is the recording, no stray text in it


def test_decode_of_a_closed_standard_input_says_so(tmp_path: pathlib.Path) -> None:
    out = run_redirected("<&-", "decode", "-")
    line = one_line(out.stderr)
    assert out.returncode == 2 and out.stdout == "", (out.returncode, out.stdout)
    assert line == "pianode decode: capture -: standard input is closed (pipe a capture into it, or name a file)"


# ---------------------------------------------------------------- standard output full


@pytest.mark.parametrize("argv", [
    ("--help",), ("-V",), ("decode", "--help"), ("wireshark", "path"), ("decode", "CAPTURE"),
    ("decode", "CAPTURE", "--format", "table"), ("decode", "CAPTURE", "--decrypted-pcap", "-"), ("mesh", "-n", "2", "--duration", "0.2"),
    ("relay", "ca", "init", "CA"),
], ids=" ".join)  # fmt: skip
def test_a_full_standard_output_is_one_line_and_exit_2(
    argv: tuple[str, ...], capture: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    argv = tuple(str(capture) if a == "CAPTURE" else str(tmp_path / "ca") if a == "CA" else a for a in argv)
    out = run_redirected(">/dev/full", *argv)
    line = one_line(out.stderr)
    assert out.returncode == 2, (out.returncode, out.stderr)
    assert line.endswith("cannot write standard output: No space left on device"), line


# ---------------------------------------------------------------- a reader that stops reading


@pytest.mark.parametrize("argv", [
    ("--help",), ("decode", "CAPTURE"), ("decode", "CAPTURE", "--format", "table"),
    ("decode", "CAPTURE", "--decrypted-pcap", "-"), ("mesh", "-n", "2", "--duration", "0.2", "--format", "jsonl"),
], ids=" ".join)  # fmt: skip
def test_a_reader_that_stops_early_ends_the_command_quietly(argv: tuple[str, ...], capture: pathlib.Path) -> None:
    argv = tuple(str(capture) if a == "CAPTURE" else a for a in argv)
    out = subprocess.run(["bash", "-c", 'set -o pipefail; "$0" "$@" | head -c 1 >/dev/null', *PIANODE, *argv],
                         capture_output=True, text=True, timeout=60)  # fmt: skip
    assert out.stderr == "", out.stderr
    assert out.returncode == 0, out.returncode


def test_a_full_standard_error_keeps_the_exit_status_and_says_nothing_on_standard_output(
    capture: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full here")
    for argv, status in [(("decode", str(tmp_path / "missing.pcap")), 2), (("mesh", "--loss", "2"), 2),
                         (("decode", str(capture), "--format", "jsonl"), 0)]:  # fmt: skip
        out = run_redirected("2>/dev/full", *argv)
        assert out.returncode == status, (argv, out.returncode)
        assert "Traceback" not in out.stdout and "pianode" not in out.stdout, (argv, out.stdout[:300])


def test_an_output_encoding_without_the_tables_characters_shows_them_escaped(capture: pathlib.Path) -> None:
    """PYTHONIOENCODING=ascii (or a locale of another charset): a table's arrows and a range's ≥ are shown as
    \\u2192 and \\u2265, the command still does its work (it failed with "'ascii' codec can't encode")."""
    env = {**os.environ, "PYTHONIOENCODING": "ascii"}
    done = subprocess.run([*PIANODE, "decode", str(capture), "--format", "table"], capture_output=True, timeout=60,
                          env=env)  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert b"\\u2192" in done.stdout and done.stderr == b""


# ---------------------------------------------------------------- standard output is a file the command reads


def test_decode_into_its_own_capture_or_session_file_is_refused_before_a_byte_is_written(
    capture: pathlib.Path, tmp_path: pathlib.Path
) -> None:
    """``pianode decode x.jsonl >> x.jsonl`` read its own output back and grew the file without end (tens of
    MB a second, until the disk was full); ``>> x.pcap`` appended text to the capture.  As ``cat x >> x``:
    refused, one line, exit 2, the file as it was."""
    lines = tmp_path / "x.jsonl"
    lines.write_text('{"hex": "0000"}\n' * 5000)
    session = tmp_path / "s.json"
    session.write_text('{"version": "5.18", "network": "lan"}\n')
    for argv, target in [((str(lines),), lines), ((str(capture), "--format", "table"), capture),
                         ((str(capture), "--session", str(session)), session),
                         ((str(capture), "--decrypted-pcap", "-"), capture)]:  # fmt: skip
        before = target.read_bytes()
        out = subprocess.run(["sh", "-c", 'exec "$0" "$@" >> "$TARGET"', *PIANODE, "decode", *argv], capture_output=True,
                             text=True, timeout=10, env={**os.environ, "TARGET": str(target)})  # fmt: skip
        line = one_line(out.stderr)
        assert out.returncode == 2, (argv, out.returncode, out.stderr)
        assert "is also standard output" in line, line
        assert target.read_bytes() == before, argv
    before = lines.read_bytes()
    piped = subprocess.run(["sh", "-c", 'exec "$0" "$@" < "$TARGET" >> "$TARGET"', *PIANODE, "decode", "-"],
                           capture_output=True, text=True, timeout=10, env={**os.environ, "TARGET": str(lines)})  # fmt: skip
    assert piped.returncode == 2 and "standard input" in one_line(piped.stderr), piped.stderr
    assert lines.read_bytes() == before
    noted = subprocess.run(["sh", "-c", 'exec "$0" "$@" 2>> "$TARGET"', *PIANODE, "decode", str(lines)],
                           capture_output=True, text=True, timeout=10, env={**os.environ, "TARGET": str(lines)})  # fmt: skip
    assert noted.returncode == 2 and noted.stdout == "", noted.returncode
    assert lines.read_bytes() == before  # the line that says so goes nowhere: standard error is the capture


def test_a_relay_file_that_is_also_standard_output_is_refused(tmp_path: pathlib.Path) -> None:
    """``relay serve ... >> hub.key`` (or a site's ``--relay-key``): the command's lines would be appended to
    the key; refused before the hub starts, the key as it was."""
    ca = tmp_path / "ca"
    for argv in (["relay", "ca", "init", str(ca)], ["relay", "ca", "issue", str(ca), "--server", "hub"]):
        assert subprocess.run([*PIANODE, *argv], capture_output=True, timeout=60).returncode == 0
    key = ca / "hub.key"
    before = key.read_bytes()
    out = subprocess.run(["sh", "-c", 'exec "$0" "$@" >> "$TARGET"', *PIANODE, "relay", "serve", "--listen",
                          f"127.0.0.1:{free_port()}", "--ca", str(ca / "ca.pem"), "--cert", str(ca / "hub.pem"), "--key", str(key),
                          "--duration", "1"], capture_output=True, text=True, timeout=30,
                         env={**os.environ, "TARGET": str(key)})  # fmt: skip
    line = one_line(out.stderr)
    assert out.returncode == 2 and "--key" in line and "is also standard output" in line, line
    assert key.read_bytes() == before
    pem = ca / "ca.pem"
    before = pem.read_bytes()
    issue = subprocess.run(["sh", "-c", 'exec "$0" "$@" >> "$TARGET"', *PIANODE, "relay", "ca", "issue", str(ca),
                            "--client", "site"], capture_output=True, text=True, timeout=30,
                           env={**os.environ, "TARGET": str(pem)})  # fmt: skip
    assert issue.returncode == 2 and "is also standard output" in one_line(issue.stderr), issue.stderr
    assert pem.read_bytes() == before and not (ca / "site.pem").exists()
