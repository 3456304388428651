"""IP fragments in captures: reassembled as tshark does (the datagram in its last fragment's frame), in bounded
memory; and the UDP/IP length fields read the way Wireshark reads them.

Frames are built by hand with ``struct`` (not with the writer under test) and cross-checked with tshark.
"""

from __future__ import annotations

import io
import ipaddress
import shutil
import struct
import subprocess
import sys
from pathlib import Path

import pytest
from internet_checksum import internet_checksum

from pianode.capture.decode import Decoder
from pianode.capture.fragments import MAX_HELD, MAX_PENDING, Fragment, Reassembler
from pianode.capture.pcap import open_capture
from pianode.capture.session_file import load_session


def udp_segment(src: bytes, dst: bytes, sport: int, dport: int, payload: bytes) -> bytes:
    ulen = 8 + len(payload)
    pseudo = src + dst + (bytes([0, 17]) + ulen.to_bytes(2, "big") if len(src) == 4 else ulen.to_bytes(4, "big") + b"\0\0\0\x11")
    c = internet_checksum(pseudo + struct.pack(">HHHH", sport, dport, ulen, 0) + payload)
    return struct.pack(">HHHH", sport, dport, ulen, c or 0xFFFF) + payload


def ipv4(src: bytes, dst: bytes, body: bytes, *, ident: int = 0x1234, frag: int = 0, total: int | None = None) -> bytes:
    hdr = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + len(body) if total is None else total, ident, frag, 64, 17, 0,
                      src, dst)
    return hdr[:10] + internet_checksum(hdr).to_bytes(2, "big") + hdr[12:] + body


def ipv4_fragments(src: str, dst: str, segment: bytes, size: int, ident: int = 0x1234) -> list[bytes]:
    s, d = ipaddress.IPv4Address(src).packed, ipaddress.IPv4Address(dst).packed
    out = []
    for off in range(0, len(segment), size):
        more = 0x2000 if off + size < len(segment) else 0
        out.append(ipv4(s, d, segment[off : off + size], ident=ident, frag=more | off // 8))
    return out


def ipv6_fragments(src: str, dst: str, fragmentable: bytes, size: int, first_next: int) -> list[bytes]:
    s, d = ipaddress.IPv6Address(src).packed, ipaddress.IPv6Address(dst).packed
    out = []
    for off in range(0, len(fragmentable), size):
        more = 1 if off + size < len(fragmentable) else 0
        piece = fragmentable[off : off + size]
        frag_hdr = struct.pack(">BBHI", first_next, 0, off | more, 0xC0FFEE)
        out.append(struct.pack(">IHBB", 6 << 28, len(frag_hdr) + len(piece), 44, 64) + s + d + frag_hdr + piece)
    return out


def ether(etype: int, body: bytes) -> bytes:
    return bytes.fromhex("020000000002020000000001") + struct.pack(">H", etype) + body


def pcap_file(frames: list[bytes]) -> bytes:
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 65535, 1)
    for i, fr in enumerate(frames):
        out += struct.pack("<IIII", 1000 + i, 0, len(fr), len(fr)) + fr
    return out


def read(data: bytes) -> tuple[list, object]:
    cap = open_capture(io.BytesIO(data))
    return list(cap), cap.stats


def tshark_udp(path: Path) -> list[tuple[int, bytes]]:
    exe = shutil.which("tshark")
    if exe is None:
        pytest.fail("tshark is not installed (CI installs it; apt-get install tshark)")
    out = subprocess.run([exe, "-r", str(path), "-T", "fields", "-e", "frame.number", "-e", "udp.payload", "-Y", "udp"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    return [(int(n), bytes.fromhex(p)) for n, p in (line.split("\t") for line in out.splitlines())]


PAYLOAD = bytes(range(256)) * 12  # 3,072 bytes: three 1,480-byte fragments


def test_ipv4_fragments_out_of_order_are_reassembled_in_the_last_ones_frame_as_tshark_does(tmp_path: Path) -> None:
    seg = udp_segment(bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]), 49152, 49153, PAYLOAD)
    f1, f2, f3 = ipv4_fragments("10.0.0.1", "10.0.0.2", seg, 1480)
    other = ipv4(bytes([10, 0, 0, 3]), bytes([10, 0, 0, 4]), udp_segment(bytes([10, 0, 0, 3]), bytes([10, 0, 0, 4]), 1, 2, b"x"))
    path = tmp_path / "frag.pcap"
    path.write_bytes(pcap_file([ether(0x0800, f) for f in (f3, f1, other, f1, f2)]))  # f1 twice: a duplicate
    got, stats = read(path.read_bytes())
    assert [(d.frame, d.src, d.dst, d.data, d.error) for d in got] == [
        (3, "10.0.0.3:1", "10.0.0.4:2", b"x", None),
        (5, "10.0.0.1:49152", "10.0.0.2:49153", PAYLOAD, None),
    ]
    assert stats.skipped == {"ip-fragment": 3} and stats.udp == 2
    assert [(d.frame, d.data) for d in got] == tshark_udp(path)


def test_ipv6_fragments_with_an_extension_header_inside_are_reassembled(tmp_path: Path) -> None:
    s, d = ipaddress.IPv6Address("fd00::1").packed, ipaddress.IPv6Address("fd00::2").packed
    dest_opts = bytes([17, 0, 1, 4, 0, 0, 0, 0])  # destination options (PadN), then UDP
    fragmentable = dest_opts + udp_segment(s, d, 49152, 49153, PAYLOAD)
    frames = [ether(0x86DD, f) for f in ipv6_fragments("fd00::1", "fd00::2", fragmentable, 1232, 60)]
    path = tmp_path / "frag6.pcap"
    path.write_bytes(pcap_file(frames))
    got, stats = read(path.read_bytes())
    assert [(d.frame, d.src, d.data, d.error) for d in got] == [(3, "[fd00::1]:49152", PAYLOAD, None)]
    assert stats.skipped == {"ip-fragment": 2}
    assert [(d.frame, d.data) for d in got] == tshark_udp(path)


def test_a_fragmented_real_pia_packet_decodes_after_reassembly(captures: Path) -> None:
    """Frame 83 of the nDPI capture (a 688-byte plain Pia packet to the monitoring server), sent in two
    fragments, decodes to the same header and messages as the unfragmented original."""
    with open_capture(captures / "nDPI-nintendo.pcap") as cap:
        original = next(d for d in cap if d.frame == 83)
    (sip, sport), (dip, dport) = (x.rsplit(":", 1) for x in (original.src, original.dst))
    s, d = ipaddress.IPv4Address(sip).packed, ipaddress.IPv4Address(dip).packed
    seg = udp_segment(s, d, int(sport), int(dport), original.data)
    got, _ = read(pcap_file([ether(0x0800, f) for f in ipv4_fragments(sip, dip, seg, 512)]))
    assert [x.data for x in got] == [original.data]
    ctx = load_session(None, {})
    want = Decoder(ctx).decode(original).to_json()
    have = Decoder(ctx).decode(got[0]).to_json()
    assert have["kind"] == "pia" and have["header"] == want["header"] and have["messages"] == want["messages"]
    assert have["messages"] and have["error"] is None


def test_a_snap_cut_fragment_gives_the_datagram_reported_cut_short() -> None:
    seg = udp_segment(bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]), 5, 6, PAYLOAD)
    f1, f2, f3 = ipv4_fragments("10.0.0.1", "10.0.0.2", seg, 1480)
    got, _ = read(pcap_file([ether(0x0800, f1), ether(0x0800, f2)[:200], ether(0x0800, f3)]))
    assert len(got) == 1
    assert got[0].error == f"captured only {1480 - 8 + 200 - 34} of {len(PAYLOAD)} UDP payload bytes (snap length)"
    assert got[0].data == PAYLOAD[: 1480 - 8 + 200 - 34]


def test_stray_fragments_stay_bounded_and_never_yield() -> None:
    r = Reassembler()
    for i in range(5 * MAX_PENDING):
        assert r.add(Fragment(("k", i), 0, True, bytes(1480), 1480, 17, "a", "b", False)) is None
    assert len(r._pending) <= MAX_PENDING and r._held <= MAX_HELD
    # A fragment whose datagram would pass 65,535 bytes, or a middle fragment not a multiple of 8: given up.
    assert r.add(Fragment("big", 65528, False, bytes(16), 16, 17, "a", "b", False)) is None
    assert r.add(Fragment("odd", 0, True, bytes(7), 7, 17, "a", "b", False)) is None
    assert "big" not in r._pending and "odd" not in r._pending
    # A capture of nothing but many small fragments reads in constant memory and yields nothing.
    frames = [ether(0x0800, ipv4(bytes(4), bytes(4), bytes(64), ident=i, frag=0x2000)) for i in range(2000)]
    got, stats = read(pcap_file(frames))
    assert got == [] and stats.skipped == {"ip-fragment": 2000}


def test_udp_length_past_its_ip_packet_says_so_not_snap_length() -> None:
    s, d = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    seg = bytearray(udp_segment(s, d, 5, 6, b"hello"))
    seg[4:6] = (8 + 50).to_bytes(2, "big")
    got, _ = read(pcap_file([ether(0x0800, ipv4(s, d, bytes(seg)))]))
    assert got[0].error == "UDP length field says 50 payload bytes but its IP packet holds 5"


def test_ipv4_total_length_zero_from_segmentation_offload_takes_the_captured_length(tmp_path: Path) -> None:
    s, d = bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2])
    path = tmp_path / "tso.pcap"
    path.write_bytes(pcap_file([ether(0x0800, ipv4(s, d, udp_segment(s, d, 5, 6, b"hello"), total=0))]))
    got, _ = read(path.read_bytes())
    assert [(x.data, x.error) for x in got] == [(b"hello", None)]
    assert tshark_udp(path) == [(1, b"hello")]


def test_a_datagram_whose_fragment_never_came_is_counted_and_named_in_the_summary(tmp_path: Path) -> None:
    seg = udp_segment(bytes([10, 0, 0, 1]), bytes([10, 0, 0, 2]), 49152, 49153, PAYLOAD)
    f1, f2, _missing = ipv4_fragments("10.0.0.1", "10.0.0.2", seg, 1480, ident=7)
    g1, g2, g3 = ipv4_fragments("10.0.0.1", "10.0.0.2", seg, 1480, ident=8)
    stray = ipv4(bytes(4), bytes(4), bytes(1480), ident=9, frag=0x2000 | 8)  # a middle fragment alone
    frames = [ether(0x0800, f) for f in (f1, g1, f2, g2, g3, stray)]
    got, stats = read(pcap_file(frames))
    assert [d.frame for d in got] == [5]
    assert stats.incomplete == 2  # ident 7 (its last fragment) and 9 (all but one)
    # Given up by the bounds (the oldest first): counted too.
    r = Reassembler()
    for i in range(MAX_PENDING + 3):
        r.add(Fragment(("k", i), 0, True, bytes(8), 8, 17, "a", "b", False))
    assert (r.given_up, r.incomplete()) == (3, MAX_PENDING + 3)
    path = tmp_path / "lost.pcap"
    path.write_bytes(pcap_file(frames))
    done = subprocess.run([sys.executable, "-m", "pianode", "decode", str(path), "--format", "table"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "-- 2 IP-fragmented datagrams never whole (a fragment is not in the capture): not decoded" in done.stdout
