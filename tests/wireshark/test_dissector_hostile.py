"""The dissector and ``pianode decode`` on Pia datagrams that are not what a well-behaved peer sends.

Each datagram is built with pianode's own codecs and then changed the way a
hostile peer or a damaged capture changes it; tshark with the dissector and
``pianode decode --format jsonl`` read the same pcap, and must tell the same
story: the same layout, version and ids, the messages of one read by the
other, and a reason for everything that was not read.  tshark must never
report a Lua error.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from wireshark_tools import as_int, decode_jsonl, dissect

from pianode.capture.pcap import PcapWriter
from pianode.wireshark.export import PcapngWriter
from protocols.pia.header import PacketHeader
from protocols.pia.message import Message
from protocols.pia.packet import Packet, PacketCodec
from protocols.pia.versions import profile_for

SRC, DST = "10.0.0.1:49152", "10.0.0.2:49152"
#: The first bytes of a Zstandard frame (RFC 8878 §3.1.1: magic 0xFD2FB528, little-endian), then a few more.
ZSTD_FRAME = bytes.fromhex("28b52ffd2005290000") + b"hello"


def _write(path: Path, datagrams: list[bytes]) -> Path:
    with path.open("wb") as f:
        w = PcapWriter(f)
        for i, data in enumerate(datagrams):
            w.write_udp(data, SRC, DST, i * 0.001)
    return path


def _g_packet(version: str, packet_flags: int, *, encrypted: bool = False, footer: tuple[int, ...] = ()) -> bytes:
    """A plain 6.32+ packet (H-G, M-G) of two messages, with *packet_flags* in the low nibble of byte 5."""
    p = profile_for(version)
    ptype = next(iter(p.protocol_ids.values()))
    header = PacketHeader(encrypted=False, packet_id=77, destination_variable_id=0x0102, source_variable_id=0x0304,
                          packet_flags=packet_flags)
    data = bytearray(PacketCodec(p).encode(
        Packet(header, (Message(ptype, 1, b"\x01\x02\x03", 0, 0), Message(ptype, 2, b"", 0, 0)), footer), "10.0.0.1"))
    if encrypted:
        data[4] |= 0x80  # as a decrypted export carries it: the header says encrypted, the body is the plaintext
    return bytes(data)


# --------------------------------------------------------------------------
# Packet flag 1 of the 6.32+ header: the payload is Zstandard-compressed (KW Pia-Protocol.md, "Packet Flags")


@pytest.mark.parametrize("version", ["6.32", "7.0"])
def test_a_zstd_flagged_payload_is_shown_compressed_never_read_as_messages(tmp_path: Path, version: str) -> None:
    p = profile_for(version)
    hsize = 29
    readable_looking = _g_packet(version, 1)  # the flag over a body that would read as messages
    frame_bytes = readable_looking[:hsize] + ZSTD_FRAME  # the flag over a real frame's first bytes
    both_flags = _g_packet(version, 1 | 2 | 4)
    path = _write(tmp_path / "zstd.pcap", [readable_looking, frame_bytes, both_flags, _g_packet(version, 0)])
    rows = decode_jsonl(str(path), "--version", p.name)
    frames = dissect(path, "pia.lib_version", "pia.packet_id", "pia.packet_flags", "pia.packet_flags.zstd",
                     "pia.packet_flags.skip_destination_check", "pia.packet_flags.skip_network_check",
                     "pia.compressed_payload", "pia.msg.protocol_type", "_ws.expert.message", "_ws.col.Info",
                     prefs=(f"pia.version:{p.name}",))
    assert len(frames) == len(rows) == 4
    for i, (frame, row) in enumerate(zip(frames[:3], rows[:3], strict=True)):
        data = [readable_looking, frame_bytes, both_flags][i]
        # pianode decode says per datagram why it shows no messages ...
        assert row["messages"] is None
        assert "Zstandard-compressed (packet flag 1)" in row["error"]
        # ... and the dissector shows the flag and the compressed bytes, and reads no messages out of them.
        assert frame["pia.lib_version"] == [row["profile"]] == [p.name]
        assert frame["pia.packet_id"] == [str(row["header"]["packet_id"])] == ["77"]
        assert as_int(frame["pia.packet_flags"][0]) == row["header"]["packet_flags"]
        assert frame["pia.packet_flags.zstd"] == ["1"]
        assert "pia.msg.protocol_type" not in frame
        assert frame["pia.compressed_payload"] == [data[hsize:].hex()]
        assert any("Zstandard-compressed (packet flag 1)" in m for m in frame["_ws.expert.message"])
        assert not any("alformed" in m for m in frame["_ws.expert.message"])
        assert "[Zstandard-compressed]" in frame["_ws.col.Info"][0]
    assert frames[2]["pia.packet_flags.skip_destination_check"] == ["1"]
    assert frames[2]["pia.packet_flags.skip_network_check"] == ["1"]
    # Without the flag the same packet reads as its two messages, in both.
    assert frames[3]["pia.packet_flags.zstd"] == ["0"] and "pia.compressed_payload" not in frames[3]
    assert [as_int(t) for t in frames[3]["pia.msg.protocol_type"]] == [m["protocol_type"] for m in rows[3]["messages"]]


def test_a_decrypted_export_of_a_zstd_packet_shows_the_compressed_plaintext(tmp_path: Path) -> None:
    data = _g_packet("6.32", 1, encrypted=True, footer=(7, 9))
    path = tmp_path / "export.pcapng"
    with path.open("wb") as f:
        PcapngWriter(f).write_udp(data, SRC, DST, 0.0, ["pianode: pia version=6.32 body=decrypted auth=ok",
                                                        "pianode decode: the payload is Zstandard-compressed"])
    (frame,) = dissect(path, "pia.lib_version", "pia.body_state", "pia.compressed_payload", "pia.msg.protocol_type",
                       "pia.footer.variable_id", "_ws.expert.message")
    assert frame["pia.lib_version"] == ["6.32"] and frame["pia.body_state"] == ["decrypted"]
    assert "pia.msg.protocol_type" not in frame
    # The header's footer size places the footer after the compressed bytes, as for any 6.32+ plaintext.
    assert [as_int(v) for v in frame["pia.footer.variable_id"]] == [7, 9]
    assert frame["pia.compressed_payload"] == [data[29:-4].hex()]
    assert any("Zstandard" in m for m in frame["_ws.expert.message"])
