"""The packet layer against real traffic: the nDPI Splatoon 2 pcap and the mGBA 3DS UDS frames.

Both fixtures use the <= 5.6 header (H-A) with 20-byte M-A messages, so the
profile is 5.3 (M-A is the <= 5.4 message format; spec §0.3).  Expected values
come from ../shared/captures/*.expected.json (README §1-§2), computed by the
fixtures' authors with their own parsers.
"""

from __future__ import annotations

import json
import pathlib
import struct

import attrs
import pytest

from protocols.errors import AuthenticationError, DecodeError
from protocols.pia import HeaderFormat, Message, Packet, PacketCodec, decode_header, profile_for, sniff_header_format

P53 = profile_for("5.3")
HMAC_KEY = b"PokemonSIO"


def _udp_payloads(pcap: bytes) -> list[tuple[int, str, str, bytes]]:
    """(1-based frame, "src:port", "dst:port", payload) of every IPv4 UDP datagram in an Ethernet pcap.

    Test-local and minimal: classic libpcap, little- or big-endian, no VLAN tags
    beyond one 802.1Q layer.
    """
    magic = pcap[:4]
    endian = "<" if magic == b"\xd4\xc3\xb2\xa1" else ">"
    assert struct.unpack(endian + "I", magic)[0] == 0xA1B2C3D4
    assert struct.unpack_from(endian + "I", pcap, 20)[0] == 1  # Ethernet
    pos, frame, out = 24, 0, []
    while pos < len(pcap):
        incl = struct.unpack_from(endian + "I", pcap, pos + 8)[0]
        pkt = pcap[pos + 16 : pos + 16 + incl]
        pos += 16 + incl
        frame += 1
        eth = 12
        ethertype = struct.unpack_from(">H", pkt, eth)[0]
        if ethertype == 0x8100:
            eth += 4
            ethertype = struct.unpack_from(">H", pkt, eth)[0]
        if ethertype != 0x0800:
            continue
        ip = pkt[eth + 2 :]
        ihl = (ip[0] & 0x0F) * 4
        if ip[9] != 17:
            continue
        total = struct.unpack_from(">H", ip, 2)[0]
        src = ".".join(map(str, ip[12:16]))
        dst = ".".join(map(str, ip[16:20]))
        sport, dport, ulen = struct.unpack_from(">HHH", ip, ihl)
        payload = ip[ihl + 8 : ihl + ulen]
        assert ihl + ulen <= total
        out.append((frame, f"{src}:{sport}", f"{dst}:{dport}", payload))
    return out


@pytest.fixture
def ndpi(captures: pathlib.Path) -> tuple[dict, list[tuple[int, str, str, bytes]]]:
    expected = json.loads((captures / "nDPI-nintendo.expected.json").read_text())
    return expected, _udp_payloads((captures / "nDPI-nintendo.pcap").read_bytes())


def _message_fields(m: Message) -> dict[str, object]:
    return {
        "flags": m.flags,
        "source_station_index": m.source_station_index,
        "payload_size": len(m.payload),
        "destination": m.destination,
        "source_constant_id": m.source_constant_id,
        "protocol_type": m.protocol_type,
        "protocol_port": m.protocol_port,
        "reserved": m.reserved,
        "payload_hex": m.payload.hex(),
    }


def _expected_message(e: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in e.items() if k != "offset"}


# -- nDPI: Splatoon 2, Pia <= 5.6 over the Internet -----------------------------


def test_ndpi_every_pia_header_matches(ndpi: tuple[dict, list]) -> None:
    expected, datagrams = ndpi
    cols = expected["packets_columns"]
    rows = [dict(zip(cols, r)) for r in expected["packets"]]
    flows = {f["flow"]: (f["src"], f["dst"]) for f in expected["flows"]}
    pia = [d for d in datagrams if d[3][:4] == b"\x32\xab\x98\x64"]
    assert len(datagrams) == expected["counts"]["udp_datagrams"]
    assert len(pia) == len(rows) == expected["counts"]["pia"]
    codec = PacketCodec(P53)  # the session key is not public: headers only
    for (frame, src, dst, payload), row in zip(pia, rows):
        assert sniff_header_format(payload) is HeaderFormat.A, frame
        header, offset = decode_header(payload, P53)
        got = {
            "frame": frame,
            "flow": row["flow"],
            "encryption": 2 if header.encrypted else 1,
            "connection_id": header.connection_id,
            "packet_id": header.packet_id,
            "source_timer": header.source_timer,
            "destination_timer": header.destination_timer,
            "udp_payload_length": len(payload),
        }
        assert got == row
        assert flows[row["flow"]] == (src, dst)
        assert offset == 12
        assert header.tag == payload[-16:]
        report = codec.inspect(payload, src.split(":")[0])
        assert report.header == header
        assert report.authenticated is None  # cannot authenticate, and must not fail
        if header.encrypted:
            assert report.messages is None
            assert report.error is None
        else:
            assert report.messages is not None


def test_ndpi_plain_packets_messages(ndpi: tuple[dict, list]) -> None:
    expected, datagrams = ndpi
    by_frame = {d[0]: d for d in datagrams}
    codec = PacketCodec(P53)
    assert len(expected["plain_packets"]) == expected["counts"]["pia_plain"]
    for plain in expected["plain_packets"]:
        frame, src, _dst, payload = by_frame[plain["frame"]]
        assert len(payload) == plain["length"]
        with pytest.raises(AuthenticationError):
            codec.decode(payload, src)  # strict: the HMAC cannot be checked without the key
        packet = codec.decode(payload, src, verify=False)
        h = packet.header
        assert (h.encrypted, h.connection_id, h.packet_id, h.source_timer, h.destination_timer) == (
            plain["encryption"] == 2,
            plain["connection_id"],
            plain["packet_id"],
            plain["source_timer"],
            plain["destination_timer"],
        )
        assert h.tag.hex() == plain["hmac_md5"]
        assert [_message_fields(m) for m in packet.messages] == [_expected_message(e) for e in plain["messages"]]
        # Without a key the trailer is carried over: re-encoding is byte exact.
        assert codec.encode(packet, src) == payload


# -- mGBA: 3DS Pokemon VC over UDS, signed with "PokemonSIO" --------------------


@pytest.fixture
def mgba(captures: pathlib.Path) -> list[tuple[dict, dict]]:
    lines = (captures / "mgba-uds-frames.jsonl").read_text().splitlines()
    frames = [json.loads(line) for line in lines if line.strip()]
    expected = json.loads((captures / "mgba-uds-frames.expected.json").read_text())["frames"]
    assert [f["name"] for f in frames] == [e["name"] for e in expected]
    return list(zip(frames, expected))


def test_mgba_frames_authenticate_and_match(mgba: list[tuple[dict, dict]]) -> None:
    codec = PacketCodec(P53, hmac_key=HMAC_KEY)
    seen = 0
    for frame, exp in mgba:
        data = bytes.fromhex(frame["hex"])
        if exp["pia"] is None:
            assert sniff_header_format(data) is None
            with pytest.raises(DecodeError):
                codec.decode(data, "0.0.0.0")
            continue
        seen += 1
        pia = exp["pia"]
        assert sniff_header_format(data) is HeaderFormat.A
        packet = codec.decode(data, "0.0.0.0")
        h = packet.header
        assert len(data) == pia["size"]
        assert (h.encrypted, h.connection_id, h.packet_id, h.source_timer, h.destination_timer) == (
            pia["encryption"] == 2,
            pia["connection_id"],
            pia["packet_id"],
            pia["source_timer"],
            pia["destination_timer"],
        )
        assert h.tag.hex() == pia["hmac_md5"]
        assert len(packet.messages) == pia["message_count"]
        assert [_message_fields(m) for m in packet.messages] == [_expected_message(e) for e in pia["messages"]]
        report = codec.inspect(data, "0.0.0.0")
        assert report.authenticated is True
        assert report.messages == packet.messages
        # Re-encode from the parsed fields, recomputing the HMAC: byte identical.
        assert codec.encode(packet, "0.0.0.0") == data
        # ... also when the packet is rebuilt from scratch (no carried-over trailer).
        rebuilt = Packet(
            attrs.evolve(h, tag=b""),
            tuple(
                Message(
                    m.protocol_type,
                    m.protocol_port,
                    m.payload,
                    m.flags,
                    m.destination,
                    m.source_constant_id,
                    m.source_station_index,
                    m.reserved,
                )
                for m in packet.messages
            ),
        )
        assert codec.encode(rebuilt, "0.0.0.0") == data
    assert seen == 17


def test_mgba_any_flipped_bit_fails_authentication(mgba: list[tuple[dict, dict]]) -> None:
    codec = PacketCodec(P53, hmac_key=HMAC_KEY)
    for frame, exp in mgba:
        if exp["pia"] is None:
            continue
        data = bytes.fromhex(frame["hex"])
        for i in range(len(data)):
            for bit in (0x01, 0x80):
                bad = bytearray(data)
                bad[i] ^= bit
                with pytest.raises(DecodeError) as info:
                    codec.decode(bytes(bad), "0.0.0.0")
                # Flips in the magic or the encryption byte break the header first;
                # everything else reaches the HMAC check.
                if i >= 5:
                    assert isinstance(info.value, AuthenticationError), (frame["name"], i, bit)
                report = codec.inspect(bytes(bad), "0.0.0.0")
                assert report.error is not None
                assert report.authenticated is not True


def test_mgba_wrong_key_fails(mgba: list[tuple[dict, dict]]) -> None:
    codec = PacketCodec(P53, hmac_key=b"PokemonSIP")
    frame, exp = mgba[1]
    assert exp["pia"] is not None
    data = bytes.fromhex(frame["hex"])
    with pytest.raises(AuthenticationError):
        codec.decode(data, "0.0.0.0")
    report = codec.inspect(data, "0.0.0.0")
    assert report.authenticated is False
    assert report.messages is None
