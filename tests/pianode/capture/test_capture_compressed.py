"""gzip-compressed captures: read as tshark reads them, streamed; a corrupt or cut gzip stream is reported."""

from __future__ import annotations

import gzip
import io
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pianode.capture.pcap import CaptureError, open_capture


def datagrams(source: object) -> tuple[list[tuple[int | None, str | None, bytes]], object]:
    with open_capture(source) as cap:  # type: ignore[arg-type]
        return [(d.frame, d.src, d.data) for d in cap], cap.stats


def test_a_gzipped_real_pcap_reads_as_the_pcap_and_as_tshark_reads_it(captures: Path, tmp_path: Path) -> None:
    plain, plain_stats = datagrams(captures / "nDPI-nintendo.pcap")
    gz = tmp_path / "nintendo.pcap.gz"
    gz.write_bytes(gzip.compress((captures / "nDPI-nintendo.pcap").read_bytes()))
    got, stats = datagrams(gz)
    assert got == plain and len(got) == 869
    assert stats.skipped == plain_stats.skipped and stats.problem is None  # type: ignore[attr-defined]
    exe = shutil.which("tshark")
    if exe is None:
        pytest.fail("tshark is not installed (CI installs it; apt-get install tshark)")
    out = subprocess.run([exe, "-r", str(gz), "-Y", "udp and not icmp", "-T", "fields", "-e", "frame.number", "-e",
                          "udp.payload"], capture_output=True, text=True, check=True, timeout=60).stdout
    theirs = {int(n): bytes.fromhex(p) for n, p in (x.split("\t") for x in out.splitlines())}
    assert theirs == {f: d for f, _, d in got} and len(theirs) == 869


def test_gzipped_json_lines_from_a_stream(captures: Path) -> None:
    text = (captures / "mgba-uds-frames.jsonl").read_bytes()
    got, _ = datagrams(io.BytesIO(gzip.compress(text)))
    assert got == datagrams(io.BytesIO(text))[0] and len(got) == 18


def test_a_cut_gzip_keeps_what_came_before_and_says_why(captures: Path) -> None:
    blob = gzip.compress((captures / "nDPI-nintendo.pcap").read_bytes())
    got, stats = datagrams(io.BytesIO(blob[: len(blob) // 2]))
    assert 100 < len(got) < 869
    assert stats.problem is not None and stats.problem.endswith("(the gzip stream is cut short)")  # type: ignore[attr-defined]


def test_corrupt_gzip_is_one_line_exit_2(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match="gzip stream is corrupt"):
        open_capture(io.BytesIO(b"\x1f\x8b" + bytes(40)))
    bad = tmp_path / "bad.pcap.gz"
    bad.write_bytes(gzip.compress(b"\xd4\xc3\xb2\xa1" + bytes(20))[:-12] + b"garbage!")
    run = subprocess.run([sys.executable, "-m", "pianode", "decode", str(bad)], capture_output=True, text=True,
                         timeout=60)
    assert run.returncode == 2 and "Traceback" not in run.stderr
    assert len(run.stderr.strip().splitlines()) == 1 and "gzip stream" in run.stderr
