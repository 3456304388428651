"""``pianode decode``: the decode engine and the command, on real captures and spec vectors."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from lan_exchange import SMM2, LanHost, lan_exchange

from pianode.capture.pcap import Datagram, open_capture
from pianode.cli.main import main
from pianode.capture.decode import Decoder, DecodeResult, candidate_profiles, to_jsonable
from pianode.capture.session_file import load_session
from protocols.pia.header import PacketHeader
from protocols.pia.message import Message, deflate_payload
from protocols.pia.nonce import nonce_builder
from protocols.pia.packet import Packet, PacketCodec
from protocols.pia.versions import NetworkType, Proto, profile_for

SPLATOON2 = "ee182a63e216cdb1f51ad4bed8cf6508"

# Spec §8.2 D9: a 5.18 LAN packet under the D4 key with the D8 nonce.
D9 = bytes.fromhex(
    "32ab9864842a00010102030405060708778afaef4997d7fd9055bb15b24438d4"
    "503f31be9b808ca45ea7bf5527172f0c2705d0a93c1e471662a4ac5f28f7f43d0fa6d089d1fcdf45dee4c2d7912791f7"
)
D9_LAN = {"network": "lan", "game_key": SPLATOON2, "session_param": bytes(range(32)).hex()}


def decode_file(path: Path | str, **session: Any) -> tuple[list[DecodeResult], Decoder]:
    dec = Decoder(load_session(None, session))
    with open_capture(path) as cap:
        return [dec.decode(d) for d in cap], dec


def one(data: bytes, src: str | None = "192.168.1.10:49152", **session: Any) -> DecodeResult:
    return Decoder(load_session(None, session)).decode(Datagram(index=1, data=data, src=src, dst="192.168.1.20:49152"))


# --------------------------------------------------------------------------
# nDPI: Splatoon 2, <= 5.6 headers, no key


def test_ndpi_every_pia_header_matches_the_expected_file(captures: Path) -> None:
    expected = json.loads((captures / "nDPI-nintendo.expected.json").read_text())
    results, dec = decode_file(captures / "nDPI-nintendo.pcap")
    pia = [r for r in results if r.kind == "pia"]
    counts = expected["counts"]
    assert len(results) == counts["udp_datagrams"]
    assert len(pia) == counts["pia"] == 842
    assert sum(r.header is not None and r.header["encrypted"] for r in pia) == counts["pia_encrypted"] == 837
    assert sum(r.header is not None and not r.header["encrypted"] for r in pia) == counts["pia_plain"] == 5
    assert dec.kinds == {"pia": 842, "unknown": 27}
    cols = expected["packets_columns"]
    rows = [dict(zip(cols, row, strict=True)) for row in expected["packets"]]
    got = [
        {
            "frame": r.frame,
            "encryption": 2 if r.header["encrypted"] else 1,  # type: ignore[index]
            "connection_id": r.header["connection_id"],  # type: ignore[index]
            "packet_id": r.header["packet_id"],  # type: ignore[index]
            "source_timer": r.header["source_timer"],  # type: ignore[index]
            "destination_timer": r.header["destination_timer"],  # type: ignore[index]
            "udp_payload_length": r.size,
        }
        for r in pia
    ]
    assert got == [{k: v for k, v in row.items() if k != "flow"} for row in rows]
    # No key: nothing can be authenticated, and nothing is an error.
    assert {r.authenticated for r in results} == {None}
    assert [r.error for r in results if r.error is not None] == []
    assert {(r.profile, r.profile_assumed, r.header["format"]) for r in pia} == {("5.4", True, "H-A")}  # type: ignore[index]
    assert all(r.messages is None for r in pia if r.header["encrypted"])  # type: ignore[index]


def test_ndpi_plain_packets_messages_match(captures: Path) -> None:
    expected = json.loads((captures / "nDPI-nintendo.expected.json").read_text())
    results, _ = decode_file(captures / "nDPI-nintendo.pcap")
    by_frame = {r.frame: r for r in results}
    assert len(expected["plain_packets"]) == 5
    for plain in expected["plain_packets"]:
        r = by_frame[plain["frame"]]
        assert (r.src, r.dst, r.size) == (plain["src"], plain["dst"], plain["length"])
        assert r.header is not None and r.header["tag"] == plain["hmac_md5"]
        assert r.messages is not None
        assert [
            {
                "flags": m["flags"],
                "source_station_index": m["source_station_index"],
                "payload_size": len(m["payload"]) // 2,
                "destination": m["destination"],
                "source_constant_id": m["source_constant_id"],
                "protocol_type": m["protocol_type"],
                "protocol_port": m["protocol_port"],
                "payload_hex": m["payload"],
            }
            for m in r.messages
        ] == [{k: v for k, v in m.items() if k not in ("offset", "reserved")} for m in plain["messages"]]


def test_ndpi_non_pia_datagrams_are_unknown_with_their_bytes(captures: Path) -> None:
    expected = json.loads((captures / "nDPI-nintendo.expected.json").read_text())
    results, _ = decode_file(captures / "nDPI-nintendo.pcap")
    by_frame = {r.frame: r for r in results}
    for other in expected["non_pia_udp"]:
        r = by_frame[other["frame"]]
        assert (r.kind, r.header, r.messages, r.error) == ("unknown", None, None, None)
        if other["hex"] is not None:
            assert r.data == other["hex"]


# --------------------------------------------------------------------------
# mgba: 3DS frames signed with the public HMAC key


def _mgba(captures: Path, **session: Any) -> tuple[list[DecodeResult], list[dict[str, Any]]]:
    expected = json.loads((captures / "mgba-uds-frames.expected.json").read_text())["frames"]
    results, _ = decode_file(captures / "mgba-uds-frames.jsonl", **session)
    return results, expected


@pytest.mark.parametrize("hmac_key", ["PokemonSIO", "hex:506f6b656d6f6e53494f", "ascii:PokemonSIO"])
def test_mgba_every_frame_authenticates_and_matches(captures: Path, hmac_key: str) -> None:
    results, expected = _mgba(captures, version="5.3", hmac_key=hmac_key)
    assert len(results) == len(expected) == 18
    pia_frames = 0
    for r, e in zip(results, expected, strict=True):
        assert (r.name, r.time, r.src, r.dst) == (e["name"], e["time"], None, None)
        if e["pia"] is None:
            assert (r.kind, r.authenticated, r.data) == ("unknown", None, "0200000000000000")
            continue
        pia_frames += 1
        p = e["pia"]
        assert (r.kind, r.profile, r.profile_assumed, r.authenticated, r.error) == ("pia", "5.3", False, True, None)
        h = r.header
        assert h == {
            "format": "H-A",
            "encrypted": p["encryption"] == 2,
            "packet_id": p["packet_id"],
            "connection_id": p["connection_id"],
            "source_timer": p["source_timer"],
            "destination_timer": p["destination_timer"],
            "tag": p["hmac_md5"],
        }
        assert r.messages is not None and len(r.messages) == p["message_count"]
        for m, em in zip(r.messages, p["messages"], strict=True):
            assert (m["flags"], m["source_station_index"], m["destination"], m["source_constant_id"]) == (
                em["flags"], em["source_station_index"], em["destination"], em["source_constant_id"]
            )
            assert (m["protocol_type"], m["protocol_port"], m["payload"]) == (
                em["protocol_type"], em["protocol_port"], em["payload_hex"]
            )
    assert pia_frames == 17


def test_mgba_version_detected_when_not_given(captures: Path) -> None:
    results, _ = _mgba(captures, hmac_key="PokemonSIO")
    pia = [r for r in results if r.kind == "pia"]
    assert len(pia) == 17
    assert {(r.profile, r.profile_assumed, r.authenticated) for r in pia} == {("5.4", True, True)}


def test_mgba_one_flipped_bit_fails_authentication_not_the_run(captures: Path) -> None:
    lines = (captures / "mgba-uds-frames.jsonl").read_text().splitlines()
    frames = [json.loads(line) for line in lines]
    pia = [f for f in frames if f["hex"].startswith("32ab9864")]
    dec = Decoder(load_session(None, {"version": "5.3", "hmac_key": "PokemonSIO"}))
    checked = 0
    for n, f in enumerate(pia):
        data = bytearray(bytes.fromhex(f["hex"]))
        for pos in (6, 13, len(data) // 2, len(data) - 17, len(data) - 1):  # header, message, trailer
            bad = bytearray(data)
            bad[pos] ^= 1 << (n % 8)
            r = dec.decode(Datagram(index=n, data=bytes(bad)))
            assert r.kind == "pia" and r.authenticated is False
            assert r.error is not None and r.error.startswith("authentication failed: HMAC-MD5 trailer mismatch")
            checked += 1
        assert dec.decode(Datagram(index=n, data=bytes(data))).authenticated is True
    assert checked == 17 * 5


# --------------------------------------------------------------------------
# GCM eras, spec vector D9 and packets built with the packet codec


def test_d9_decrypts_with_keys_derived_from_the_session() -> None:
    r = one(D9, version="5.18", **D9_LAN)
    assert (r.kind, r.authenticated, r.error, r.profile, r.profile_assumed) == ("pia", True, None, "5.18", False)
    assert r.header == {
        "format": "H-C", "encrypted": True, "packet_id": 1, "version": 4, "connection_id": 0x2A,
        "nonce": "0102030405060708", "tag": "778afaef4997d7fd9055bb15b24438d4",
    }
    assert r.messages == [{
        "flags": 1, "protocol_type": 0x68, "protocol_port": 0, "protocol": "unreliable", "destination": 2,
        "source_constant_id": 0xC0A8010A0000C000, "payload": b"hello pia".hex(),
    }]


def test_d9_wrong_key_wrong_source_and_no_key() -> None:
    bad = one(D9, version="5.18", network="lan", session_key="00" * 16)
    assert (bad.authenticated, bad.messages) == (False, None)
    assert bad.error is not None and bad.error.startswith("authentication failed")
    moved = one(D9, src="192.168.1.11:49152", version="5.18", **D9_LAN)  # the nonce uses the source IP
    assert moved.authenticated is False
    nokey = one(D9)
    assert (nokey.authenticated, nokey.messages, nokey.error) == (None, None, None)
    assert (nokey.profile, nokey.profile_assumed) == ("5.21", True)
    no_network = one(D9, session_key="9f1bba38de3b1df42ab5b29e7844d207")
    assert no_network.authenticated is None
    assert no_network.error is not None and "network type" in no_network.error


def test_d9_version_detected_with_a_key() -> None:
    r = one(D9, network="lan", session_key="9f1bba38de3b1df42ab5b29e7844d207")
    assert (r.authenticated, r.profile, r.profile_assumed) == (True, "5.21", True)
    assert r.messages is not None and r.messages[0]["payload"] == b"hello pia".hex()


LDN_MAC = {"192.168.1.10": "02:00:00:00:00:01"}
CASES = [
    # version, network settings, session settings for the decoder
    ("5.10", {"network": NetworkType.NEX, "gathering_id": 0x123456}, {"network": "nex", "gathering_id": "0x123456"}),
    ("5.17", {"network": NetworkType.LAN}, {"network": "lan"}),
    ("5.26", {"network": NetworkType.LDN, "network_id": 0x11223344, "macs": LDN_MAC},
     {"network": "ldn", "network_id": 0x11223344, "macs": LDN_MAC}),
    ("5.45", {"network": NetworkType.LAN}, {"network": "lan"}),
    ("6.23", {"network": NetworkType.LDN, "network_id": 0xF5A6AA3A}, {"network": "ldn", "network_id": 0xF5A6AA3A}),
    ("6.30", {"network": NetworkType.NPLN, "network_id": 77}, {"network": "npln", "network_id": 77}),
    ("6.34", {"network": NetworkType.LAN}, {"network": "lan"}),
]
KEY = bytes(range(16))


def _build(version: str, net: dict[str, Any], *, zlib: bool = False) -> tuple[bytes, Packet]:
    return _build_from(version, net, "192.168.1.10", zlib=zlib)


def _build_from(version: str, net: dict[str, Any], source: str, *, zlib: bool = False) -> tuple[bytes, Packet]:
    p = profile_for(version)
    builder = nonce_builder(p, **net)
    codec = PacketCodec(p, KEY, builder)
    payload = b"payload " * 9
    flags = p.bitmap_flag
    wire = payload
    if zlib:
        assert p.zlib_flag is not None
        flags |= p.zlib_flag
        wire = deflate_payload(payload)
    src_id = None if p.message_format.value in ("M-F", "M-G") else 0x42
    dest = 0 if p.message_format.value == "M-G" else 2
    proto = p.protocol_id(Proto.UNRELIABLE)
    msgs = (
        Message(proto, 1, wire, flags=flags, destination=dest, source_constant_id=src_id),
        Message(proto, 2, b"xy", flags=p.bitmap_flag, destination=dest, source_constant_id=src_id),
    )
    if p.has_connection_id:
        header = PacketHeader(True, 7, connection_id=99, nonce=b"\x10" * 8,
                              source_timer=5 if p.has_timers else None, destination_timer=6 if p.has_timers else None)
    else:
        header = PacketHeader(True, 7, destination_variable_id=0x2345, source_variable_id=0x1234, nonce=b"\x10" * 8)
    footer = (0x2345, 0x3456) if p.footer != "none" else ()
    packet = Packet(header, msgs, footer)
    return codec.encode(packet, source), packet


@pytest.mark.parametrize(("version", "net", "session"), CASES, ids=[c[0] for c in CASES])
def test_gcm_eras_decode_with_and_without_a_version(version: str, net: dict[str, Any], session: dict[str, Any]) -> None:
    data, packet = _build(version, net)
    for given_version in (version, None):
        r = one(data, version=given_version, session_key=KEY.hex(), **session)
        assert (r.kind, r.authenticated, r.error) == ("pia", True, None), (given_version, r.error)
        assert r.profile_assumed is (given_version is None)
        assert r.header is not None and r.header["packet_id"] == 7
        assert r.header.get("footer", []) == list(packet.footer)
        assert r.messages is not None
        assert [bytes.fromhex(m["payload"]) for m in r.messages] == [m.payload for m in packet.messages]
        assert [m["protocol_port"] for m in r.messages] == [1, 2]
    # The same bytes without a key: header only, no verdict, no error.
    r = one(data)
    assert (r.authenticated, r.messages, r.error) == (None, None, None)
    assert r.header is not None and r.header["format"] == profile_for(version).header_format.value


def test_zlib_flagged_payloads_are_shown_inflated() -> None:
    data, _ = _build("5.18", {"network": NetworkType.LAN}, zlib=True)
    r = one(data, version="5.18", network="lan", session_key=KEY.hex())
    assert r.authenticated is True and r.messages is not None
    first = r.messages[0]
    assert bytes.fromhex(first["payload"]) == b"payload " * 9
    assert first["compressed_size"] == len(deflate_payload(b"payload " * 9)) and first["flags"] & 0x10


def test_candidate_profiles_follow_byte_four() -> None:
    names = lambda data: [p.name for p in candidate_profiles(data)]  # noqa: E731
    assert names(D9) == ["5.21"]
    assert names(bytes.fromhex("32ab9864") + bytes([0x83]) + bytes(40)) == ["5.12", "5.17"]
    assert names(bytes.fromhex("32ab9864") + bytes([0x8B]) + bytes(40)) == ["6.23"]
    assert names(bytes.fromhex("32ab9864") + bytes([0x7F]) + bytes(40)) == []
    assert names(b"\x00\x01") == []
    r = one(bytes.fromhex("32ab9864") + bytes([0x7F]) + bytes(40))
    assert r.kind == "pia"
    assert r.error == "cannot tell the Pia version: byte 4 = 0x7f names no documented header; give --version"


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=200), st.booleans())
def test_any_bytes_give_a_result(tail: bytes, magic: bool) -> None:
    data = (bytes.fromhex("32ab9864") if magic else b"") + tail
    for session in ({}, {"version": "5.18", **D9_LAN}, {"hmac_key": "PokemonSIO"}):
        r = one(data, **session)
        assert r.kind in ("pia", "unknown", "lan-browse-request", "lan-browse-reply", "ldn-discovery")
        assert r.error is None or "\n" not in r.error


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from([(0, 0x23A, 0), (0, 0x23A, 0x12A), (0, 0x16, 0x12A), (0, 0x0E, 0x12A), (1, 1266, 0),
                     (1, 1297, 58), (1, 1298, 58), (1, 0x22D, 58)]),
    st.randoms(use_true_random=False),
)
def test_garbage_shaped_like_lan_browse_packets_gives_a_result(shape: tuple[int, int, int], rnd: Any) -> None:
    kind, size, tail = shape
    data = bytes([kind]) + size.to_bytes(4, "big") + rnd.randbytes(size + tail)
    if tail and rnd.random() < 0.5:  # a plausible challenge version byte
        data = data[: 5 + size] + bytes([rnd.choice([1, 2, 3])]) + data[6 + size :]
    r = Decoder(load_session(None, {"game_key": SMM2})).decode(
        Datagram(index=1, data=data, src="10.0.0.1:1", dst="10.0.0.255:30000")
    )
    assert r.kind == ("lan-browse-request" if kind == 0 else "lan-browse-reply")
    assert (r.lan is None) == (r.error is not None) or r.authenticated is False


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(["nintendo-v0", "nintendo-v1", "quazal-v0", "rendezvous"]), st.binary(max_size=120))
@example("nintendo-v0", b"\x00\x00\x00\x01" + bytes(12))  # a flag bit no member names (0x10)
def test_garbage_as_prudp_gives_a_result(variant: str, data: bytes) -> None:
    r = Decoder(load_session(None, {"prudp": {"variant": variant, "access_key": "ridfebb9"}})).decode(
        Datagram(index=1, data=data)
    )
    # Pia's magic is Pia whatever the session names (a console's capture holds both; no PRUDP packet starts so)
    assert r.kind in (("pia",) if data[:4] == bytes.fromhex("32ab9864") else ("prudp", "unknown"))
    assert (r.kind != "prudp") == (r.prudp is None)
    json.dumps(to_jsonable(r))  # the JSON view never fails either


# --------------------------------------------------------------------------
# PRUDP


def test_prudp_session_decodes_gro_logs(captures: Path) -> None:
    expected = json.loads((captures / "gro-prudp" / "expected.json").read_text())["files"]
    total = 0
    for name, facts in expected.items():
        results, dec = decode_file(
            captures / "gro-prudp" / name.replace(".bin", ".jsonl"),
            prudp={"variant": "quazal-v0", "access_key": "8dtRv2oj"},
        )
        assert dec.kinds == {"prudp": facts["records"]}
        assert sum(r.authenticated is True for r in results) == facts["checksum_ok"]
        types: dict[str, int] = {}
        for r in results:
            assert r.prudp is not None and r.error is None
            for p in r.prudp:
                types[p["type"]] = types.get(p["type"], 0) + 1
        assert types == facts["packets_per_type"]
        total += len(results)
    assert total == 1179


def test_prudp_wrong_access_key_is_reported_per_datagram(captures: Path) -> None:
    results, dec = decode_file(
        captures / "gro-prudp" / "GRO_Backend_packetLog.jsonl", prudp={"variant": "quazal-v0", "access_key": "nope"}
    )
    assert dec.kinds == {"prudp": 385}
    assert all(r.authenticated is False and r.error is not None for r in results)


# --------------------------------------------------------------------------
# The command


def run_cli(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(["decode", *argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_jsonl_over_ndpi(captures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli([str(captures / "nDPI-nintendo.pcap"), "--format", "jsonl"], capsys)
    assert (code, err) == (0, "")
    rows = [json.loads(line) for line in out.splitlines()]
    assert len(rows) == 869
    required = {"index", "time", "src", "dst", "kind", "header", "authenticated", "messages", "error"}
    assert all(required <= row.keys() for row in rows)
    assert sum(row["kind"] == "pia" for row in rows) == 842
    assert rows[0]["time"] == 1500731320.644357 and rows[0]["header"]["packet_id"] == 971


def test_cli_table_with_session_file(captures: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    session = tmp_path / "s.json"
    session.write_text(json.dumps({"version": "5.3", "hmac_key": "PokemonSIO"}))
    argv = [str(captures / "mgba-uds-frames.jsonl"), "--session", str(session), "--format", "table"]
    code, out, err = run_cli(argv, capsys)
    assert (code, err) == (0, "")
    assert out.count("auth ok") == 17
    assert "-- 18 datagrams (17 pia, 1 unknown); authenticated: 17 yes, 0 no, 1 not checked; 0 with errors" in out


def test_cli_flags_override_the_session_file(
    captures: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    session = tmp_path / "s.json"
    session.write_text(json.dumps({"version": "5.3", "hmac_key": "wrong key"}))
    args = [str(captures / "mgba-uds-frames.jsonl"), "--session", str(session), "--format", "jsonl"]
    _, out, _ = run_cli(args, capsys)
    assert {json.loads(line)["authenticated"] for line in out.splitlines()} == {False, None}
    _, out, _ = run_cli([*args, "--hmac-key", "PokemonSIO"], capsys)
    assert {json.loads(line)["authenticated"] for line in out.splitlines()} == {True, None}


def test_cli_prudp_flags(captures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        [str(captures / "gro-prudp" / "GRP_DedicatedServer_packetLog.jsonl"), "--prudp-variant", "quazal-v0",
         "--access-key", "8dtRv2oj", "--format", "jsonl"],
        capsys,
    )
    rows = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(rows) == 173 and all(r["kind"] == "prudp" and r["authenticated"] for r in rows)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["missing.pcap"], "pianode decode: cannot open missing.pcap: No such file or directory"),
        (["CAPTURE", "--session", "SESSION_BAD"], "is not JSON"),
        (["CAPTURE", "--session", "missing.json"], "cannot read session file missing.json"),
        (["CAPTURE", "--version", "9.99"], "Pia 9.99 is not documented"),
        (["CAPTURE", "--network", "wifi"], "network must be one of"),
        (["CAPTURE", "--session-key", "zz"], "--session-key must be 16 bytes"),
        (["CAPTURE", "--mac", "10.0.0.1"], "--mac takes IP=MAC"),
        (["CAPTURE", "--prudp-variant", "v9"], "unknown PRUDP variant"),
        (["NOT_A_CAPTURE"], "not a pcap, pcapng, JSON Lines or hex-lines file"),
    ],
)
def test_cli_bad_input_is_one_line_and_status_2(
    argv: list[str], message: str, captures: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "junk.bin").write_bytes(b"\x7fELF\x00\x00 not a capture")
    subst = {"CAPTURE": str(captures / "mgba-uds-frames.jsonl"), "SESSION_BAD": "bad.json", "NOT_A_CAPTURE": "junk.bin"}
    code, out, err = run_cli([subst.get(a, a) for a in argv], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and message in err and err.startswith("pianode decode: ")


def test_cli_subprocess_stdin_hex_and_no_traceback(tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "pianode", "decode", "-", "--version", "5.18", "--network", "lan",
           "--game-key", SPLATOON2, "--session-param", bytes(range(32)).hex()]
    # Without addresses the LAN nonce cannot use the sender's IP: JSON Lines give it.
    line = json.dumps({"hex": D9.hex(), "src": "192.168.1.10:49152", "dst": "192.168.1.255:49152", "time": 3})
    done = subprocess.run(cmd, input=f"{line}\n{D9.hex()}\n", capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(x) for x in done.stdout.splitlines()]
    assert [(r["authenticated"], r["src"]) for r in rows] == [(True, "192.168.1.10:49152"), (False, None)]
    bad = subprocess.run([sys.executable, "-m", "pianode", "decode", str(tmp_path / "nope.pcap")],
                         capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and bad.stderr.count("\n") == 1


def test_cli_subprocess_pcap_on_stdin(captures: Path) -> None:
    # tcpdump -w - | pianode decode -
    done = subprocess.run([sys.executable, "-m", "pianode", "decode", "-", "--flows"],
                          input=(captures / "nDPI-nintendo.pcap").read_bytes(), capture_output=True, timeout=60)
    assert done.returncode == 0 and done.stderr == b""
    assert len(done.stdout.splitlines()) == 16


def test_cli_truncated_capture_reports_what_it_read_then_exits_2(tmp_path: Path, captures: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    cut = tmp_path / "cut.pcap"
    cut.write_bytes((captures / "nDPI-nintendo.pcap").read_bytes()[:5000])
    code, out, err = run_cli([str(cut), "--format", "jsonl"], capsys)
    assert code == 2 and out.count("\n") > 5  # every readable datagram, then where it broke (as tshark does)
    assert err.count("\n") == 1
    assert err.startswith(f"pianode decode: {cut}: pcap record") and "cut short" in err


def test_table_rendering_of_every_kind(captures: Path) -> None:
    from pianode.cli.decode import render_row

    results, _ = decode_file(captures / "nDPI-nintendo.pcap")
    text = "\n".join(render_row(r, results[0].time) for r in results)
    assert "Pia 5.4? H-A enc conn=86 id=971 timers=38401/13280 auth ? 60 B" in text.splitlines()[0]
    assert "[0] nat(0x400):3 flags=0x08 dst=0x0 src=0x654d48 sta=253 16 B 4e41545465737449645f44756d6d7900" in text
    assert "unknown  16 B 00000065000000000000000000000000" in text
    prudp, _ = decode_file(captures / "gro-prudp" / "GRO_Backend_packetLog.jsonl",
                           prudp={"variant": "quazal-v0", "access_key": "8dtRv2oj"})
    assert "SYN NEED_ACK 0x3f→0x31 seq=0 session=0 0 B" in render_row(prudp[0])
    buf = io.StringIO()
    buf.write(render_row(one(D9, version="5.18", **D9_LAN)))
    assert "unreliable(0x68):0 flags=0x01 dst=0x2 src=0xc0a8010a0000c000 9 B 68656c6c6f20706961" in buf.getvalue()


# --------------------------------------------------------------------------
# Flows


def test_ndpi_flows_match_the_expected_id_progression(captures: Path) -> None:
    from pianode.capture.decode import FlowTracker

    expected = json.loads((captures / "nDPI-nintendo.expected.json").read_text())["flows"]
    results, _ = decode_file(captures / "nDPI-nintendo.pcap")
    tracker = FlowTracker()
    for r in results:
        tracker.add(r)
    flows = tracker.flows()
    assert flows == [{k: v for k, v in f.items() if k not in ("role", "length_invariant_ok")} for f in expected]
    # The one gap of the capture: packet id 199 of connection 142 (captures/README).
    gaps = {(f["src"], conn): s["missing"] for f in flows for conn, s in f["nonzero_connection_id_packet_ids"].items()
            if s["missing"]}
    assert gaps == {("185.118.169.65:27520", "142"): [199]}


def test_cli_flows(captures: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli([str(captures / "nDPI-nintendo.pcap"), "--flows", "--format", "jsonl"], capsys)
    assert code == 0 and len(out.splitlines()) == 16
    code, out, _ = run_cli([str(captures / "nDPI-nintendo.pcap"), "--flows", "--format", "table"], capsys)
    assert "connection 142: packet ids 1-267 (266), missing [199]" in out
    assert "run from frame 325: connection 142 x266, ids 1..267, other steps [[198, 200]]" in out


# --------------------------------------------------------------------------
# LAN browse: challenge checked with the game key, session key learned as a console does


def _lan_exchange(version: str) -> tuple[list[tuple[bytes, str, str]], bytes]:
    ex = lan_exchange(version, [LanHost("192.168.1.20", 0x22, 0xB2D7C002, b"after browse", b"\x01" * 8)])
    return [ex.request, ex.replies[0], ex.data[0]], ex.params[0]


@pytest.mark.parametrize("version", ["5.18", "5.45"])
def test_lan_browse_then_data_with_only_the_game_key(tmp_path: Path, version: str) -> None:
    from pianode.capture.pcap import PcapWriter

    exchange, param = _lan_exchange(version)
    path = tmp_path / "lan.pcap"
    with path.open("wb") as f:
        w = PcapWriter(f)
        for i, (data, src, dst) in enumerate(exchange):
            w.write_udp(data, src, dst, time=float(i))
    for session in ({"game_key": SMM2}, {"game_key": SMM2, "network": "lan", "version": version}):
        results, _ = decode_file(path, **session)
        req, rep, pkt = results
        assert (req.kind, req.authenticated, req.error) == ("lan-browse-request", True, None)
        assert req.lan is not None and req.lan["challenge"]["version"] == profile_for(version).lan_challenge_version
        assert (rep.kind, rep.authenticated, rep.error) == ("lan-browse-reply", True, None)
        assert rep.lan is not None and rep.lan["session"]["session_key_param"] == param.hex()
        assert rep.note is not None and rep.note.startswith("session key param learned")
        assert "version" in session or (req.profile_assumed and rep.profile_assumed)
        assert (pkt.kind, pkt.authenticated, pkt.error) == ("pia", True, None)
        assert pkt.messages is not None and pkt.messages[0]["payload"] == b"after browse".hex()


def test_lan_browse_with_the_wrong_game_key_is_not_authenticated(tmp_path: Path) -> None:
    exchange, _ = _lan_exchange("5.18")
    dec = Decoder(load_session(None, {"game_key": SPLATOON2}))
    results = [dec.decode(Datagram(index=i, data=d, src=s, dst=t)) for i, (d, s, t) in enumerate(exchange)]
    assert results[0].authenticated is False and results[0].error is not None
    assert results[0].error.startswith("challenge: GCM tag mismatch")
    assert results[1].authenticated is None  # no verified request to match it against
    # The param is still learned (a console would have refused; we show what the key gives):
    assert results[2].authenticated is False
    # Without a game key the browse packets decode, unchecked.
    plain = Decoder(load_session(None, {}))
    assert [plain.decode(Datagram(index=i, data=d, src=s, dst=t)).authenticated
            for i, (d, s, t) in enumerate(exchange)] == [None, None, None]


@pytest.mark.parametrize("argv", [["x.pcap", "--format", "xml"], [], ["x.pcap", "--backend", "openssl"]])
def test_cli_bad_flag_values_are_one_line(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["decode", *argv])  # (main returns argparse's exit status instead of raising SystemExit)
    _, err = capsys.readouterr()
    assert code == 2 and err.count("\n") == 1 and err.startswith("pianode decode: ")


def test_lan_rows_in_the_table(tmp_path: Path) -> None:
    from pianode.cli.decode import render_row

    exchange, _ = _lan_exchange("5.18")
    dec = Decoder(load_session(None, {"game_key": SMM2}))
    rows = [render_row(dec.decode(Datagram(index=i, data=d, src=s, dst=t))) for i, (d, s, t) in enumerate(exchange)]
    assert "lan-browse-request  LAN 5.18? challenge ok 873 B" in rows[0]
    assert "challenge: version=2 enabled=True counter=1 key=11111111111111111111111111111111" in rows[0]
    assert "lan-browse-reply  LAN 5.18? challenge ok 1360 B" in rows[1]
    assert "note: session key param learned" in rows[1]
    assert "auth ok 80 B" in rows[2]


def test_ldn5_nonce_uses_the_source_mac_seen_in_the_capture(tmp_path: Path) -> None:
    from pianode.capture.pcap import PcapWriter

    # PcapWriter gives 169.254.1.2 the MAC 02:00:a9:fe:01:02 (02:00 + the IPv4 address).
    net = {"network": NetworkType.LDN, "network_id": 0x11223344, "macs": {"169.254.1.2": "02:00:a9:fe:01:02"}}
    data, _ = _build_from("5.26", net, "169.254.1.2")
    path = tmp_path / "ldn.pcap"
    with path.open("wb") as f:
        PcapWriter(f).write_udp(data, "169.254.1.2:49152", "169.254.1.255:49152", time=1.0)
    session = {"version": "5.26", "network": "ldn", "session_key": KEY.hex(), "network_id": 0x11223344}
    (r,), _ = decode_file(path, **session)
    assert (r.authenticated, r.error) == (True, None)
    # A MAC from the session file wins over the wire's.
    (r,), _ = decode_file(path, **session, macs={"169.254.1.2": "02:00:00:00:00:99"})
    assert r.authenticated is False
    # No MAC anywhere (JSON Lines carry none): the datagram says so.
    r = Decoder(load_session(None, session)).decode(Datagram(index=1, data=data, src="169.254.1.2:49152"))
    assert r.authenticated is None and r.error == "no MAC address known for LDN source '169.254.1.2'"


def test_session_version_that_does_not_fit_the_header_is_noted() -> None:
    r = one(D9, version="5.45", network="lan", session_key="9f1bba38de3b1df42ab5b29e7844d207")
    assert (r.authenticated, r.profile, r.profile_assumed) == (True, "5.21", True)
    assert r.note is not None and r.note.startswith("the header does not fit Pia 5.45 (")
    assert r.note.endswith("decoded as 5.21")


def test_lan_protocol_messages_inside_pia_packets_are_decoded() -> None:
    from protocols.pia.lan_messages import HostRequest, encode_lan_message

    p = profile_for("5.18")
    payload = encode_lan_message(HostRequest(0xB2D7C002), p)
    msg = Message(p.protocol_id(Proto.LAN), 0, payload, flags=p.bitmap_flag, source_constant_id=1)
    codec = PacketCodec(p, KEY, nonce_builder(p, NetworkType.LAN))
    data = codec.encode(Packet(PacketHeader(True, 3, connection_id=5, nonce=bytes(8)), (msg,)), "192.168.1.10")
    r = one(data, version="5.18", network="lan", session_key=KEY.hex())
    assert r.messages is not None
    assert r.messages[0]["protocol"] == "lan"
    assert r.messages[0]["decoded"] == {"type": "HostRequest", "network_id": 0xB2D7C002}


def test_non_zero_padding_is_decoded_and_listed() -> None:
    """The 11 LAN header bytes are "Padding (always 0)" (KW LAN-Protocol.md): other bytes decode and are shown."""
    from protocols.pia.lan_messages import HostRequest, encode_lan_message

    p = profile_for("5.18")
    payload = encode_lan_message(HostRequest(0xB2D7C002, padding=b"\0\0\x7f"), p)
    assert payload[1:12] == bytes.fromhex("00007f") + bytes(8)
    msg = Message(p.protocol_id(Proto.LAN), 0, payload, flags=p.bitmap_flag, source_constant_id=1)
    codec = PacketCodec(p, KEY, nonce_builder(p, NetworkType.LAN))
    data = codec.encode(Packet(PacketHeader(True, 3, connection_id=5, nonce=bytes(8)), (msg,)), "192.168.1.10")
    r = one(data, version="5.18", network="lan", session_key=KEY.hex())
    assert r.messages is not None
    assert r.messages[0]["decoded"] == {"type": "HostRequest", "network_id": 0xB2D7C002, "padding": "00007f"}


def test_ignored_jsonl_fields_become_a_note_not_an_error(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    path.write_text(json.dumps({"hex": D9.hex(), "src": "192.168.1.10:49152", "dst": "somewhere", "time": "later"}))
    (r,), _ = decode_file(path, version="5.18", **D9_LAN)
    assert (r.kind, r.authenticated, r.error, r.dst, r.time) == ("pia", True, None, None, None)
    assert r.note == ("line 1: \"dst\" ignored: bad address 'somewhere' (expected ip:port);"
                      " \"time\" ignored: not a number or ISO 8601 time")


def test_the_simulated_ldn_discovery_channel_is_decoded_not_unknown() -> None:
    """A capture of `pianode ldn host` on a real link holds its discovery channel (UDP 30400,
    protocols.ldn_link): each frame is named and its fields shown; a damaged one says why."""
    from pianode.capture.session_file import DecodeContext
    from protocols.ldn_link import ConnectRequest, LeaveNotice, encode_frame

    request = encode_frame(ConnectRequest(bytes(range(8)), "station1", requested_ip="0.0.0.0"))
    leave = encode_frame(LeaveNotice("169.254.3.2"))
    decoder = Decoder(DecodeContext())
    got = [decoder.decode(Datagram(i + 1, data, src="169.254.3.2:50000", dst="169.254.3.1:30401")).to_json()
           for i, data in enumerate([request, leave, request[:-3]])]  # fmt: skip
    assert [g["kind"] for g in got] == ["ldn-discovery"] * 3
    assert got[0]["ldn"]["type"] == "ConnectRequest" and got[0]["ldn"]["name"] == "station1"
    assert got[0]["ldn"]["token"] == bytes(range(8)).hex() and got[0]["error"] is None
    assert got[1]["ldn"] == {"type": "LeaveNotice", "ip": "169.254.3.2", "reason": 0}
    assert got[2]["error"] and "ldn" not in got[2] and got[2]["data"] == request[:-3].hex()
