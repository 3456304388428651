"""pcapng blocks whose lengths disagree: a corrupt file, said as such (exit 2, one line), not frames skipped.

A pcapng block gives its total length at both ends, and an Enhanced Packet Block's captured length must fit in
the block.  A file where either is false is corrupt from that block on: the reader stops there and says so in
``CaptureStats.problem``, as it does for a block cut short, after yielding every datagram before it.
"""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

from pianode.capture.pcap import open_capture

PAYLOADS = [b"\x32\xab\x98\x64" + bytes([i]) * 12 for i in range(3)]


def _udp_over_ethernet(payload: bytes) -> bytes:
    udp = struct.pack(">HHHH", 5000, 6000, 8 + len(payload), 0) + payload
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(udp), 7, 0, 64, 17, 0, bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]))
    return bytes.fromhex("020000000002" "020000000001" "0800") + ip + udp


def _block(kind: int, body: bytes, *, trailing: int | None = None) -> bytes:
    body += bytes(-len(body) % 4)
    total = len(body) + 12
    return struct.pack("<II", kind, total) + body + struct.pack("<I", total if trailing is None else trailing)


def _packet(payload: bytes, *, caplen: int | None = None, trailing: int | None = None) -> bytes:
    frame = _udp_over_ethernet(payload)
    head = struct.pack("<IIIII", 0, 0, 1_000_000, len(frame) if caplen is None else caplen, len(frame))
    return _block(6, head + frame, trailing=trailing)


def _file(packets: list[bytes]) -> bytes:
    section = _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    interface = _block(1, struct.pack("<HHI", 1, 0, 0))
    return section + interface + b"".join(packets)


def _read(path: Path) -> tuple[list[bytes], str | None, dict[str, int]]:
    with open_capture(str(path)) as cap:
        data = [d.data for d in cap]
        return data, cap.stats.problem, dict(cap.stats.skipped)


def _decode(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pianode", "decode", str(path), "--format", "jsonl"],
                          capture_output=True, text=True, timeout=120, check=False)


def test_a_trailing_length_unlike_the_leading_one_is_corruption(tmp_path: Path) -> None:
    whole = tmp_path / "good.pcapng"
    whole.write_bytes(_file([_packet(p) for p in PAYLOADS]))
    assert _read(whole) == (PAYLOADS, None, {})  # (the same blocks with their lengths right read whole)
    good = _packet(PAYLOADS[1])
    path = tmp_path / "trailer.pcapng"
    path.write_bytes(_file([_packet(PAYLOADS[0]), _packet(PAYLOADS[1], trailing=len(good) + 4), _packet(PAYLOADS[2])]))
    data, problem, skipped = _read(path)
    assert data == PAYLOADS[:1] and skipped == {}
    assert problem == f"pcapng block ends with length {len(good) + 4} where it began with {len(good)}: file is corrupt from here on"
    done = _decode(path)
    assert done.returncode == 2
    assert [json.loads(line)["size"] for line in done.stdout.splitlines()] == [len(PAYLOADS[0])]
    assert done.stderr == f"pianode decode: {path}: {problem}\n"


def test_a_captured_length_beyond_its_block_is_corruption(tmp_path: Path) -> None:
    frame_len = len(_udp_over_ethernet(PAYLOADS[1]))
    path = tmp_path / "caplen.pcapng"
    path.write_bytes(_file([_packet(PAYLOADS[0]), _packet(PAYLOADS[1], caplen=frame_len + 40), _packet(PAYLOADS[2])]))
    data, problem, skipped = _read(path)
    assert data == PAYLOADS[:1] and skipped == {}
    assert problem == (f"pcapng packet block claims {frame_len + 40} captured bytes but holds {frame_len + -frame_len % 4}:"
                       " file is corrupt from here on")
    done = _decode(path)
    assert done.returncode == 2
    assert len(done.stdout.splitlines()) == 1
    assert done.stderr == f"pianode decode: {path}: {problem}\n"


def test_a_bad_trailing_length_in_the_section_header_is_corruption(tmp_path: Path) -> None:
    path = tmp_path / "shb.pcapng"
    section = _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1), trailing=0)
    path.write_bytes(section + _file([_packet(PAYLOADS[0])])[len(section):])
    done = _decode(path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"pianode decode: {path}: pcapng block ends with length 0 where it began with 28: file is"
                           " corrupt from here on\n")
