"""The dissector and ``pianode decode`` on one capture that holds PRUDP to a game server and Pia between consoles.

PRUDP: the real SoulCalibur VI SYN / SYN+ACK of spec prudp.md §8.3 (key byte sum 0xB0; the text key "XX" sums to
it).  Pia: the first datagram of the nDPI Splatoon 2 capture.  Both tools must read each datagram the same way, with
the access key and without it (then neither judges the checksum).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from wireshark_tools import decode_jsonl, dissect, pianode

from pianode.capture.pcap import PcapWriter, open_capture

SC6 = (bytes.fromhex("3f3120000000000000000000000040"), bytes.fromhex("313f48000000000000006c05dfbe000077"))


@pytest.fixture
def mixed(tmp_path: Path, captures: Path) -> Path:
    with open_capture(captures / "nDPI-nintendo.pcap") as cap:
        pia = next(d.data for d in cap if d.data[:4] == bytes.fromhex("32ab9864"))
    path = tmp_path / "mixed.pcap"
    with path.open("wb") as f:
        w = PcapWriter(f)
        w.write_udp(SC6[0], "10.0.0.2:3074", "10.0.0.1:3074", time=1.0)
        w.write_udp(pia, "192.168.12.114:52119", "91.8.243.35:49432", time=1.1)
        w.write_udp(SC6[1], "10.0.0.1:3074", "10.0.0.2:3074", time=1.2)
    return path


@pytest.mark.parametrize("key", ["XX", ""])
def test_both_tools_read_pia_and_prudp_of_one_capture_alike(mixed: Path, key: str) -> None:
    rows = decode_jsonl(str(mixed), "--prudp-variant", "quazal-v0", *(["--access-key", key] if key else []))
    frames = dissect(mixed, "_ws.col.Protocol", "pia.connection_id", "pia.packet_id", "prudp.type",
                     "prudp.checksum.status", prefs=(f"prudp.access_key:{key}",))
    assert [r["kind"] for r in rows] == ["prudp", "pia", "prudp"]
    assert [f["_ws.col.Protocol"] for f in frames] == [["PRUDP"], ["Pia"], ["PRUDP"]]
    header = rows[1]["header"]
    assert frames[1]["pia.connection_id"] == [str(header["connection_id"])] == ["86"]
    assert frames[1]["pia.packet_id"] == [str(header["packet_id"])] == ["971"]
    for row, frame in zip((rows[0], rows[2]), (frames[0], frames[2]), strict=True):
        (p,) = row["prudp"]
        assert frame["prudp.type"] == ["0"] and p["type"] == "SYN"
        verdict = {True: ["ok"], False: ["failed"], None: []}[p["checksum_ok"]]
        assert frame.get("prudp.checksum.status", []) == verdict == (["ok"] if key else [])


# NEX v0 DATA with the 4-byte checksum (spec prudp.md §8.2: the reference client's checksum_version 0, key "12345678";
# §2.4), then its 1-byte form: pianode decode reads both (protocols/prudp/codec.py tries the 4-byte sum when the
# 1-byte one does not frame or verify), and so must the dissector, by its heuristic and under a pianode export.
NEX_V0_4BYTE = bytes.fromhex("afa1e2005a69c325b3020000050067e228b77c8dc58909")
NEX_V0_1BYTE = bytes.fromhex("afa1e2005a69c325b3020000050067e228b77ce3")


@pytest.mark.parametrize("export", [False, True])
def test_v0_with_the_four_byte_checksum_reads_in_both_tools(tmp_path: Path, export: bool) -> None:
    path = tmp_path / "v0.pcap"
    with path.open("wb") as f:
        w = PcapWriter(f)
        for data in (NEX_V0_4BYTE, NEX_V0_1BYTE):
            w.write_udp(data, "10.0.0.2:50000", "10.0.0.1:60000")
    args = ("--prudp-variant", "nintendo-v0", "--access-key", "12345678")
    rows = decode_jsonl(str(path), *args)
    assert [[(p["type"], p["sequence_id"], p["payload"], p["checksum_ok"]) for p in r["prudp"]] for r in rows] == [
        [("DATA", 2, "67e228b77c", True)]
    ] * 2
    if export:
        out = tmp_path / "v0.pcapng"
        assert pianode("decode", str(path), *args, "--decrypted-pcap", str(out))[0] == 0
        path = out
    frames = dissect(path, "prudp.type", "prudp.sequence_id", "prudp.payload", "prudp.checksum",
                     "prudp.checksum.status", prefs=("prudp.access_key:12345678",))
    got = [(f.get("prudp.type"), f.get("prudp.sequence_id"), f.get("prudp.payload"), f.get("prudp.checksum.status"))
           for f in frames]
    assert got == [(["2"], ["2"], ["67e228b77c"], ["ok"])] * 2
    assert [int(f["prudp.checksum"][0], 16) for f in frames] == [0x0989C58D, 0xE3]


# Spec prudp.md §8.2: v1 SYN+ACK and CONNECT (key "3d37fbdb").  A NEX server takes v0 and v1 on one socket and tells
# them apart by "EA D0 01" (§2.3); pianode decode's nintendo-v0 reads such a datagram as v1, and its export must
# not make the dissector read it as v0.
V1_SYN_ACK = bytes.fromhex(
    "ead0011b0000a1af900000000000ca17b003795481e290e73dcaccc1169b0004040100000110000102030405060708090a0b0c0d0e0f040100"
)
V1_CONNECT = bytes.fromhex(
    "ead0011f0000afa1e1005a000100c22c56fad54cbb9bbbb78032b46470d90004040100000110101112131415161718191a1b1c1d1e1f"
    "03023412040100"
)


def test_v1_exported_under_the_v0_variant_is_read_as_v1(tmp_path: Path) -> None:
    path = tmp_path / "v1.pcap"
    with path.open("wb") as f:
        w = PcapWriter(f)
        w.write_udp(V1_SYN_ACK, "10.0.0.1:60000", "10.0.0.2:50000")
        w.write_udp(V1_CONNECT, "10.0.0.2:50000", "10.0.0.1:60000")
    args = ("--prudp-variant", "nintendo-v0", "--access-key", "3d37fbdb")
    rows = decode_jsonl(str(path), *args)
    assert [(p["type"], p["sequence_id"], p["session_id"]) for r in rows for p in r["prudp"]] == [
        ("SYN", 0, 0), ("CONNECT", 1, 0x5A)]
    out = tmp_path / "v1.pcapng"
    assert pianode("decode", str(path), *args, "--decrypted-pcap", str(out))[0] == 0
    frames = dissect(out, "prudp.version", "prudp.type", "prudp.sequence_id", "prudp.session_id")
    assert [(f["prudp.version"], f["prudp.type"], f["prudp.sequence_id"], f["prudp.session_id"]) for f in frames] == [
        (["v1"], ["0"], ["0"], ["0x00"]), (["v1"], ["1"], ["1"], ["0x5a"])]


def test_v1_signature_verdicts_of_the_export_are_shown(tmp_path: Path) -> None:
    """pianode decode checks the signatures the access key alone gives (a SYN's, spec prudp.md §2.6); the dissector,
    with no MD5 of its own, shows that verdict from the export, and none where decode had none."""
    path = tmp_path / "v1.pcap"
    with path.open("wb") as f:
        w = PcapWriter(f)
        w.write_udp(V1_SYN_ACK, "10.0.0.1:60000", "10.0.0.2:50000")
        w.write_udp(V1_CONNECT, "10.0.0.2:50000", "10.0.0.1:60000")
        w.write_udp(V1_SYN_ACK[:20] + bytes([V1_SYN_ACK[20] ^ 1]) + V1_SYN_ACK[21:], "10.0.0.1:60000", "10.0.0.2:50000")
    args = ("--prudp-variant", "nintendo-v1", "--access-key", "3d37fbdb")
    rows = decode_jsonl(str(path), *args)
    assert [[p["signature_ok"] for p in r["prudp"]] for r in rows] == [[True], [None], [False]]
    out = tmp_path / "v1.pcapng"
    assert pianode("decode", str(path), *args, "--decrypted-pcap", str(out))[0] == 0
    frames = dissect(out, "prudp.signature.status")
    assert [f.get("prudp.signature.status") for f in frames] == [["ok"], None, ["failed"]]
