"""pianode's Lua dissector in the real tshark, against the shared captures and pianode recordings.

Every comparison is with an independent source: the expected files of
../shared/captures (written from the public format descriptions, not by
pianode), or ``pianode decode --format jsonl`` over the same bytes.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import attrs
import pytest
from wireshark_tools import as_int, decode_jsonl, dissect, message_payloads, pianode

from pianode.capture.pcap import PcapWriter, open_capture, parse_endpoint
from pianode.capture.session_file import load_session
from protocols.pia.message import deflate_payload
from protocols.pia.packet import Packet, PacketCodec
from protocols.pia.versions import Proto, profile_for

MSG_FIELDS = (
    "pia.msg.flags",
    "pia.msg.protocol_type",
    "pia.msg.protocol",
    "pia.msg.protocol_port",
    "pia.msg.destination",
    "pia.msg.length",
)


def _messages_from_tshark(frame: dict[str, list[str]], with_source: bool, with_station: bool) -> list[dict[str, Any]]:
    n = len(frame.get("pia.msg.protocol_type", []))
    for f in MSG_FIELDS:
        assert len(frame.get(f, [])) == n, f"frame {frame['frame.number']}: {f} {frame.get(f)} for {n} messages"
    payloads = message_payloads(frame)
    out = []
    for i in range(n):
        m = {
            "flags": as_int(frame["pia.msg.flags"][i]),
            "protocol_type": as_int(frame["pia.msg.protocol_type"][i]),
            "protocol": frame["pia.msg.protocol"][i],
            "protocol_port": as_int(frame["pia.msg.protocol_port"][i]),
            "destination": as_int(frame["pia.msg.destination"][i]),
            "payload": payloads[i],
        }
        if with_source:
            m["source_constant_id"] = as_int(frame["pia.msg.source_constant_id"][i])
        if with_station:
            m["source_station_index"] = as_int(frame["pia.msg.source_station_index"][i])
        out.append(m)
    return out


def _messages_from_decode(row: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for m in row.get("messages") or []:
        d = {
            "flags": m["flags"],
            "protocol_type": m["protocol_type"],
            "protocol": m["protocol"] or "unknown",
            "protocol_port": m["protocol_port"],
            "destination": m["destination"],
            "payload": m["payload"],
        }
        if m.get("source_constant_id") is not None:
            d["source_constant_id"] = m["source_constant_id"]
        if "source_station_index" in m:
            d["source_station_index"] = m["source_station_index"]
        out.append(d)
    return out


SUB_FIELDS = (
    "pia.station.ack_id", "pia.station.connection_id", "pia.station.is_inverse", "pia.station.platform",
    "pia.station.target_constant_id", "pia.station.target_variable_id",
    "pia.mesh.ack_id", "pia.mesh.joiner_index", "pia.rtt.time",
)


def _decoded_values(row: dict[str, Any]) -> dict[str, list[int]]:
    """Sub-protocol values pianode decode found, in message order, as the dissector names them."""
    out: dict[str, list[int]] = {f: [] for f in SUB_FIELDS}
    version = tuple(int(x) for x in (row.get("profile") or "0.0").split("."))
    for m in row.get("messages") or []:
        d = m.get("decoded") or {}
        kind = d.get("type")
        if kind in ("Ack", "ConnectionRequest"):
            out["pia.station.ack_id"].append(d["ack_id"])
        if kind == "ConnectionRequest":
            if version <= (5, 26):
                out["pia.station.connection_id"].append(d["connection_id"])
                out["pia.station.is_inverse"].append(int(d["is_inverse"]))
            else:
                out["pia.station.platform"].append(d["platform"])
            if version >= (5, 2):
                out["pia.station.target_constant_id"].append(d["target_constant_id"])
            if version >= (5, 7):
                out["pia.station.target_variable_id"].append(d["target_variable_id"])
        if kind in ("JoinRequest", "JoinResponse"):
            out["pia.mesh.ack_id"].append(d["ack_id"])
        if kind == "JoinResponse":
            out["pia.mesh.joiner_index"].append(d["joiner_index"])
        if kind == "WindowedMesh" and isinstance(d.get("message"), dict) and "joiner_index" in d["message"]:
            out["pia.mesh.ack_id"].append(d["message"]["ack_id"])
            out["pia.mesh.joiner_index"].append(d["message"]["joiner_index"])
        if kind == "RttMessage":
            out["pia.rtt.time"].append(d["time"])
    return out


def _compare_messages(export: Path, rows: list[dict[str, Any]]) -> int:
    """Every message of every datagram: the dissector's fields equal pianode decode's; returns the message count."""
    sub = SUB_FIELDS
    fields = (*MSG_FIELDS, "pia.msg.payload", "pia.msg.source_constant_id", "pia.msg.source_station_index",
              "pia.lib_version", *sub)
    frames = dissect(export, *fields)
    assert len(frames) == len(rows)
    total = 0
    for frame, row in zip(frames, rows, strict=True):
        assert as_int(frame["frame.number"][0]) == row["index"]
        want = _messages_from_decode(row)
        with_source = bool(want) and "source_constant_id" in want[0]
        with_station = bool(want) and "source_station_index" in want[0]
        got = _messages_from_tshark(frame, with_source, with_station)
        assert got == want, f"datagram {row['index']}"
        if row["kind"] == "pia" and row.get("profile"):
            assert frame["pia.lib_version"] == [row["profile"]]
        decoded = _decoded_values(row)
        for f in sub:
            assert [as_int(x) for x in frame.get(f, [])] == decoded[f], f"datagram {row['index']}: {f}"
        total += len(want)
    return total


# --------------------------------------------------------------------------
# nDPI (Splatoon 2, Pia <= 5.6, no key): every header field of every Pia packet


def test_ndpi_every_pia_header_equals_the_expected_file(captures: Path) -> None:
    expected = json.loads((captures / "nDPI-nintendo.expected.json").read_text())
    columns = expected["packets_columns"]
    assert columns[:1] == ["frame"]
    frames = dissect(
        captures / "nDPI-nintendo.pcap",
        "pia.encryption", "pia.connection_id", "pia.packet_id", "pia.source_timer", "pia.destination_timer",
        "udp.length", "pia.format", "pia.magic",
        display_filter="pia",
    )
    got = []
    for f in frames:
        assert f["pia.format"] == ["H-A"]
        assert f["pia.magic"] == ["0x32ab9864"]
        got.append([
            as_int(f["frame.number"][0]),
            as_int(f["pia.encryption"][0]),
            as_int(f["pia.connection_id"][0]),
            as_int(f["pia.packet_id"][0]),
            as_int(f["pia.source_timer"][0]),
            as_int(f["pia.destination_timer"][0]),
            as_int(f["udp.length"][0]) - 8,
        ])
    want = [[row[0], row[2], row[3], row[4], row[5], row[6], row[7]] for row in expected["packets"]]
    assert len(want) == expected["counts"]["pia"] == 842
    assert got == want
    # The 27 other UDP datagrams (DNS, NNCS, zero probes) are not taken for PRUDP, LAN or LDN.
    assert dissect(captures / "nDPI-nintendo.pcap", display_filter="prudp || pia.lan.browse.type || pia.ldn.kind") == []


def test_ndpi_plain_packets_messages_equal_the_expected_file(captures: Path) -> None:
    expected = json.loads((captures / "nDPI-nintendo.expected.json").read_text())
    plain = {p["frame"]: p for p in expected["plain_packets"]}
    frames = dissect(
        captures / "nDPI-nintendo.pcap", *MSG_FIELDS, "pia.msg.payload", "pia.msg.source_constant_id",
        "pia.msg.source_station_index",
        "pia.msg.reserved", "pia.hmac", "pia.body", display_filter="pia.encryption == 1",
    )
    assert sorted(as_int(f["frame.number"][0]) for f in frames) == sorted(plain)
    for f in frames:
        p = plain[as_int(f["frame.number"][0])]
        got = _messages_from_tshark(f, True, True)
        want = [
            {
                "flags": m["flags"], "protocol_type": m["protocol_type"], "protocol_port": m["protocol_port"],
                "destination": m["destination"], "payload": m["payload_hex"],
                "source_constant_id": m["source_constant_id"], "source_station_index": m["source_station_index"],
            }
            for m in p["messages"]
        ]
        for g in got:
            g.pop("protocol")
        assert got == want
        assert [as_int(x) for x in f["pia.msg.reserved"]] == [m["reserved"] for m in p["messages"]]
        assert f["pia.hmac"] == [p["hmac_md5"]]
        assert "pia.body" not in f


def test_ndpi_encrypted_bodies_are_marked_not_read(captures: Path) -> None:
    frames = dissect(captures / "nDPI-nintendo.pcap", "pia.body", "pia.msg.payload", "_ws.expert.message",
                     display_filter="pia.encryption == 2")
    assert len(frames) == 837
    for f in frames:
        assert "pia.msg.payload" not in f
        assert len(f["pia.body"]) == 1
        assert any("decrypted-pcap" in m for m in f["_ws.expert.message"])


# --------------------------------------------------------------------------
# mgba frames (3DS, Pia 4.10, HMAC key PokemonSIO) through --decrypted-pcap


def test_mgba_export_messages_equal_pianode_decode(captures: Path, tmp_path: Path) -> None:
    src = str(captures / "mgba-uds-frames.jsonl")
    keys = ("--version", "4.10", "--hmac-key", "PokemonSIO")
    out = tmp_path / "mgba.pcapng"
    status, _, err = pianode("decode", src, *keys, "--decrypted-pcap", str(out))
    assert status == 0, err
    assert "wrote 18 datagrams" in err
    rows = decode_jsonl(src, *keys)
    assert [r["kind"] for r in rows].count("pia") == 17
    assert _compare_messages(out, rows) == 45
    frames = dissect(out, "pia.auth", "pia.body_state", "pia.msg.protocol_type")
    assert [f.get("pia.auth") for f in frames[1:]] == [["ok"]] * 17
    assert [f.get("pia.body_state") for f in frames[1:]] == [["plain"]] * 17
    # The expected file's protocol table (45 messages).
    counted = Counter(as_int(t) for f in frames for t in f.get("pia.msg.protocol_type", []))
    assert counted == {0x0100: 7, 0x0200: 4, 0x0210: 2, 0x0600: 4, 0x3000: 28}


# --------------------------------------------------------------------------
# pianode recordings of each generation the node speaks, exported decrypted, with zlib messages added


def _record(tmp_path: Path, version: str, network: str = "lan") -> tuple[Path, Path]:
    pcap = tmp_path / f"rec-{version}.pcap"
    status, _, err = pianode("mesh", "-n", "3", "--version", version, "--duration", "0.3", "--messages", "3",
                             "--network", network, "--record", str(pcap), "--format", "jsonl", "--seed", "7")
    assert status == 0, err
    # The recording holds the discovery traffic too (LAN browse); these tests read its Pia packets
    # (the dissector's LAN browse tests read browse datagrams of their own).
    with open_capture(str(pcap)) as cap:
        datagrams = [d for d in cap if d.data[:4] == PIA_MAGIC]
    with pcap.open("wb") as f:
        w = PcapWriter(f)
        for d in datagrams:
            w.write_udp(d.data, d.src, d.dst, d.time)
    return pcap, tmp_path / f"rec-{version}.session.json"


PIA_MAGIC = bytes.fromhex("32ab9864")


def _with_zlib_messages(pcap: Path, session: Path, out: Path) -> int:
    """The recording plus packets with zlib-compressed messages, sealed with the session's key; returns how many."""
    ctx = load_session(str(session), {})
    profile = ctx.profile
    assert profile is not None
    zlib_flag = profile.zlib_flag or 0  # no zlib flag up to 5.12: the messages are added uncompressed
    keys = ctx.keys_for(profile)
    codec = PacketCodec(profile, keys.session_key, keys.nonce_builder)
    with open_capture(str(pcap)) as cap:
        datagrams = list(cap)
    added = 0
    with out.open("wb") as f:
        w = PcapWriter(f)
        for d in datagrams:
            w.write_udp(d.data, d.src, d.dst, d.time)
        t = datagrams[-1].time or 0.0
        unreliable = profile.protocol_id(Proto.UNRELIABLE)
        for n, d in enumerate([x for x in datagrams if not x.dst.startswith("127.255.")][:3]):
            ip = parse_endpoint(d.src)[0]
            packet = codec.decode(d.data, ip)
            m = packet.messages[0]
            big = bytes(range(256)) * (n + 2)
            zm = attrs.evolve(m, protocol_type=unreliable, protocol_port=n,
                              payload=deflate_payload(big) if zlib_flag else big, flags=m.flags | zlib_flag,
                              presence=None)
            plain = attrs.evolve(m, protocol_type=unreliable, protocol_port=9, payload=b"after", presence=None)
            header = attrs.evolve(packet.header, packet_id=(packet.header.packet_id + 1000) & 0xFFFF,
                                  nonce=(0x7000 + n).to_bytes(8, "big"))
            data = codec.encode(Packet(header, (zm, plain, zm), packet.footer), ip)
            t += 0.01
            w.write_udp(data, d.src, d.dst, t)
            added += 1
    return added


# The node speaks 5.7-5.45: one version per header and message format among them (5.18 and 5.29 are the
# tested profiles of the node).
# LAN for each, and the other networks' nonces (LDN with MACs, NEX with the gathering id) on the tested profiles.
RECORDED = [(v, "lan") for v in ("5.9", "5.11", "5.14", "5.18", "5.23", "5.29", "5.45")] + [
    ("5.29", "ldn"), ("5.18", "nex")]


@pytest.mark.parametrize(("version", "network"), RECORDED)
def test_recording_export_messages_equal_pianode_decode(tmp_path: Path, version: str, network: str) -> None:
    pcap, session = _record(tmp_path, version, network)
    full = tmp_path / "with-zlib.pcap"
    added = _with_zlib_messages(pcap, session, full)
    out = tmp_path / "decrypted.pcapng"
    status, _, err = pianode("decode", str(full), "--session", str(session), "--decrypted-pcap", str(out))
    assert status == 0, err
    rows = decode_jsonl(str(full), "--session", str(session))
    assert all(r["kind"] == "pia" and r["authenticated"] is True and r["error"] is None for r in rows)
    zlib_messages = 2 * added if profile_for(version).zlib_flag is not None else 0
    assert len([m for r in rows for m in r["messages"] if "compressed_size" in m]) == zlib_messages
    assert _compare_messages(out, rows) >= len(rows)
    frames = dissect(out, "pia.body_state", "pia.msg.zlib", "pia.msg.compressed_payload", "pia.version",
                     "pia.format")
    assert {f["pia.body_state"][0] for f in frames} == {"decrypted"}
    assert sum(len(f.get("pia.msg.zlib", [])) for f in frames) == zlib_messages
    p = profile_for(version)
    assert {f["pia.format"][0] for f in frames} == {p.header_format.value}
    assert {f.get("pia.version", [None])[0] for f in frames} == {None if p.header_version is None
                                                                  else str(p.header_version)}


def test_recording_failed_authentication_is_kept_and_marked(tmp_path: Path) -> None:
    pcap, session = _record(tmp_path, "5.29")
    with open_capture(str(pcap)) as cap:
        datagrams = list(cap)
    bad = bytearray(datagrams[0].data)
    bad[-1] ^= 0x01  # last ciphertext byte
    tampered = tmp_path / "tampered.pcap"
    with tampered.open("wb") as f:
        w = PcapWriter(f)
        w.write_udp(bytes(bad), datagrams[0].src, datagrams[0].dst, 0.0)
        w.write_udp(datagrams[1].data, datagrams[1].src, datagrams[1].dst, 0.1)
    out = tmp_path / "out.pcapng"
    status, _, err = pianode("decode", str(tampered), "--session", str(session), "--decrypted-pcap", str(out))
    assert status == 0, err
    assert "1 failed authentication" in err
    frames = dissect(out, "pia.auth", "pia.body_state", "pia.msg.payload", "pia.body", "udp.payload",
                     "_ws.expert.message", "frame.comment")
    assert frames[0]["pia.auth"] == ["failed"] and frames[0]["pia.body_state"] == ["encrypted"]
    assert frames[0]["udp.payload"] == [bad.hex()]
    assert "pia.msg.payload" not in frames[0]
    assert any("Authentication failed" in m for m in frames[0]["_ws.expert.message"])
    assert any("bytes kept as captured" in c for c in frames[0]["frame.comment"])
    assert frames[1]["pia.auth"] == ["ok"] and frames[1]["pia.body_state"] == ["decrypted"]


# --------------------------------------------------------------------------
# GRO PRUDP logs (Quazal v0): type, flags and sequence of every packet


GRO_FILES = ("GRO_Backend", "GRO_DedicatedServer", "GRP_Backend", "GRP_DedicatedServer")
FLAG_BITS = {"ACK": 1, "RELIABLE": 2, "NEED_ACK": 4, "HAS_SIZE": 8, "MULTI_ACK": 0x200}


@pytest.mark.parametrize("name", GRO_FILES)
def test_gro_prudp_type_flags_sequence_of_every_packet(captures: Path, tmp_path: Path, name: str) -> None:
    src = str(captures / "gro-prudp" / f"{name}_packetLog.jsonl")
    args = ("--prudp-variant", "quazal-v0", "--access-key", "8dtRv2oj")
    out = tmp_path / f"{name}.pcapng"
    status, _, err = pianode("decode", src, *args, "--decrypted-pcap", str(out))
    assert status == 0, err
    rows = decode_jsonl(src, *args)
    frames = dissect(out, "prudp.type", "prudp.flags", "prudp.sequence_id", "prudp.checksum.status",
                     prefs=("prudp.access_key:8dtRv2oj",))
    assert len(frames) == len(rows)
    combos: Counter[str] = Counter()
    names = {0: "SYN", 1: "CONNECT", 2: "DATA", 3: "DISCONNECT", 4: "PING", 5: "USER", 6: "ROUTE", 7: "RAW"}
    for frame, row in zip(frames, rows, strict=True):
        want = [(p["type"], sum(FLAG_BITS[f] for f in p["flags"]), p["sequence_id"]) for p in row["prudp"]]
        got = [
            (names[int(t)], as_int(f) & 0x20F, int(s))
            for t, f, s in zip(frame["prudp.type"], frame["prudp.flags"], frame["prudp.sequence_id"], strict=True)
        ]
        assert got == want, f"record {row['index']}"
        assert frame["prudp.checksum.status"] == ["ok"] * len(want)
        for t, f, _ in got:
            combos[f"{t}|{'+'.join(n for n, bit in FLAG_BITS.items() if f & bit) or '-'}"] += 1
    expected = json.loads((captures / "gro-prudp" / "expected.json").read_text())["files"][f"{name}_packetLog.bin"]
    assert dict(combos) == expected["type_flag_combinations"]
    assert sum(combos.values()) == expected["packets"] == expected["checksum_ok"]
