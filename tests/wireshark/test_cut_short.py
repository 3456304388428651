"""Packets a capture's snap length cut short: ``pianode decode`` and the Lua dissector still read the Pia header
of each, and say it was cut short, checked against the nDPI expected file (written from the public format
descriptions, not by pianode)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

from wireshark_tools import as_int, decode_jsonl, dissect, pianode

SNAP = 96  # an old tcpdump default: Ethernet + IPv4 + UDP + 54 bytes of Pia, less than any packet here


def cut_pcap(src: Path, dst: Path, snap: int) -> None:
    """A copy of a little-endian pcap with every record cut to *snap* bytes (original length kept)."""
    blob = src.read_bytes()
    out = bytearray(blob[:16]) + struct.pack("<I", snap) + blob[20:24]
    pos = 24
    while pos < len(blob):
        sec, frac, incl, orig = struct.unpack_from("<IIII", blob, pos)
        frame = blob[pos + 16 : pos + 16 + incl][:snap]
        out += struct.pack("<IIII", sec, frac, len(frame), orig) + frame
        pos += 16 + incl
    dst.write_bytes(bytes(out))


def _want(captures: Path) -> list[list[int]]:
    expected = json.loads((captures / "nDPI-nintendo.expected.json").read_text())
    # frame, encryption, connection id, packet id, source timer, destination timer
    return [[row[0], row[2], row[3], row[4], row[5], row[6]] for row in expected["packets"]]


def test_decode_reads_the_header_of_every_cut_pia_packet(captures: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.pcap"
    cut_pcap(captures / "nDPI-nintendo.pcap", cut, SNAP)
    rows = [r for r in decode_jsonl(str(cut)) if r["kind"] == "pia"]
    got = [[r["frame"], 2 if r["header"]["encrypted"] else 1, r["header"]["connection_id"], r["header"]["packet_id"],
            r["header"]["source_timer"], r["header"]["destination_timer"]] for r in rows]
    assert got == _want(captures) and len(got) == 842
    for r in rows:
        assert r["header"]["format"] == "H-A" and "tag" not in r["header"]  # the HMAC trailer was not captured
        assert r["authenticated"] is None and r["messages"] is None
        assert r["error"].startswith("captured only ") and r["error"].endswith(" (snap length)")


def test_dissector_reads_the_header_of_every_cut_pia_packet(captures: Path, tmp_path: Path) -> None:
    cut = tmp_path / "cut.pcap"
    cut_pcap(captures / "nDPI-nintendo.pcap", cut, SNAP)
    frames = dissect(cut, "pia.format", "pia.encryption", "pia.connection_id", "pia.packet_id", "pia.source_timer",
                     "pia.destination_timer", "_ws.expert.message", "_ws.col.Info", display_filter="pia")
    got = []
    for f in frames:
        assert f["pia.format"] == ["H-A"]
        assert "[cut short]" in f["_ws.col.Info"][0]
        assert any("of the packet's" in m and "(snap length)" in m for m in f["_ws.expert.message"])
        got.append([as_int(f["frame.number"][0])] + [as_int(f[k][0]) for k in (
            "pia.encryption", "pia.connection_id", "pia.packet_id", "pia.source_timer", "pia.destination_timer")])
    assert got == _want(captures)


def test_cut_prudp_is_not_given_a_checksum_verdict(captures: Path, tmp_path: Path) -> None:
    """A v0 packet without HAS_SIZE runs to the end of its datagram, checksum last (spec prudp.md §2.1): cut short by
    the snap length, its checksum is not in the capture.  Neither tool may call it failed (or ok): pianode decode
    says what was cut, and the dissector leaves it unclaimed, as it leaves one whose size field runs past the end."""
    from pianode.capture.pcap import PcapWriter

    full = tmp_path / "gro.pcap"
    with full.open("wb") as f:
        w = PcapWriter(f)
        for line in (captures / "gro-prudp" / "GRO_Backend_packetLog.jsonl").read_text().splitlines():
            rec = json.loads(line)
            ends = ("10.0.0.1:3074", "10.0.0.2:50000")
            w.write_udp(bytes.fromhex(rec["hex"]), *(ends if rec["sent_by_emulator"] else ends[::-1]))
    cut = tmp_path / "cut.pcap"
    cut_pcap(full, cut, 42 + 18)  # Ethernet + IPv4 + UDP, and 18 bytes of PRUDP
    args = ("--prudp-variant", "quazal-v0", "--access-key", "8dtRv2oj")
    rows = decode_jsonl(str(cut), *args)
    cut_rows = [r for r in rows if r["error"] and r["error"].startswith("captured only 18 of")]
    assert len(cut_rows) == 385 - sum(1 for r in rows if r["kind"] == "prudp") > 150
    # the capture itself, and decode's export (which writes what was captured, saying it was cut)
    export = tmp_path / "cut.pcapng"
    assert pianode("decode", str(cut), *args, "--decrypted-pcap", str(export))[0] == 0
    for path in (cut, export):
        frames = dissect(path, "prudp.type", "prudp.checksum.status", prefs=("prudp.access_key:8dtRv2oj",))
        assert len(frames) == 385
        for r in rows:
            f = frames[r["index"] - 1]
            if r in cut_rows:
                assert r["kind"] == "unknown" and "prudp.type" not in f and "prudp.checksum.status" not in f
            else:
                assert r["kind"] == "prudp" and f["prudp.checksum.status"] == ["ok"] * len(r["prudp"])
