"""Capture reading (pcap, pcapng, JSON Lines, hex lines) and the pcap writer.

Frames for the link-type tests are built here by hand with ``struct`` (not with
the writer under test) and cross-checked with tshark, which CI installs.
"""

from __future__ import annotations

import contextlib
import datetime
import io
import ipaddress
import json
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from internet_checksum import internet_checksum

from pianode.capture.pcap import (
    CaptureError,
    CaptureStats,
    Datagram,
    PcapWriter,
    _frame_to_udp,
    _Skip,
    format_endpoint,
    open_capture,
    parse_endpoint,
)

MAGIC = bytes.fromhex("32ab9864")


def tshark() -> str:
    path = shutil.which("tshark")
    if path is None:
        pytest.fail("tshark is not installed (CI installs it; apt-get install tshark)")
    return path


def tshark_fields(path: Path, *fields: str, prefs: tuple[str, ...] = ()) -> list[list[str]]:
    cmd = [tshark(), "-r", str(path), "-T", "fields"]
    for p in prefs:
        cmd += ["-o", p]
    for f in fields:
        cmd += ["-e", f]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=60).stdout
    return [line.split("\t") for line in out.splitlines()]


# --------------------------------------------------------------------------
# Hand-built frames (independent of the writer)


def ipv4_udp(src: str, sport: int, dst: str, dport: int, payload: bytes, *, frag: int = 0x4000) -> bytes:
    s, d = ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed
    ulen = 8 + len(payload)
    pseudo = s + d + bytes([0, 17]) + ulen.to_bytes(2, "big")
    udp_c = internet_checksum(pseudo + struct.pack(">HHHH", sport, dport, ulen, 0) + payload)
    udp = struct.pack(">HHHH", sport, dport, ulen, udp_c or 0xFFFF) + payload
    ip = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + ulen, 7, frag, 64, 17, 0, s, d)
    ip = ip[:10] + internet_checksum(ip).to_bytes(2, "big") + ip[12:]
    return ip + udp


def ipv6_udp(src: str, sport: int, dst: str, dport: int, payload: bytes, *, ext: bool = False) -> bytes:
    s, d = ipaddress.IPv6Address(src).packed, ipaddress.IPv6Address(dst).packed
    ulen = 8 + len(payload)
    pseudo = s + d + ulen.to_bytes(4, "big") + b"\0\0\0\x11"
    udp_c = internet_checksum(pseudo + struct.pack(">HHHH", sport, dport, ulen, 0) + payload)
    udp = struct.pack(">HHHH", sport, dport, ulen, udp_c or 0xFFFF) + payload
    if ext:  # one 8-byte hop-by-hop header (PadN option) before UDP
        hbh = bytes([17, 0, 1, 4, 0, 0, 0, 0])
        return struct.pack(">IHBB", 6 << 28, len(hbh) + ulen, 0, 64) + s + d + hbh + udp
    return struct.pack(">IHBB", 6 << 28, ulen, 17, 64) + s + d + udp


def ether(etype: int, body: bytes, vlan: bool = False) -> bytes:
    head = bytes.fromhex("020000000002" "020000000001")
    if vlan:
        head += struct.pack(">HH", 0x8100, 42)
    return head + struct.pack(">H", etype) + body


def sll(etype: int, body: bytes) -> bytes:
    # packet type 0 (to us), ARPHRD_ETHER, address length 6, address (8 bytes), protocol.
    return struct.pack(">HHH8sH", 0, 1, 6, bytes.fromhex("0200000000010000"), etype) + body


def sll2(etype: int, body: bytes) -> bytes:
    # protocol, reserved, interface index, ARPHRD_ETHER, packet type, address length, address.
    return struct.pack(">HHIHBB8s", etype, 0, 1, 1, 0, 6, bytes.fromhex("0200000000010000")) + body


STA_MAC = bytes.fromhex("02aabbccdd01")
PEER_MAC = bytes.fromhex("02aabbccdd02")
AP_MAC = bytes.fromhex("02aabbccdd00")


def wlan(etype: int, body: bytes, *, from_ds: bool = False, protected: bool = False, qos: bool = True) -> bytes:
    """A QoS data frame station→AP (ToDS) or AP→station relaying PEER (FromDS), with LLC/SNAP."""
    fc0 = 0x88 if qos else 0x08
    fc1 = (0x02 if from_ds else 0x01) | (0x40 if protected else 0)
    # FromDS: addr1 = receiver, addr2 = AP, addr3 = original source.
    # ToDS: addr1 = AP (BSSID), addr2 = source, addr3 = destination.
    addrs = STA_MAC + AP_MAC + PEER_MAC if from_ds else AP_MAC + STA_MAC + PEER_MAC
    head = bytes([fc0, fc1]) + b"\0\0" + addrs + b"\x10\x00" + (b"\0\0" if qos else b"")
    return head + bytes.fromhex("aaaa03000000") + struct.pack(">H", etype) + body


def radiotap(frame: bytes) -> bytes:
    return bytes([0, 0, 8, 0, 0, 0, 0, 0]) + frame  # no radiotap fields present


def pcap_file(link_type: int, frames: list[tuple[float, bytes]], *, big: bool = False, nano: bool = False) -> bytes:
    o = ">" if big else "<"
    magic = 0xA1B23C4D if nano else 0xA1B2C3D4
    out = struct.pack(o + "IHHiIII", magic, 2, 4, 0, 0, 65535, link_type)
    for t, fr in frames:
        sec = int(t)
        frac = round((t - sec) * (1e9 if nano else 1e6))
        out += struct.pack(o + "IIII", sec, frac, len(fr), len(fr)) + fr
    return out


def _block(btype: int, body: bytes, o: str = "<") -> bytes:
    body += b"\0" * (-len(body) % 4)
    n = len(body) + 12
    return struct.pack(o + "II", btype, n) + body + struct.pack(o + "I", n)


def pcapng_section(interfaces: list[tuple[int, int | None]], packets: list[tuple[int, int, bytes]],
                   *, big: bool = False, simple: bytes | None = None) -> bytes:
    """One section; interfaces are (link type, if_tsresol or None); packets (iface, ticks, frame)."""
    o = ">" if big else "<"
    out = _block(0x0A0D0D0A, struct.pack(o + "IHHq", 0x1A2B3C4D, 1, 0, -1), o)
    for lt, res in interfaces:
        opts = b""
        if res is not None:
            opts = struct.pack(o + "HH", 9, 1) + bytes([res, 0, 0, 0]) + struct.pack(o + "HH", 0, 0)
        out += _block(1, struct.pack(o + "HHI", lt, 0, 65535) + opts, o)
    out += _block(4, struct.pack(o + "HH", 0, 0), o)  # name resolution block: skipped
    for iface, ticks, fr in packets:
        out += _block(6, struct.pack(o + "IIIII", iface, ticks >> 32, ticks & 0xFFFFFFFF, len(fr), len(fr)) + fr, o)
    out += _block(5, struct.pack(o + "III", 0, 0, 0), o)  # interface statistics: skipped
    if simple is not None:
        out += _block(3, struct.pack(o + "I", len(simple)) + simple, o)
    return out


def read(data: bytes) -> tuple[list[Datagram], CaptureStats]:
    cap = open_capture(io.BytesIO(data))
    return list(cap), cap.stats


# --------------------------------------------------------------------------
# The real capture


def test_ndpi_frame_and_udp_counts(captures: Path) -> None:
    expected = json.loads((captures / "nDPI-nintendo.expected.json").read_text())
    counts = expected["counts"]
    with open_capture(captures / "nDPI-nintendo.pcap") as cap:
        datagrams = list(cap)
    assert cap.format == "pcap"
    assert cap.stats.link_types == [expected["capture"]["linktype"]]
    assert cap.stats.frames == counts["frames"]
    assert cap.stats.udp == counts["udp_datagrams"] == len(datagrams)
    assert cap.stats.skipped == {"tcp": counts["ipv4_tcp"], "icmp": counts["ipv4_icmp"], "arp": counts["arp"]}
    assert cap.stats.problem is None
    assert [d.index for d in datagrams] == list(range(1, len(datagrams) + 1))

    pia = [d for d in datagrams if d.data[:4] == MAGIC]
    assert len(pia) == counts["pia"]
    cols = expected["packets_columns"]
    rows = [dict(zip(cols, r, strict=True)) for r in expected["packets"]]
    assert [(d.frame, len(d.data)) for d in pia] == [(r["frame"], r["udp_payload_length"]) for r in rows]
    assert sum(d.data[4] == 2 for d in pia) == counts["pia_encrypted"]

    flows = {f["flow"]: (f["src"], f["dst"]) for f in expected["flows"]}
    assert [(d.src, d.dst) for d in pia] == [flows[r["flow"]] for r in rows]
    by_frame = {d.frame: d for d in datagrams}
    for other in expected["non_pia_udp"]:
        d = by_frame[other["frame"]]
        assert (d.src, d.dst, len(d.data)) == (other["src"], other["dst"], other["length"])
        if other["hex"] is not None:
            assert d.data.hex() == other["hex"]

    def utc(t: float) -> str:
        return datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    assert utc(datagrams[0].time or 0) == expected["capture"]["first_utc"]
    assert utc(datagrams[-1].time or 0) == expected["capture"]["last_utc"]


def test_ndpi_payloads_match_tshark(captures: Path) -> None:
    rows = tshark_fields(captures / "nDPI-nintendo.pcap", "frame.number", "udp.payload", prefs=())
    rows = [r for r in rows if r[1] or False]
    with open_capture(captures / "nDPI-nintendo.pcap") as cap:
        ours = {d.frame: d.data.hex() for d in cap}
    theirs = {int(r[0]): r[1].replace(":", "") for r in rows}
    assert theirs == {f: h for f, h in ours.items() if h}


def test_mgba_jsonl_without_addresses(captures: Path) -> None:
    lines = (captures / "mgba-uds-frames.jsonl").read_text().splitlines()
    with open_capture(captures / "mgba-uds-frames.jsonl") as cap:
        datagrams = list(cap)
    assert cap.format == "jsonl"
    assert len(datagrams) == len(lines) == 18
    for d, line in zip(datagrams, lines, strict=True):
        obj = json.loads(line)
        assert d.data == bytes.fromhex(obj["hex"])
        assert d.time == obj["time"]
        assert d.name == obj["name"]
        assert (d.src, d.dst, d.error) == (None, None, None)


# --------------------------------------------------------------------------
# Link types and containers


PAYLOAD_A = MAGIC + bytes(range(40))
PAYLOAD_B = b"\x00" + bytes(range(255))
V4 = ipv4_udp("192.168.1.10", 49152, "192.168.1.255", 30000, PAYLOAD_A)
V6 = ipv6_udp("fe80::1", 49153, "ff02::1", 35000, PAYLOAD_B, ext=True)
EXPECTED = [
    ("192.168.1.10:49152", "192.168.1.255:30000", PAYLOAD_A),
    ("[fe80::1]:49153", "[ff02::1]:35000", PAYLOAD_B),
]


@pytest.mark.parametrize(
    ("link_type", "frames"),
    [
        (1, [ether(0x0800, V4), ether(0x86DD, V6, vlan=True)]),
        (113, [sll(0x0800, V4), sll(0x86DD, V6)]),
        (276, [sll2(0x0800, V4), sll2(0x86DD, V6)]),
        (101, [V4, V6]),
        (0, [struct.pack("<I", 2) + V4, struct.pack("<I", 24) + V6]),
        (105, [wlan(0x0800, V4), wlan(0x86DD, V6, from_ds=True, qos=False)]),
        (127, [radiotap(wlan(0x0800, V4)), radiotap(wlan(0x86DD, V6, from_ds=True))]),
    ],
    ids=["ethernet", "linux-sll", "linux-sll2", "raw-ip", "bsd-null", "ieee802.11", "radiotap"],
)
def test_link_types_in_pcap_and_pcapng(tmp_path: Path, link_type: int, frames: list[bytes]) -> None:
    pcap = pcap_file(link_type, [(10.25, frames[0]), (11.5, frames[1])], nano=True)
    ng = pcapng_section([(link_type, None)], [(0, 10_250_000, frames[0]), (0, 11_500_000, frames[1])])
    for fmt, blob in (("pcap", pcap), ("pcapng", ng)):
        got, stats = read(blob)
        assert [(d.src, d.dst, d.data) for d in got] == EXPECTED, fmt
        assert [d.time for d in got] == [10.25, 11.5]
        assert [d.frame for d in got] == [1, 2]
        assert stats.format == fmt and stats.link_types == [link_type]
        # tshark reads the same bytes the same way.
        path = tmp_path / f"f.{fmt}"
        path.write_bytes(blob)
        rows = tshark_fields(path, "udp.srcport", "udp.dstport", "udp.payload")
        assert [(int(r[0]), int(r[1]), bytes.fromhex(r[2].replace(":", ""))) for r in rows] == [
            (int(s.rsplit(":", 1)[1]), int(d.rsplit(":", 1)[1]), p) for s, d, p in EXPECTED
        ]


def test_source_macs_from_the_link_layer() -> None:
    cases = [
        (1, ether(0x0800, V4), "02:00:00:00:00:01"),
        (113, sll(0x0800, V4), "02:00:00:00:00:01"),
        (276, sll2(0x0800, V4), "02:00:00:00:00:01"),
        (101, V4, None),
        (105, wlan(0x0800, V4), "02:aa:bb:cc:dd:01"),  # ToDS: the source is address 2
        (127, radiotap(wlan(0x0800, V4, from_ds=True)), "02:aa:bb:cc:dd:02"),  # FromDS: address 3
    ]
    for link_type, frame, mac in cases:
        got, _ = read(pcap_file(link_type, [(0.0, frame)]))
        assert [(d.data, d.src_mac) for d in got] == [(PAYLOAD_A, mac)], link_type


def test_802_11_frames_without_udp_are_counted() -> None:
    frames = [
        wlan(0x0800, V4, protected=True),
        bytes([0x80, 0x00]) + bytes(22),  # beacon (management)
        bytes([0xD4, 0x00]) + bytes(22),  # ACK (control)
        bytes([0x48, 0x01]) + bytes(22),  # null data
        wlan(0x0800, V4)[:26] + bytes.fromhex("424203000000"),  # not SNAP
        wlan(0x0800, V4),
    ]
    got, stats = read(pcap_file(105, [(0.0, f) for f in frames]))
    assert [d.frame for d in got] == [6]
    assert stats.skipped == {
        "802.11-protected": 1, "802.11-management": 1, "802.11-control": 1, "802.11-null-data": 1,
        "802.11-non-snap": 1,
    }


def test_pcap_byte_orders_and_resolutions() -> None:
    frames = [(1.5, ether(0x0800, V4))]
    for big in (False, True):
        for nano in (False, True):
            got, _ = read(pcap_file(1, frames, big=big, nano=nano))
            assert [(d.time, d.data) for d in got] == [(1.5, PAYLOAD_A)]


def test_pcapng_sections_interfaces_resolution_and_simple_blocks() -> None:
    sec1 = pcapng_section(
        [(113, 9), (1, 0x80 | 10)],  # nanoseconds; 2^-10 s
        [(1, 3 * 1024, ether(0x0800, V4)), (0, 2_500_000_000, sll(0x86DD, V6))],
        big=True,
    )
    # A second section (little-endian) restarts interface numbering; its simple
    # packet block has no timestamp.
    sec2 = pcapng_section([(101, None)], [(0, 7_000_000, V6)], simple=V4)
    got, stats = read(sec1 + sec2)
    assert [(d.time, d.src, d.data) for d in got] == [
        (3.0, EXPECTED[0][0], PAYLOAD_A),
        (2.5, EXPECTED[1][0], PAYLOAD_B),
        (7.0, EXPECTED[1][0], PAYLOAD_B),
        (0.0, EXPECTED[0][0], PAYLOAD_A),
    ]
    assert stats.link_types == [113, 1, 101]
    assert stats.frames == 4 and stats.problem is None


def test_non_udp_frames_are_counted_not_yielded() -> None:
    tcp = bytearray(ipv4_udp("10.0.0.1", 1, "10.0.0.2", 2, b"x"))
    tcp[9] = 6
    icmp6 = bytearray(ipv6_udp("::1", 1, "::2", 2, b"x"))
    icmp6[6] = 58
    first_frag = ipv4_udp("10.0.0.1", 1, "10.0.0.2", 2, b"y", frag=0x2000)  # more fragments
    later_frag = ipv4_udp("10.0.0.1", 1, "10.0.0.2", 2, b"y", frag=0x0010)  # offset 128
    frames = [
        ether(0x0806, bytes(28)),
        ether(0x0800, bytes(tcp)),
        ether(0x86DD, bytes(icmp6)),
        ether(0x0800, first_frag),
        ether(0x0800, later_frag),
        ether(0x88CC, bytes(20)),
        ether(0x0800, V4),
        b"\x01\x02",
    ]
    got, stats = read(pcap_file(1, [(0.0, f) for f in frames]))
    assert [(d.frame, d.data) for d in got] == [(7, PAYLOAD_A)]
    assert stats.frames == 8 and stats.udp == 1
    assert stats.skipped == {
        "arp": 1, "tcp": 1, "icmpv6": 1, "ip-fragment": 2, "lldp": 1, "short-frame": 1,
    }


def test_a_local_experimental_ethertype_frame_is_yielded_whole_with_its_link_addresses() -> None:
    """Recordings carry the simulated LDN link's frames as Ethernet frames of EtherType 0x88b5: the reader reports
    them (a Datagram with the EtherType and both MACs, no IP endpoints), neither dropping them nor failing; other
    non-IP frames stay counted as skipped."""
    link_body = b"PNLD\x01\x04" + bytes(5)
    frames = [
        ether(0x0800, V4),
        ether(0x88B5, link_body),
        ether(0x0806, bytes(28)),
        ether(0x88B6, b"x", vlan=True),
        ether(0x0800, V4),
    ]
    for data in (pcap_file(1, [(1.5, f) for f in frames]),
                 pcapng_section([(1, None)], [(0, 1_500_000, f) for f in frames])):
        got, stats = read(data)
        assert [d.frame for d in got] == [1, 2, 4, 5] and [d.index for d in got] == [1, 2, 3, 4]
        link = got[1]
        assert (link.ethertype, link.data, link.src, link.dst, link.error) == (0x88B5, link_body, None, None, None)
        assert (link.src_mac, link.dst_mac, link.time) == ("02:00:00:00:00:01", "02:00:00:00:00:02", 1.5)
        assert (got[2].ethertype, got[2].data) == (0x88B6, b"x")
        assert got[0].ethertype is None and got[0].dst_mac is None and got[3].data == PAYLOAD_A
        assert stats.udp == 2 and stats.link == {0x88B5: 1, 0x88B6: 1} and stats.skipped == {"arp": 1}
    # The writer's link frames read back the same, and write_all copies them.
    out = io.BytesIO()
    w = PcapWriter(out)
    w.write_udp(PAYLOAD_A, "10.0.0.1:1", "10.0.0.2:2", 1.0)
    w.write_link(link_body, bytes.fromhex("0200c0a80001"), b"\xff" * 6, 2.0)
    back, _ = read(out.getvalue())
    assert [(d.ethertype, d.src_mac, d.dst_mac, d.data) for d in back][1] == (
        0x88B5, "02:00:c0:a8:00:01", "ff:ff:ff:ff:ff:ff", link_body)
    again = io.BytesIO()
    assert PcapWriter(again).write_all(back) == 2
    assert again.getvalue() == out.getvalue()
    with pytest.raises(ValueError):
        w.write_link(b"", b"\x02", b"\xff" * 6)


def test_ethernet_padding_is_not_payload() -> None:
    small = ipv4_udp("10.0.0.1", 5, "10.0.0.2", 6, b"ab")
    frame = ether(0x0800, small) + bytes(60 - 14 - len(small))  # padded to the 60-byte minimum
    got, _ = read(pcap_file(1, [(0.0, frame)]))
    assert [d.data for d in got] == [b"ab"]


def test_snaplen_cut_datagram_is_reported_not_dropped() -> None:
    frame = ether(0x0800, V4)[:-10]
    got, stats = read(pcap_file(1, [(0.0, frame), (1.0, ether(0x0800, V4))]))
    assert len(got) == 2 == stats.udp
    assert got[0].error == f"captured only {len(PAYLOAD_A) - 10} of {len(PAYLOAD_A)} UDP payload bytes (snap length)"
    assert got[0].data == PAYLOAD_A[:-10]
    assert got[1].error is None and got[1].data == PAYLOAD_A


def test_file_cut_mid_record_keeps_what_came_before() -> None:
    blob = pcap_file(1, [(0.0, ether(0x0800, V4)), (1.0, ether(0x0800, V4))])
    got, stats = read(blob[:-5])
    assert len(got) == 1
    assert stats.problem is not None and "record 2 is cut short" in stats.problem
    got, stats = read(pcapng_section([(1, None)], [(0, 1, ether(0x0800, V4))])[:-30])  # into the packet block
    assert got == [] and stats.problem == "pcapng block is cut short"


# --------------------------------------------------------------------------
# Text input


def test_jsonl_and_hex_lines_mixed_with_bad_records() -> None:
    text = "\n".join(
        [
            "# a comment",
            json.dumps({"hex": "32ab9864", "src": "10.0.0.1:49152", "dst": "[::1]:5", "time": 1.25}),
            "",
            "32 ab 98 64 01",
            "32:ab:98:64:02",
            "{not json",
            json.dumps({"hex": "zz", "src": "nowhere"}),
            json.dumps([1, 2]),
            json.dumps({"hex": "00", "time": "soon"}),
            "0x0102",
            json.dumps({"hex": "01", "src_mac": "02-AA-bb-cc-dd-01"}),
            json.dumps({"hex": "02", "src_mac": "02:aa"}),
            "[" * 100_000,
            '{"hex": "00", "n": 1' + "0" * 5000 + "}",
        ]
    ).encode()
    got, stats = read(text)
    assert stats.format == "jsonl"
    assert [d.index for d in got] == list(range(1, 13))
    assert [d.frame for d in got] == [2, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
    assert (got[0].data, got[0].src, got[0].dst, got[0].time) == (MAGIC, "10.0.0.1:49152", "[::1]:5", 1.25)
    assert got[1].data == MAGIC + b"\x01" and got[2].data == MAGIC + b"\x02"
    assert got[3].error is not None and got[3].error.startswith("line 6: not JSON")
    assert got[4].error == 'line 7: "hex" is not hex'
    assert got[4].warning == "line 7: \"src\" ignored: bad address 'nowhere' (expected ip:port)"
    assert got[5].error == "line 8: not a JSON object"
    assert (got[6].data, got[6].error, got[6].time) == (b"\x00", None, None)
    assert got[6].warning == 'line 9: "time" ignored: not a number or ISO 8601 time'
    assert got[7].data == b"\x01\x02" and got[7].error is None
    assert (got[8].src_mac, got[8].error) == ("02:aa:bb:cc:dd:01", None)
    assert (got[9].src_mac, got[9].error) == (None, None)
    assert got[9].warning == 'line 12: "src_mac" ignored: not a MAC address'
    assert got[10].error is not None and got[10].error.startswith("line 13: not JSON")  # too deep
    assert got[11].error is not None and got[11].error.startswith("line 14: not JSON")  # integer too long
    assert all(d.error is None and d.warning is None for d in got[:3])


def test_jsonl_field_aliases_and_time_forms() -> None:
    lines = [
        {"data": "01", "time": "1.5"},
        {"payload": "02", "time": "2017-07-22T13:48:40.644357Z"},
        {"hex": "03", "time": "2017-07-22T13:48:40"},
        {"hex": "04", "time": float("inf")},
    ]
    got, _ = read("\n".join(json.dumps(x) for x in lines).encode())
    assert [d.data for d in got] == [b"\x01", b"\x02", b"\x03", b"\x04"]
    assert [d.time for d in got] == [1.5, 1500731320.644357, 1500731320.0, None]
    assert [d.warning is None for d in got] == [True, True, True, False]


def test_hex_lines_from_a_stream_and_stdin_name(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = io.TextIOWrapper(io.BytesIO(b"32ab9864\nff\n"))
    monkeypatch.setattr("sys.stdin", fake)
    cap = open_capture("-")
    assert cap.name == "<stdin>" and cap.format == "hex"
    assert [d.data for d in cap] == [MAGIC, b"\xff"]


def test_unreadable_inputs_raise_one_line_capture_errors(tmp_path: Path) -> None:
    with pytest.raises(CaptureError, match=r"cannot open .*missing\.pcap"):
        open_capture(tmp_path / "missing.pcap")
    with pytest.raises(CaptureError, match="not a pcap, pcapng, JSON Lines or hex-lines file"):
        open_capture(io.BytesIO(b"\x7fELF\x02\x01\x01 binary junk"))
    with pytest.raises(CaptureError, match="not a pcap"):
        open_capture(io.BytesIO(b"hello world\n"))
    cap = open_capture(io.BytesIO(b"\xd4\xc3\xb2\xa1\x02\x00"))
    with pytest.raises(CaptureError, match="pcap file header is cut short"):
        list(cap)
    # An empty file is a readable capture with no datagrams.
    assert read(b"")[0] == []


# --------------------------------------------------------------------------
# Writer


def test_writer_frames_read_back_and_pass_tshark_checksums(tmp_path: Path) -> None:
    sent = [
        (b"", "10.0.0.1:1", "10.0.0.2:2", 0.0),
        (b"\x01", "192.168.178.215:49154", "192.168.178.255:30000", 1.000001),
        (PAYLOAD_B * 5, "[2001:db8::1]:40000", "[2001:db8::2]:40001", 2.5),
        (MAGIC + bytes(1400), ("127.0.0.3", 49152), ("127.0.0.4", 49153), 1_700_000_000.123456),
    ]
    path = tmp_path / "w.pcap"
    with path.open("wb") as f:
        w = PcapWriter(f)
        for payload, src, dst, t in sent:
            w.write_udp(payload, src, dst, time=t)
    with open_capture(path) as cap:
        got = list(cap)
    norm = [(p, s if isinstance(s, str) else f"{s[0]}:{s[1]}", d if isinstance(d, str) else f"{d[0]}:{d[1]}", t)
            for p, s, d, t in sent]
    assert [(d.data, d.src, d.dst, d.time) for d in got] == norm
    # Link-layer sources are 02:00 + the last four address bytes (pianode/ldn/network.py relies on this rule).
    assert [d.src_mac for d in got] == ["02:00:0a:00:00:01", "02:00:c0:a8:b2:d7", "02:00:00:00:00:01",
                                        "02:00:7f:00:00:03"]
    rows = tshark_fields(
        path, "frame.time_epoch", "udp.length", "ip.checksum.status", "udp.checksum.status", "udp.payload",
        prefs=("udp.check_checksum:TRUE", "ip.check_checksum:TRUE"),
    )
    assert len(rows) == len(sent)
    for row, (payload, _s, _d, t) in zip(rows, sent, strict=True):
        assert float(row[0]) == pytest.approx(t, abs=1e-6)
        assert int(row[1]) == 8 + len(payload)
        assert row[2] in ("1", "")  # "1" = good (IPv6 has no header checksum)
        assert row[3] == "1"
        assert bytes.fromhex(row[4].replace(":", "")) == payload


def test_writer_refuses_what_cannot_be_written() -> None:
    w = PcapWriter(io.BytesIO())
    with pytest.raises(ValueError, match="address families differ"):
        w.write_udp(b"", "10.0.0.1:1", "[::1]:1")
    with pytest.raises(ValueError, match="has no port"):
        w.write_udp(b"", "10.0.0.1", "10.0.0.2:1")
    with pytest.raises(ValueError, match="does not fit"):
        w.write_udp(bytes(65530), "10.0.0.1:1", "10.0.0.2:1")


def test_write_all_round_trips_a_capture(captures: Path) -> None:
    buf = io.BytesIO()
    with open_capture(captures / "nDPI-nintendo.pcap") as cap:
        original = list(cap)
    assert PcapWriter(buf).write_all(original) == len(original)
    again, _ = read(buf.getvalue())
    assert [(d.data, d.src, d.dst, d.time) for d in again] == [(d.data, d.src, d.dst, d.time) for d in original]


# --------------------------------------------------------------------------
# Endpoints and robustness


def test_endpoints() -> None:
    assert parse_endpoint("10.0.0.1:80") == ("10.0.0.1", 80)
    assert parse_endpoint("[FE80::1]:5") == ("fe80::1", 5)
    assert parse_endpoint("fe80::1") == ("fe80::1", None)
    assert parse_endpoint("10.0.0.1") == ("10.0.0.1", None)
    assert format_endpoint("fe80::1", 5) == "[fe80::1]:5"
    for bad in ("10.0.0.1:99999", "host:80", "[::1]x", "10.0.0.1:"):
        with pytest.raises(ValueError, match="bad"):
            parse_endpoint(bad)


@settings(max_examples=400, deadline=None)
@given(link_type=st.sampled_from([0, 1, 101, 108, 113, 276, 228, 229, 999]), frame=st.binary(max_size=120))
def test_any_frame_gives_udp_or_a_skip(link_type: int, frame: bytes) -> None:
    with contextlib.suppress(_Skip):
        _frame_to_udp(link_type, frame)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300), st.sampled_from(["pcap", "pcapng", "text"]))
def test_any_bytes_give_datagrams_or_capture_error(tail: bytes, kind: str) -> None:
    head = {
        "pcap": pcap_file(1, []),
        "pcapng": pcapng_section([(1, None)], []),
        "text": b"",
    }[kind]
    try:
        got, _ = read(head + tail)
    except CaptureError:
        return
    assert all(isinstance(d, Datagram) for d in got)
