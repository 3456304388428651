"""The dissector and ``pianode decode`` on Pia datagrams that are not what a well-behaved peer sends.

Each datagram is built with pianode's own codecs and then changed the way a
hostile peer or a damaged capture changes it; tshark with the dissector and
``pianode decode --format jsonl`` read the same pcap, and must tell the same
story: the same layout, version and ids, the messages of one read by the
other, and a reason for everything that was not read.  tshark must never
report a Lua error.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from wireshark_tools import as_int, decode_jsonl, dissect, pianode

from pianode.capture.pcap import PcapWriter
from pianode.wireshark.export import PcapngWriter
from protocols.pia.header import PacketHeader
from protocols.pia.message import Message, deflate_payload
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


# --------------------------------------------------------------------------
# Every version family, cut at every length: both readers agree on each datagram


#: One version of each header and message format (and of each header version within H-C, H-F and H-G).
FAMILIES = ("3.3", "5.6", "5.7", "5.10", "5.11", "5.14", "5.18", "5.23", "5.29", "6.16", "6.25", "6.30", "6.32", "7.0")


def _plain(version: str) -> bytes:
    """A plain packet of three messages (one zlib-compressed where the version has the flag) and a footer where
    the version has one."""
    p = profile_for(version)
    fmt, mf = p.header_format.value, p.message_format.value
    kw: dict[str, Any] = {"encrypted": False, "packet_id": 100}
    if fmt in ("H-A", "H-B", "H-C", "H-D"):
        kw["connection_id"] = 7
    if fmt in ("H-A", "H-B"):
        kw["source_timer"], kw["destination_timer"] = 1000, 2000
    if fmt in ("H-E", "H-F", "H-G"):
        kw["destination_variable_id"], kw["source_variable_id"] = 0x0102, 0x0304
    common: dict[str, Any] = {}
    if mf in ("M-A", "M-B", "M-C", "M-D", "M-E"):
        common["source_constant_id"] = 0x11223344
    if mf == "M-A":
        common["source_station_index"] = 3
    dest = 0 if mf == "M-G" else 5
    ids = list(p.protocol_ids.values())
    big = bytes(range(50)) * 3
    second = Message(ids[0], 1, big, 0, dest, **common)
    if p.zlib_flag is not None:
        second = Message(ids[0], 1, deflate_payload(big), p.zlib_flag, dest, **common)
    messages = (Message(ids[0], 1, b"\x01\x02\x03\x04\x05", 0, dest, **common), second,
                Message(ids[-1], 0, b"", 0, dest, **common))
    footer = (7, 9) if p.footer != "none" else ()
    codec = PacketCodec(p, hmac_key=b"key" if fmt == "H-A" else None)
    return codec.encode(Packet(PacketHeader(**kw), messages, footer), "10.0.0.1")


def _agree(frame: dict[str, list[str]], row: dict[str, Any]) -> None:
    """What the dissector shows of one datagram is what pianode decode reports of it."""
    where = f"frame {frame['frame.number'][0]} ({row['size']} bytes)"
    assert row["kind"] == "pia", where
    # Every datagram is read or has its reason, in both.
    assert row["messages"] is not None or row["error"], where
    if row["error"]:
        assert frame.get("_ws.expert.message"), where
    assert frame.get("pia.lib_version") == [row["profile"]], where
    assert frame.get("pia.format") == [profile_for(row["profile"]).header_format.value], where
    h = row["header"]
    if h is not None:
        assert frame.get("pia.packet_id") == [str(h["packet_id"])], where
        for key in ("connection_id", "source_variable_id", "destination_variable_id", "source_timer"):
            if h.get(key) is not None:
                assert [as_int(x) for x in frame.get(f"pia.{key}", [])] == [h[key]], (where, key)
    if row["messages"] is None:
        assert "pia.msg.protocol_type" not in frame, where
    else:
        assert [as_int(x) for x in frame.get("pia.msg.protocol_type", [])] == [
            m["protocol_type"] for m in row["messages"]], where
        assert [int(x) for x in frame.get("pia.msg.length", [])] == [
            len(m["payload"]) // 2 for m in row["messages"]], where


AGREE_FIELDS = ("pia.format", "pia.lib_version", "pia.packet_id", "pia.connection_id", "pia.source_variable_id",
                "pia.destination_variable_id", "pia.source_timer", "pia.msg.protocol_type", "pia.msg.length",
                "_ws.expert.message")


def test_every_cut_of_a_packet_of_every_family_is_read_alike(tmp_path: Path) -> None:
    datagrams = [whole[:n] for whole in map(_plain, FAMILIES) for n in range(5, len(whole) + 1)]
    path = _write(tmp_path / "cuts.pcap", datagrams)
    rows = decode_jsonl(str(path))
    frames = dissect(path, *AGREE_FIELDS)
    assert len(frames) == len(rows) == len(datagrams)
    for frame, row in zip(frames, rows, strict=True):
        _agree(frame, row)


def test_a_preferred_version_of_another_layout_is_not_forced_on_a_header(tmp_path: Path) -> None:
    # pianode decode --version 5.18 reads a 5.29 (H-E) packet as its header says, and notes it; so does the dissector
    # with the pia.version preference at 5.18.  An H-A packet given a 5.10 (H-B) version is read as H-B by both.
    path = _write(tmp_path / "pref.pcap", [_plain("5.29"), _plain("3.3")])
    for version in ("5.18", "5.10"):
        rows = decode_jsonl(str(path), "--version", version)
        frames = dissect(path, *AGREE_FIELDS, prefs=(f"pia.version:{version}",))
        for frame, row in zip(frames, rows, strict=True):
            _agree(frame, row)
    assert [r["profile"] for r in decode_jsonl(str(path), "--version", "5.10")] == ["5.45", "5.10"]


# --------------------------------------------------------------------------
# zlib-flagged payloads that are no complete zlib stream


def test_a_zlib_payload_pianode_decode_refuses_is_not_inflated_by_the_dissector_either(tmp_path: Path) -> None:
    # Wireshark's inflater also takes raw deflate and hands back what a cut or damaged stream gave; pianode decode
    # takes one complete zlib stream (RFC 1950) and nothing after it.  Both must say the same of each payload.
    import zlib

    p = profile_for("5.29")
    assert p.zlib_flag is not None
    ptype = p.protocol_ids[next(iter(p.protocol_ids))]
    text = bytes(range(64)) * 4
    stream = zlib.compress(text)
    raw = zlib.compressobj(wbits=-15)
    payloads = {
        "complete": stream,
        "raw deflate": raw.compress(text) + raw.flush(),
        "cut short": stream[:-6],
        "trailing bytes": stream + b"\x00\x01",
        "wrong checksum": stream[:-1] + bytes([stream[-1] ^ 1]),
        "preset dictionary": bytes([0x78, 0xBB]) + stream[2:],
    }
    datagrams = []
    for payload in payloads.values():
        messages = (Message(ptype, 0, payload, p.zlib_flag, 0), Message(ptype, 0, b"\x05", 0, 0))
        header = PacketHeader(False, 5, destination_variable_id=1, source_variable_id=2)
        datagrams.append(PacketCodec(p).encode(Packet(header, messages), "10.0.0.1"))
    path = _write(tmp_path / "zlib.pcap", datagrams)
    rows = decode_jsonl(str(path), "--version", "5.29")
    frames = dissect(path, *AGREE_FIELDS, "pia.msg.payload", prefs=("pia.version:5.29",))
    for name, frame, row in zip(payloads, frames, rows, strict=True):
        _agree(frame, row)
        first = row["messages"][0]
        if name == "complete":
            assert row["error"] is None and first["payload"] == text.hex() == frame["pia.msg.payload"][0]
        else:
            assert "zlib" in row["error"] and first["payload"] == payloads[name].hex(), name
            assert frame["pia.msg.payload"][0] == payloads[name].hex(), name
            assert "zlib-flagged payload does not inflate" in frame["_ws.expert.message"], name


# --------------------------------------------------------------------------
# Footers (5.27+): a size that is no whole number of u16 ids


@pytest.mark.parametrize(("version", "size_at"), [("5.29", 0xF), ("6.30", 0xB), ("6.32", 0xC)])
def test_an_odd_footer_size_is_reported_and_the_messages_are_still_read(tmp_path: Path, version: str,
                                                                        size_at: int) -> None:
    whole = bytearray(_plain(version))
    assert whole[size_at] == 4 and whole[-4:] == bytes.fromhex("00070009")
    whole[size_at] = 5
    path = _write(tmp_path / "footer.pcap", [bytes(whole) + b"\x0b"])
    (row,) = decode_jsonl(str(path))
    (frame,) = dissect(path, *AGREE_FIELDS, "pia.footer.variable_id")
    _agree(frame, row)
    # The messages do not depend on the footer: both readers show them, and both say what is wrong with it.
    assert row["messages"] is not None and len(row["messages"]) == 3
    assert row["error"] == "footer of 5 bytes is not a list of u16 variable ids"
    assert row["header"]["footer"] == [as_int(v) for v in frame["pia.footer.variable_id"]] == [7, 9]
    assert "footer is not a list of u16 variable ids" in frame["_ws.expert.message"]


def test_the_footer_of_a_zstd_packet_is_where_the_header_puts_it_for_both(tmp_path: Path) -> None:
    path = _write(tmp_path / "zstd-footer.pcap", [_g_packet("6.32", 1, footer=(7, 9))])
    (row,) = decode_jsonl(str(path))
    (frame,) = dissect(path, *AGREE_FIELDS, "pia.footer.variable_id")
    _agree(frame, row)
    assert "Zstandard" in row["error"]
    assert row["header"]["footer"] == [as_int(v) for v in frame["pia.footer.variable_id"]] == [7, 9]


# --------------------------------------------------------------------------
# Other UDP on Pia's ports


def test_other_udp_on_pias_ports_is_claimed_by_neither(tmp_path: Path) -> None:
    others = [
        b"GET / HTTP/1.1\r\nHost: pia\r\n\r\n",  # 0x47 0x45: stream types 4 and 4, ports 7 and 5
        bytes.fromhex("3faf350d439e71897aa75fde3134a4aa"),  # stream types 3 and 10
        bytes.fromhex("afae0000000000000000000000000000"),  # one stream type, but neither port a server's (1, 2)
        bytes.fromhex("1234010000010000000000000770696e746f646f0000010001"),  # a DNS query
        bytes.fromhex("000100002112a442") + bytes(12),  # a STUN binding request
        bytes(16),
        b"\xff" * 40,
    ]
    path = tmp_path / "other.pcap"
    with path.open("wb") as f:
        w = PcapWriter(f)
        for i, data in enumerate(others):
            for port in (49152, 30000, 12345):
                w.write_udp(data, f"10.0.0.1:{port}", f"10.0.0.2:{port}", i * 0.01)
    rows = decode_jsonl(str(path))
    assert [r["kind"] for r in rows] == ["unknown"] * len(others) * 3
    frames = dissect(path, "_ws.col.Protocol", "pia.magic", "prudp.version", "pia.lan.browse.type")
    for frame in frames:
        assert frame["_ws.col.Protocol"][0] not in ("Pia", "PRUDP"), frame
        assert not {"pia.magic", "prudp.version", "pia.lan.browse.type"} & frame.keys(), frame


# --------------------------------------------------------------------------
# Packets the capture cut short (snap length)


def _cut(path: Path, keep: list[int]) -> None:
    """Cut record i of a little-endian pcap (Ethernet + IPv4 + UDP frames) to 42 + keep[i] bytes, original length
    kept."""
    blob = path.read_bytes()
    out = bytearray(blob[:24])
    pos = 24
    for n in keep:
        sec, frac, incl, orig = struct.unpack_from("<IIII", blob, pos)
        frame = blob[pos + 16 : pos + 16 + incl][: 42 + n]
        out += struct.pack("<IIII", sec, frac, len(frame), orig) + frame
        pos += 16 + incl
    path.write_bytes(bytes(out))


def test_every_snap_length_of_a_packet_of_every_family_is_read_alike(tmp_path: Path) -> None:
    # The length rule that tells H-A from H-B is on the datagram's length, which a cut record still gives; a cut
    # below the header still names the layout byte 4 gives.
    wholes = [_plain(v) for v in FAMILIES]
    cuts = [(whole, n) for whole in wholes for n in range(5, len(whole), 3)]
    path = _write(tmp_path / "cut.pcap", [whole for whole, _ in cuts])
    _cut(path, [n for _, n in cuts])
    rows = decode_jsonl(str(path))
    frames = dissect(path, *AGREE_FIELDS)
    assert len(frames) == len(rows) == len(cuts)
    for frame, row, (whole, n) in zip(frames, rows, cuts, strict=True):
        assert row["error"] == f"captured only {n} of {len(whole)} UDP payload bytes (snap length)"
        _agree(frame, row)
        assert any("snap length" in m or "the capture kept" in m for m in frame["_ws.expert.message"]), frame


def test_a_udp_length_past_its_ip_packet_leaves_the_body_unread_in_both(tmp_path: Path) -> None:
    # A host drops a datagram whose UDP length field runs past its IP packet; pianode decode reports its header and
    # why, and so does the dissector, instead of reading the messages Wireshark hands it.
    whole = _plain("5.29")
    path = _write(tmp_path / "udp-length.pcap", [whole, whole])
    blob = bytearray(path.read_bytes())
    at = 24 + 16 + 14 + 20 + 4  # first record: pcap header, record header, Ethernet, IPv4, UDP ports
    assert struct.unpack_from(">H", blob, at)[0] == 8 + len(whole)
    struct.pack_into(">H", blob, at, 8 + len(whole) + 10)
    path.write_bytes(bytes(blob))
    rows = decode_jsonl(str(path))
    frames = dissect(path, *AGREE_FIELDS, "_ws.col.Info")
    assert rows[0]["error"] == f"UDP length field says {len(whole) + 10} payload bytes but its IP packet holds {len(whole)}"
    for frame, row in zip(frames, rows, strict=True):
        _agree(frame, row)
    assert "[bad UDP length]" in frames[0]["_ws.col.Info"][0]
    assert rows[1]["error"] is None and len(frames[1]["pia.msg.protocol_type"]) == 3


def test_an_export_names_the_version_of_every_pia_datagram_even_one_with_no_header_to_read(tmp_path: Path) -> None:
    # pianode decode --version 5.29 judges a 9-byte datagram and one whose byte 4 names no layout by 5.29 (and says
    # why neither reads); its export must tell the dissector so, or the dissector guesses another version.
    whole = _plain("5.29")
    odd = bytearray(whole)
    odd[4] = 0x49
    path = _write(tmp_path / "headless.pcap", [whole[:9], bytes(odd), whole])
    export = tmp_path / "headless.pcapng"
    status, _, err = pianode("decode", str(path), "--version", "5.29", "--decrypted-pcap", str(export))
    assert status == 0, err
    rows = decode_jsonl(str(path), "--version", "5.29")
    frames = dissect(export, "pia.lib_version", "pia.lib_version_source", "_ws.expert.message")
    assert [r["profile"] for r in rows] == ["5.29"] * 3
    assert [f.get("pia.lib_version") for f in frames] == [["5.29"]] * 3
    assert [f["pia.lib_version_source"] for f in frames] == [["pianode export"]] * 3
    assert rows[1]["error"] and any("names no documented header" in m for m in frames[1]["_ws.expert.message"])
