"""Hostile capture structures: options cut short, out-of-range values, sniffing that must stay linear,
and decoder state that must stay bounded whatever the number of endpoints."""

from __future__ import annotations

import json
import struct
import subprocess
import sys
from pathlib import Path

from pianode.capture import decode as capture_decode
from pianode.capture.decode import Decoder
from pianode.capture.pcap import Datagram, open_capture
from pianode.capture.session_file import load_session


def _block(kind: int, body: bytes) -> bytes:
    body += bytes(-len(body) % 4)
    return struct.pack("<II", kind, len(body) + 12) + body + struct.pack("<I", len(body) + 12)


def _udp_frame(payload: bytes, src_port: int = 1000) -> bytes:
    udp_len = 8 + len(payload)
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, 0, 0, 64, 17, 0, bytes([127, 0, 0, 1]), bytes([127, 0, 0, 2]))
    return b"\x02\x00\x00\x00\x00\x02\x02\x00\x00\x00\x00\x01\x08\x00" + ip + struct.pack(">HHHH", src_port, 2000, udp_len, 0) + payload


def _pcapng(interface_options: bytes, frames: list[bytes]) -> bytes:
    out = _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    out += _block(1, struct.pack("<HHI", 1, 0, 0) + interface_options)
    for frame in frames:
        out += _block(6, struct.pack("<IIIII", 0, 0, 1000, len(frame), len(frame)) + frame)
    return out


def _decode(path: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pianode", "decode", str(path), "--format", "jsonl", *flags],
                          capture_output=True, text=True, timeout=120)


def test_interface_options_cut_short_by_their_block_are_left_unread(tmp_path: Path) -> None:
    frames = [_udp_frame(b"\x32\xab\x98\x64" + bytes(range(20)))] * 3
    cases = {
        "tsresol_without_its_byte": struct.pack("<HH", 9, 4),
        "tsoffset_cut_short": struct.pack("<HH", 14, 8) + b"\x01\x02",
        "an_option_longer_than_the_block": struct.pack("<HH", 2, 0xFFFF) + b"name",
    }
    for name, options in cases.items():
        path = tmp_path / f"{name}.pcapng"
        path.write_bytes(_pcapng(options, frames))
        done = _decode(path)
        assert done.returncode == 0 and done.stderr == "", (name, done.stderr)
        rows = [json.loads(line) for line in done.stdout.splitlines()]
        assert [row["size"] for row in rows] == [24, 24, 24], name


def test_a_time_beyond_any_float_is_ignored_with_a_note(tmp_path: Path) -> None:
    path = tmp_path / "times.jsonl"
    huge = "1" + "0" * 400
    path.write_text(f'{{"hex": "00", "time": {huge}}}\n{{"hex": "01", "time": -{huge}}}\n'
                    f'{{"hex": "02", "time": "9999-12-31T23:59:59+00:00"}}\n{{"hex": "03", "time": 5}}\n')
    done = _decode(path)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [row["data"] for row in rows] == ["00", "01", "02", "03"]
    assert [row["time"] for row in rows] == [None, None, 253402300799.0, 5.0]
    assert all('"time" ignored' in row["note"] for row in rows[:2])


def test_many_blank_and_comment_lines_before_the_first_datagram(tmp_path: Path) -> None:
    # Sniffing a text capture keeps the lines it read in a list: giving two million of them back
    # must not copy what is left after each one (that took minutes).  A hang check, bounded generously.
    for name, filler in (("blank", b"\n"), ("comments", b"# no datagram here\n")):
        path = tmp_path / f"{name}.hex"
        path.write_bytes(filler * 2_000_000 + b"0badf00d\n")
        done = _decode(path)
        assert done.returncode == 0, done.stderr
        (row,) = [json.loads(line) for line in done.stdout.splitlines()]
        assert row["frame"] == 2_000_001 and row["data"] == "0badf00d", name


def test_short_lines_inside_the_sniffed_bytes_keep_their_numbers_and_format(tmp_path: Path) -> None:
    # The reader sniffs the first 4 bytes for a magic number; lines that short must still be lines.
    path = tmp_path / "short.hex"
    path.write_bytes(b"\n\n00\n\n01\n")
    with open_capture(str(path)) as cap:
        assert cap.format == "hex"
        assert [(d.frame, d.data) for d in cap] == [(3, b"\x00"), (5, b"\x01")]
    path = tmp_path / "mixed.jsonl"
    path.write_bytes(b'\n{"hex": "00"}\n00\n')
    with open_capture(str(path)) as cap:
        assert cap.format == "jsonl"
        assert [(d.frame, d.data) for d in cap] == [(2, b"\x00"), (3, b"\x00")]


def test_a_utf8_byte_order_mark_is_read_as_text(tmp_path: Path) -> None:
    for suffix, text in ((".jsonl", b'{"hex": "32ab9864"}\n'), (".hex", b"32ab9864\n")):
        path = tmp_path / f"bom{suffix}"
        path.write_bytes(b"\xef\xbb\xbf" + text)
        with open_capture(str(path)) as cap:
            assert [d.data for d in cap] == [bytes.fromhex("32ab9864")]


def test_prudp_cipher_streams_are_kept_for_a_bounded_number_of_flows() -> None:
    decoder = Decoder(load_session(None, {"prudp": {"variant": "nintendo-v1", "access_key": "9f2b4678"}}))
    payload = bytes.fromhex("ead001810000000000000000") + bytes(20)
    limit = capture_decode._FLOWS_KEPT
    for i in range(3 * limit):
        decoder.decode(Datagram(index=i, data=payload, src=f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}:1000", dst="10.0.0.1:2000"))
    assert len(decoder._nex_streams) == limit
    # The most recently used flows are the ones kept.
    assert (f"10.0.{(3 * limit - 1) >> 8 & 255}.{(3 * limit - 1) & 255}:1000", "10.0.0.1:2000") in decoder._nex_streams


def test_lan_browse_requests_are_kept_for_a_bounded_number_of_requesters(tmp_path: Path) -> None:
    # A real browse request (a LAN run's recording), heard from ever new requesters.
    pcap = tmp_path / "lan.pcap"
    run = subprocess.run([sys.executable, "-m", "pianode", "mesh", "-n", "2", "--record", str(pcap), "--duration", "0.2",
                          "--messages", "1", "--format", "jsonl"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    decoder = Decoder(load_session(str(tmp_path / "lan.session.json")))
    with open_capture(str(pcap)) as cap:
        request = next(d for d in cap if decoder.decode(d).kind == "lan-browse-request")
    limit = capture_decode._FLOWS_KEPT
    for i in range(2 * limit + 5):
        got = decoder.decode(Datagram(index=i, data=request.data, src=f"127.0.{i >> 8 & 255}.{i & 255}:5000", dst=request.dst))
        assert got.authenticated is True
    assert len(decoder._lan_requests) == limit
    assert f"127.0.{(2 * limit + 4) >> 8 & 255}.{(2 * limit + 4) & 255}:5000" in decoder._lan_requests


def test_a_section_header_too_short_for_its_fields_is_named(tmp_path: Path) -> None:
    path = tmp_path / "shb12.pcapng"
    frame = _udp_frame(b"\x0b\xad\xf0\x0d")
    path.write_bytes(struct.pack("<II", 0x0A0D0D0A, 12) + struct.pack("<I", 0x1A2B3C4D)
                     + _pcapng(b"", [frame])[28:])  # (the rest of a good file after its section header)
    done = _decode(path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"pianode decode: {path}: pcapng section header block of length 12: file is corrupt from here on\n"


def test_a_json_document_over_several_lines_is_not_taken_for_json_lines(tmp_path: Path) -> None:
    path = tmp_path / "rec.session.json"
    path.write_text(json.dumps({"version": "5.18", "network": "lan", "session_key": "00" * 16}, indent=2))
    done = _decode(path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == (f"pianode decode: {path}: not JSON Lines: its first line opens a JSON object it does not"
                           " close (a JSON document over several lines, such as a session file, is not a capture)\n")
    # A one-line record with a bad value is still JSON Lines: reported in its place.
    path = tmp_path / "records.jsonl"
    path.write_text('{"hex": "zz"}\n{"hex": "00"}\n')
    done = _decode(path)
    assert done.returncode == 0
    assert [json.loads(line)["size"] for line in done.stdout.splitlines()] == [0, 1]
