"""Frame numbers of pcapng captures with blocks other than packets: the numbers Wireshark shows.

Wireshark shows a systemd Journal Export Block (type 9) and a Custom Block (0x00000BAD, 0x40000BAD;
draft-ietf-opsawg-pcapng §4.7-4.8) as frames of their own, and other blocks (interface statistics,
name resolution, decryption secrets) not: a datagram's ``frame`` must be the number a reader finds it
under in Wireshark, and the count of frames read must hold those records (as frames without UDP).
"""

from __future__ import annotations

import io
import struct

import pytest

from pianode.capture.pcap import PcapWriter, open_capture


def _block(btype: int, body: bytes) -> bytes:
    body += b"\0" * (-len(body) % 4)
    return struct.pack("<II", btype, 12 + len(body)) + body + struct.pack("<I", 12 + len(body))


def _udp_frame(payload: bytes) -> bytes:
    b = io.BytesIO()
    PcapWriter(b).write_udp(payload, "10.0.0.1:1000", "10.0.0.2:2000")
    return b.getvalue()[24 + 16 :]


def _epb(frame: bytes, ticks: int) -> bytes:
    return _block(6, struct.pack("<IIIII", 0, ticks >> 32, ticks & 0xFFFFFFFF, len(frame), len(frame)) + frame)


SHB = _block(0x0A0D0D0A, struct.pack("<IHHq", 0x1A2B3C4D, 1, 0, -1))
IDB = _block(1, struct.pack("<HHI", 1, 0, 65535))
SHOWN = {  # blocks Wireshark shows as a frame
    "journal export": _block(9, b"__REALTIME_TIMESTAMP=1\nMESSAGE=x\n"),
    "custom (copy)": _block(0x00000BAD, struct.pack("<I", 32473) + b"abcd"),
    "custom (no copy)": _block(0x40000BAD, struct.pack("<I", 32473) + b"abcd"),
}
NOT_SHOWN = {
    "interface statistics": _block(5, struct.pack("<III", 0, 0, 0)),
    "decryption secrets": _block(0xA, struct.pack("<II", 0x544C534B, 4) + b"abcd"),
    "name resolution": _block(4, struct.pack("<HH", 1, 8) + bytes([10, 0, 0, 1]) + b"gw\0\0" + bytes(4)),
}


@pytest.mark.parametrize(("name", "block", "second"), [
    *(pytest.param(n, b, 3, id=n) for n, b in SHOWN.items()),
    *(pytest.param(n, b, 2, id=n) for n, b in NOT_SHOWN.items()),
])  # fmt: skip
def test_datagram_frame_numbers_count_the_records_wireshark_shows(name: str, block: bytes, second: int) -> None:
    frame = _udp_frame(b"x" * 20)
    data = SHB + IDB + _epb(frame, 1) + block + _epb(frame, 2)
    with open_capture(io.BytesIO(data)) as cap:
        got = [d.frame for d in cap]
        stats = cap.stats
    assert got == [1, second], name
    assert stats.frames == second and stats.udp == 2
    assert sum(stats.skipped.values()) == second - 2
