"""``pianode decode`` gives each frame's time exactly as the capture holds it (nanoseconds included).

A float of seconds since 1970 keeps only about 240 ns at today's dates, so a nanosecond capture's times must not
pass through one on their way to the output.  A real ``pianode mesh`` recording is rewritten here as nanosecond
pcap (both byte orders) and pcapng (``if_tsresol`` 9, and 2^-30 seconds) with odd nanosecond times, and every
output line's ``"time"`` (read as a decimal) must be what tshark's ``frame.time_epoch`` says for its frame.
"""

from __future__ import annotations

import json
import shutil
import struct
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest

from pianode.capture.pcap import open_capture

BASE_NS = 1_795_790_385_123_456_789  # a date of this decade: a float of seconds is ~240 ns apart here


def _record(tmp: Path) -> tuple[Path, list[tuple[int, bytes]]]:
    pcap = tmp / "mesh.pcap"
    subprocess.run(
        [sys.executable, "-m", "pianode", "mesh", "-n", "3", "--rate", "30", "--duration", "0.5",
         "--seed", "7", "--record", str(pcap), "-q"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    blob = pcap.read_bytes()
    frames, pos = [], 24
    while pos < len(blob):
        _sec, _usec, incl, _orig = struct.unpack_from("<IIII", blob, pos)
        frames.append(blob[pos + 16 : pos + 16 + incl])
        pos += 16 + incl
    # Odd nanosecond times, 1.000000001 ms apart plus a varying part, none a whole microsecond.
    timed = [(BASE_NS + i * 1_000_001 + (i * 7919) % 997, f) for i, f in enumerate(frames)]
    return pcap.with_suffix(".session.json"), timed


def _nano_pcap(timed: list[tuple[int, bytes]], o: str) -> bytes:
    out = struct.pack(o + "IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 65535, 1)
    for ns, f in timed:
        out += struct.pack(o + "IIII", ns // 10**9, ns % 10**9, len(f), len(f)) + f
    return out


def _block(btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    return struct.pack("<II", btype, len(body) + 12) + body + struct.pack("<I", len(body) + 12)


def _pcapng(timed: list[tuple[int, bytes]], tsresol: int) -> bytes:
    out = _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    opts = struct.pack("<HH", 9, 1) + bytes([tsresol, 0, 0, 0]) + struct.pack("<HH", 0, 0)
    out += _block(1, struct.pack("<HHI", 1, 0, 65535) + opts)
    for ns, f in timed:
        ticks = ns if tsresol == 9 else (ns << 30) // 10**9  # 2^-30 s: ticks whose time is no whole nanosecond
        out += _block(6, struct.pack("<IIIII", 0, ticks >> 32, ticks & 0xFFFFFFFF, len(f), len(f)) + f)
    return out


def _tshark_times(path: Path) -> dict[int, Decimal]:
    tshark = shutil.which("tshark")
    if tshark is None:
        pytest.fail("tshark is not installed (CI installs it; apt-get install tshark)")
    out = subprocess.run([tshark, "-r", str(path), "-T", "fields", "-e", "frame.number", "-e", "frame.time_epoch"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return {int(n): Decimal(t) for n, t in (line.split("\t") for line in out.splitlines())}


def _decode_times(path: Path, session: Path) -> tuple[dict[int, Decimal], list[str]]:
    got = subprocess.run(
        [sys.executable, "-m", "pianode", "decode", str(path), "--session", str(session), "--format", "jsonl"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout
    rows = [json.loads(line, parse_float=Decimal) for line in got.splitlines()]
    return {r["frame"]: r["time"] for r in rows}, [r["kind"] for r in rows]


@pytest.fixture(scope="module")
def recording(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[tuple[int, bytes]]]:
    tmp = tmp_path_factory.mktemp("nanos")
    session, timed = _record(tmp)
    return tmp, session, timed


@pytest.mark.parametrize("form", ["pcap-le", "pcap-be", "pcapng-ns", "pcapng-2^-30"])
def test_decode_times_are_tsharks_to_the_nanosecond(
    recording: tuple[Path, Path, list[tuple[int, bytes]]], form: str
) -> None:
    tmp, session, timed = recording
    blob = {
        "pcap-le": lambda: _nano_pcap(timed, "<"),
        "pcap-be": lambda: _nano_pcap(timed, ">"),
        "pcapng-ns": lambda: _pcapng(timed, 9),
        "pcapng-2^-30": lambda: _pcapng(timed, 0x80 | 30),
    }[form]()
    path = tmp / f"{form}.cap"
    path.write_bytes(blob)
    want = _tshark_times(path)
    got, kinds = _decode_times(path, session)
    assert len(got) > 50 and kinds.count("pia") > 50  # the fast Pia line and the general one both ran
    assert set(got) <= set(want)
    wrong = {n: (str(got[n]), str(want[n])) for n in got if got[n] != want[n]}
    assert not wrong, f"{len(wrong)} of {len(got)} frames differ, e.g. {list(wrong.items())[:3]}"
    if form != "pcapng-2^-30":  # tshark read back the very times written
        assert all(want[n] == Decimal(timed[n - 1][0]) / 10**9 for n in got)


def test_datagram_carries_the_exact_nanoseconds(recording: tuple[Path, Path, list[tuple[int, bytes]]]) -> None:
    tmp, _session, timed = recording
    path = tmp / "exact.pcap"
    path.write_bytes(_nano_pcap(timed, "<"))
    with open_capture(path) as cap:
        got = {d.frame: d.time_ns for d in cap}
    assert got == {i + 1: ns for i, (ns, _f) in enumerate(timed) if i + 1 in got}
    assert len(got) > 50


def test_microsecond_captures_keep_their_text(recording: tuple[Path, Path, list[tuple[int, bytes]]]) -> None:
    """A microsecond pcap's times print as before (the shortest decimal), and equal tshark's."""
    tmp, session, timed = recording
    micro = [(ns // 1000 * 1000, f) for ns, f in timed]
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    for ns, f in micro:
        out += struct.pack("<IIII", ns // 10**9, ns % 10**9 // 1000, len(f), len(f)) + f
    path = tmp / "micro.pcap"
    path.write_bytes(out)
    got, _kinds = _decode_times(path, session)
    want = _tshark_times(path)
    assert got and all(got[n] == want[n] for n in got)
    text = subprocess.run(
        [sys.executable, "-m", "pianode", "decode", str(path), "--session", str(session), "--format", "jsonl"],
        capture_output=True, text=True, check=True, timeout=120,
    ).stdout.splitlines()[0]
    first = json.loads(text)["frame"]
    assert f'"time": {micro[first - 1][0] / 10**9!r},' in text


def test_table_times_from_the_first_frame_are_exact() -> None:
    """The table's time since the first frame comes from the exact nanoseconds, not from two floats' difference."""
    from pianode.capture.decode import DecodeResult
    from pianode.cli.decode import render_row

    first = DecodeResult(index=1, time=BASE_NS / 10**9, src=None, dst=None, kind="unknown", size=0, time_ns=BASE_NS)
    for delta, want in ((7_000_499, "+0.007000"), (7_000_501, "+0.007001"), (0, "+0.000000")):
        ns = BASE_NS + delta
        r = DecodeResult(index=2, time=ns / 10**9, src=None, dst=None, kind="unknown", size=0, time_ns=ns)
        assert render_row(r, first.time, first.time_ns).split()[1] == want


def test_json_lines_times_are_kept_exact(tmp_path: Path) -> None:
    """A JSON Lines record's "time" (a number or a numeric string, nanoseconds included, or ISO 8601 to the
    microsecond) reaches the output exactly; an absurd one is still ignored with a warning."""
    rows = [
        ({"hex": "00", "time": Decimal("1795790385.123456789")}, 1_795_790_385_123_456_789),
        ({"hex": "00", "time": "1795790385.000000001"}, 1_795_790_385_000_000_001),
        ({"hex": "00", "time": 1795790385}, 1_795_790_385_000_000_000),
        ({"hex": "00", "time": "1795790385.1234567891"}, 1_795_790_385_123_456_789),  # below 1 ns: cut, as tshark
        ({"hex": "00", "time": "2026-11-27T14:39:11.123456Z"}, 1_795_790_351_123_456_000),
        ({"hex": "00", "time": Decimal("1e999999999")}, None),
        ({"hex": "00", "time": "-1e999999999"}, None),
        ({"hex": "00", "time": "sNaN"}, None),
    ]
    path = tmp_path / "times.jsonl"
    path.write_text("".join(json.dumps({k: (float(v) if k == "time" and isinstance(v, Decimal) else v)
                                        for k, v in obj.items()}).replace(*_exact(obj)) + "\n" for obj, _ns in rows))
    with open_capture(path) as cap:
        got = list(cap)
    assert [d.time_ns for d in got] == [ns for _obj, ns in rows]
    assert [d.warning is None for d in got] == [ns is not None for _obj, ns in rows]
    assert got[0].time == 1_795_790_385_123_456_789 / 10**9
    out = subprocess.run([sys.executable, "-m", "pianode", "decode", str(path), "--format", "jsonl"],
                         capture_output=True, text=True, check=True, timeout=60).stdout.splitlines()
    times = [json.loads(line, parse_float=Decimal)["time"] for line in out]
    assert times[:5] == [Decimal(ns) / 10**9 for _obj, ns in rows[:5]]
    assert times[5:] == [None, None, None]


def _exact(obj: dict[str, object]) -> tuple[str, str]:
    """(the float text json.dumps wrote for a Decimal "time", the Decimal's own text): the line keeps every digit."""
    value = obj["time"]
    if not isinstance(value, Decimal):
        return ("", "")
    return (json.dumps(float(value)), str(value))
