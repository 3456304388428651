"""``pianode decode --decrypted-pcap`` on datagrams a capture cannot hold as they came: every one is
still exported (frame numbers stay those of ``pianode decode``), the nearest way, with a comment
saying what changed, and tshark opens the result."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest


def _pianode(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pianode", *args], capture_output=True, text=True, timeout=120)


def _tshark_rows(path: Path) -> list[list[str]]:
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.fail("tshark is not installed: CI installs it (scripts/setup)")
    done = subprocess.run(
        [tshark, "-r", str(path), "-T", "fields", "-E", "separator=|", "-e", "frame.number", "-e", "udp.length",
         "-e", "ipv6.dst", "-e", "frame.comment"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [line.split("|") for line in done.stdout.splitlines() if line]


def test_every_datagram_is_exported_the_nearest_way_it_fits(tmp_path: Path) -> None:
    records = [
        {"hex": "00", "time": 5e9, "src": "10.0.0.1:1", "dst": "10.0.0.2:2"},
        {"hex": "01", "time": -3, "src": "10.0.0.1:1", "dst": "10.0.0.2:2"},
        {"hex": "02", "time": "9999-12-31T23:59:59+00:00", "src": "10.0.0.1:1", "dst": "10.0.0.2:2"},
        {"hex": "03", "name": "n" * 70_000, "src": "10.0.0.1:1", "dst": "10.0.0.2:2"},
        {"hex": "04", "name": "\ud800 lone", "src": "10.0.0.1:1", "dst": "10.0.0.2:2"},
        {"hex": "05", "src": "[::1]:5", "dst": "10.0.0.2:6"},
        {"hex": "06" * 70_000, "src": "10.0.0.1:1", "dst": "10.0.0.2:2"},
        {"hex": "07", "src": "10.0.0.1:1", "dst": "10.0.0.2:2"},
    ]
    capture = tmp_path / "odd.jsonl"
    capture.write_text("".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / "odd.pcapng"
    done = _pianode("decode", str(capture), "--decrypted-pcap", str(out))
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [f"wrote 8 datagrams to {out}: 0 Pia packets decrypted, 0 plain, 0 kept encrypted"
                                        " (0 failed authentication); 8 other datagrams (LAN browse, LDN link frames,"
                                        " PRUDP or not recognised)"]
    rows = _tshark_rows(out)
    assert [row[0] for row in rows] == [str(i) for i in range(1, 9)]
    comments = [row[3] for row in rows]
    assert "time 5000000000.0 is outside what a capture record holds" in comments[0]
    assert "time -3.0 is outside" in comments[1]
    assert "time 253402300799.0 is outside" in comments[2]
    assert "name: nnn" in comments[3] and len(comments[3]) < 70_000
    assert "\\ud800 lone" in comments[4]
    assert rows[5][2] == "::ffff:10.0.0.2" and "mix address families" in comments[5]
    assert rows[6][1] == str(8 + 65507) and "a payload of 70000 bytes" in comments[6]
    assert rows[7][1] == "9" and "pianode export" not in comments[7]


def test_a_capture_cut_short_says_so_and_what_was_written_in_one_line(tmp_path: Path) -> None:
    capture = tmp_path / "cut.pcap"
    record = _pianode("mesh", "-n", "2", "--record", str(capture), "--duration", "0.2", "--messages", "1",
                      "--format", "jsonl")
    assert record.returncode == 0, record.stderr
    capture.write_bytes(capture.read_bytes()[:-7])
    out = tmp_path / "cut.pcapng"
    done = _pianode("decode", str(capture), "--decrypted-pcap", str(out))
    assert done.returncode == 2
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"pianode decode: {capture}: ") and "; wrote " in line and str(out) in line
    assert line.endswith(f"; session settings from {tmp_path / 'cut.session.json'}, beside the capture (--session FILE for others)")
    assert _tshark_rows(out)
