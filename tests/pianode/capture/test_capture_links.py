"""More link layers a real capture has: PPPoE sessions, IEEE 802.3 frames with LLC/SNAP, and PPI-wrapped frames
(802.11 as AirPcap/Kismet write it, or Ethernet); each read as tshark reads it.  Frames built by hand."""

from __future__ import annotations

import ipaddress
import shutil
import struct
import subprocess
from pathlib import Path

import pytest
from internet_checksum import internet_checksum

from pianode.capture.pcap import open_capture

SRC_MAC, DST_MAC = bytes.fromhex("02aabbccdd01"), bytes.fromhex("02aabbccdd02")


def ipv4_udp(payload: bytes, sport: int = 49152) -> bytes:
    s, d = ipaddress.IPv4Address("10.0.0.1").packed, ipaddress.IPv4Address("10.0.0.2").packed
    ulen = 8 + len(payload)
    c = internet_checksum(s + d + bytes([0, 17]) + ulen.to_bytes(2, "big") + struct.pack(">HHHH", sport, 49153, ulen, 0) + payload)
    udp = struct.pack(">HHHH", sport, 49153, ulen, c or 0xFFFF) + payload
    hdr = struct.pack(">BBHHHBBH4s4s", 0x45, 0, 20 + ulen, 1, 0x4000, 64, 17, 0, s, d)
    return hdr[:10] + internet_checksum(hdr).to_bytes(2, "big") + hdr[12:] + udp


def ipv6_udp(payload: bytes) -> bytes:
    s, d = ipaddress.IPv6Address("fd00::1").packed, ipaddress.IPv6Address("fd00::2").packed
    ulen = 8 + len(payload)
    c = internet_checksum(s + d + ulen.to_bytes(4, "big") + b"\0\0\0\x11" + struct.pack(">HHHH", 5, 6, ulen, 0) + payload)
    return struct.pack(">IHBB", 6 << 28, ulen, 17, 64) + s + d + struct.pack(">HHHH", 5, 6, ulen, c or 0xFFFF) + payload


def pppoe(ppp_proto: int, ip: bytes) -> bytes:
    return DST_MAC + SRC_MAC + b"\x88\x64" + struct.pack(">BBHH", 0x11, 0, 0x1234, len(ip) + 2) + \
        struct.pack(">H", ppp_proto) + ip


def snap(ip: bytes) -> bytes:
    llc = bytes.fromhex("aaaa03000000") + b"\x08\x00"
    return DST_MAC + SRC_MAC + struct.pack(">H", len(llc) + len(ip)) + llc + ip


def wlan_data(ip: bytes) -> bytes:  # ToDS data frame: addr1 = BSSID, addr2 = source, addr3 = destination
    return b"\x08\x01\0\0" + DST_MAC + SRC_MAC + DST_MAC + b"\x10\x00" + bytes.fromhex("aaaa030000000800") + ip


def ppi(inner_link: int, frame: bytes) -> bytes:
    return struct.pack("<BBHI", 0, 0, 8, inner_link) + frame


def pcapng(frames: list[tuple[int, bytes]]) -> bytes:
    def block(btype: int, body: bytes) -> bytes:
        body += b"\0" * (-len(body) % 4)
        return struct.pack("<II", btype, len(body) + 12) + body + struct.pack("<I", len(body) + 12)
    links = sorted({lt for lt, _ in frames})
    out = block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
    out += b"".join(block(1, struct.pack("<HHI", lt, 0, 65535)) for lt in links)
    for i, (lt, fr) in enumerate(frames):
        out += block(6, struct.pack("<IIIII", links.index(lt), 0, i, len(fr), len(fr)) + fr)
    return out


def test_pppoe_snap_and_ppi_frames_read_as_tshark_reads_them(tmp_path: Path) -> None:
    frames = [
        (1, pppoe(0x0021, ipv4_udp(b"pppoe-v4"))),
        (1, pppoe(0x0057, ipv6_udp(b"pppoe-v6"))),
        (1, pppoe(0xC021, b"\x01\x01\x00\x04")),  # LCP: no IP
        (1, snap(ipv4_udp(b"llc-snap"))),
        (192, ppi(105, wlan_data(ipv4_udp(b"ppi-wlan")))),
        (192, ppi(1, DST_MAC + SRC_MAC + b"\x08\x00" + ipv4_udp(b"ppi-ether"))),
    ]
    path = tmp_path / "links.pcapng"
    path.write_bytes(pcapng(frames))
    with open_capture(path) as cap:
        got = [(d.frame, d.data, d.src_mac) for d in cap]
        skipped = dict(cap.stats.skipped)
    assert got == [
        (1, b"pppoe-v4", "02:aa:bb:cc:dd:01"),
        (2, b"pppoe-v6", "02:aa:bb:cc:dd:01"),
        (4, b"llc-snap", "02:aa:bb:cc:dd:01"),
        (5, b"ppi-wlan", "02:aa:bb:cc:dd:01"),
        (6, b"ppi-ether", "02:aa:bb:cc:dd:01"),
    ]
    assert skipped == {"pppoe": 1}
    exe = shutil.which("tshark")
    if exe is None:
        pytest.fail("tshark is not installed (CI installs it; apt-get install tshark)")
    out = subprocess.run([exe, "-r", str(path), "-Y", "udp", "-T", "fields", "-e", "frame.number", "-e", "udp.payload"],
                         capture_output=True, text=True, check=True, timeout=60).stdout
    assert [(int(n), bytes.fromhex(p)) for n, p in (x.split("\t") for x in out.splitlines())] == [
        (f, d) for f, d, _ in got
    ]
