"""The dissector on every header and message format, LAN browse, the LDN channel and PRUDP v0/v1/Lite.

Packets are built with pianode's own codecs (``protocols/``) and written to one
capture per test; tshark with the dissector must read back what the codecs put
in: every documented Pia version (H-A ... H-G, M-A ... M-G, zlib messages,
delta-inherited fields, footers), with the version named by a pianode comment
and, without one, guessed the way ``pianode decode`` guesses.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import attrs
import pytest
from wireshark_tools import as_int, decode_jsonl, dissect, message_payloads, pianode

from pianode.capture.pcap import PcapWriter
from protocols.ldn_link import AdvertFrame, Advertisement, LdnParticipant, encode_frame
from pianode.wireshark.export import PcapngWriter
from pianode.wireshark.tables import LUA_PATH, render_file
from protocols.pia.header import PacketHeader
from protocols.pia.lan import (
    BrowseReply,
    BrowseRequest,
    ChallengeReply,
    ChallengeRequest,
    LanHostAddress,
    LanNetworkProperty,
    LanSessionInfo,
    LanStationInfo,
    seal_challenge_reply,
    seal_challenge_request,
)
from protocols.pia.lan_criteria import LanSearchNetworkSetting, LanSessionSearchCriteria
from protocols.pia.message import Message, deflate_payload
from protocols.pia.packet import Packet, PacketCodec
from protocols.pia.types import InetAddress, StationLocation
from protocols.pia.versions import DOCUMENTED_VERSIONS, HeaderFormat, MessageFormat, VersionProfile, profile_for
from protocols.prudp.codec import PacketCodec as PrudpCodec
from protocols.prudp.packet import Flag, PacketType, PrudpPacket

SRC, DST = "10.0.0.1:49152", "10.0.0.2:49152"


def test_generated_tables_are_up_to_date() -> None:
    text = LUA_PATH.read_text(encoding="utf-8")
    assert render_file(text) == text, "run: python -m pianode.wireshark.tables"


def test_generated_tables_follow_protocols(monkeypatch: pytest.MonkeyPatch) -> None:
    # The block is computed from the codecs' own tables: change one fact in protocols/ and the block changes with it.
    from pianode.wireshark import tables
    from protocols.pia import versions

    before = tables.lua_block()
    p = versions.profile_for("5.29")
    monkeypatch.setitem(versions._PROFILES, (5, 29), attrs.evolve(p, zlib_flag=0x40))
    after = tables.lua_block()
    assert before != after
    changed = [line for line in after.splitlines() if line not in before.splitlines()]
    # 5.29's entry shows the new flag (and 5.29 becomes a packet shape of its own in the guesses).
    assert any(line.startswith('  ["5.29"] = {') and "zlib = 0x40" in line for line in changed)


def _messages(p: VersionProfile, n: int) -> tuple[Message, ...]:
    """Three messages: the second zlib-compressed where the version has the flag, the third of another protocol."""
    ids = list(p.protocol_ids.values())
    fixed = p.message_format in (MessageFormat.A, MessageFormat.B, MessageFormat.C, MessageFormat.D)
    src = 0x11223344 if p.message_format is MessageFormat.A or p.constant_id_size == 4 else 0x1122334455667788
    common: dict[str, Any] = {}
    if fixed or p.message_format is MessageFormat.E:
        common["source_constant_id"] = src
    if p.message_format is MessageFormat.A:
        common["source_station_index"] = 3
    dest = 0 if p.message_format is MessageFormat.G else 0x5
    big = bytes(range(200)) * 3
    second_payload, second_flags = big, 0
    if p.zlib_flag is not None:
        second_payload, second_flags = deflate_payload(big), p.zlib_flag
    port = 1 if p.message_format in (MessageFormat.B, MessageFormat.C, MessageFormat.G) else 0x101
    return (
        Message(ids[0], port, bytes([n, 1, 2, 3, 4]), 0, dest, **common),
        Message(ids[0], port, second_payload, second_flags, dest, **common),
        Message(ids[-1], 0, b"", 0, dest, **common),
    )


def _plain_packet(p: VersionProfile, n: int) -> bytes:
    fmt = p.header_format
    kw: dict[str, Any] = {"encrypted": False, "packet_id": 100 + n}
    if fmt in (HeaderFormat.A, HeaderFormat.B, HeaderFormat.C, HeaderFormat.D):
        kw["connection_id"] = n % 256
    if fmt in (HeaderFormat.A, HeaderFormat.B):
        kw["source_timer"], kw["destination_timer"] = 1000 + n, 2000 + n
    if fmt in (HeaderFormat.E, HeaderFormat.F, HeaderFormat.G):
        kw["destination_variable_id"], kw["source_variable_id"] = 0x0102, 0x0304
    footer = (7, 9) if p.footer != "none" else ()
    codec = PacketCodec(p, hmac_key=b"key" if fmt is HeaderFormat.A else None)
    return codec.encode(Packet(PacketHeader(**kw), _messages(p, n), footer), "10.0.0.1")


def _expected(p: VersionProfile, n: int) -> list[tuple[int, int, int, str]]:
    out = []
    for m in _messages(p, n):
        payload = m.payload
        if p.zlib_flag is not None and m.flags & p.zlib_flag:
            payload = bytes(range(200)) * 3
        out.append((m.flags, m.protocol_type, m.protocol_port, payload.hex()))
    return out


FIELDS = ("pia.lib_version", "pia.format", "pia.packet_id", "pia.version", "pia.msg.flags", "pia.msg.protocol_type",
          "pia.msg.protocol_port", "pia.msg.payload", "pia.msg.length", "pia.footer.variable_id", "pia.msg.zlib",
          "pia.source_timer",
          "pia.connection_id", "pia.source_variable_id", "_ws.expert.message")


def _check(frame: dict[str, list[str]], p: VersionProfile, n: int) -> None:
    assert frame["pia.format"] == [p.header_format.value]
    assert frame["pia.packet_id"] == [str(100 + n)]
    if p.header_version is not None:
        assert frame["pia.version"] == [str(p.header_version)]
    else:
        assert "pia.version" not in frame
        assert frame["pia.source_timer"] == [str(1000 + n)]
    got = [
        (as_int(f), as_int(t), as_int(port), pl)
        for f, t, port, pl in zip(frame["pia.msg.flags"], frame["pia.msg.protocol_type"],
                                  frame["pia.msg.protocol_port"], message_payloads(frame), strict=True)
    ]
    assert got == _expected(p, n), p.name
    if p.footer != "none":
        assert [as_int(v) for v in frame["pia.footer.variable_id"]] == [7, 9]
    assert len(frame.get("pia.msg.zlib", [])) == (1 if p.zlib_flag is not None else 0)
    assert not any("Malformed" in m or "malformed" in m for m in frame.get("_ws.expert.message", []))


def test_every_documented_version_with_its_export_comment(tmp_path: Path) -> None:
    path = tmp_path / "versions.pcapng"
    with path.open("wb") as f:
        w = PcapngWriter(f)
        for n, v in enumerate(DOCUMENTED_VERSIONS):
            p = profile_for(v)
            comment = f"pianode: pia version={p.name} body=plain auth=unchecked"
            w.write_udp(_plain_packet(p, n), SRC, DST, n * 0.001, [comment])
    frames = dissect(path, *FIELDS)
    assert len(frames) == len(DOCUMENTED_VERSIONS)
    for n, (frame, v) in enumerate(zip(frames, DOCUMENTED_VERSIONS, strict=True)):
        p = profile_for(v)
        assert frame["pia.lib_version"] == [p.name]
        _check(frame, p, n)


def test_without_a_comment_the_version_is_guessed_as_pianode_decode_guesses(tmp_path: Path) -> None:
    path = tmp_path / "guess.pcap"
    with path.open("wb") as f:
        w = PcapWriter(f)
        for n, v in enumerate(DOCUMENTED_VERSIONS):
            w.write_udp(_plain_packet(profile_for(v), n), SRC, DST, n * 0.001)
    rows = decode_jsonl(str(path))
    frames = dissect(path, *FIELDS, "pia.lib_version_source")
    assert len(frames) == len(rows) == len(DOCUMENTED_VERSIONS)
    for n, (frame, row, v) in enumerate(zip(frames, rows, DOCUMENTED_VERSIONS, strict=True)):
        assert row["profile_assumed"] is True and row["error"] is None
        assert frame["pia.lib_version"] == [row["profile"]]
        assert frame["pia.lib_version_source"] == ["guess"]
        # The guess is a version of the same packet shape: the packet reads as it was built.
        _check(frame, profile_for(v), n)


def test_version_preference_overrides_the_guess(tmp_path: Path) -> None:
    path = tmp_path / "pref.pcap"
    with path.open("wb") as f:
        PcapWriter(f).write_udp(_plain_packet(profile_for("5.11"), 0), SRC, DST, 0.0)
    (guessed,) = dissect(path, "pia.lib_version", "pia.lib_version_source")
    assert guessed["pia.lib_version_source"] == ["guess"] and guessed["pia.lib_version"] != ["5.11"]
    (frame,) = dissect(path, *FIELDS, "pia.lib_version_source", prefs=("pia.version:5.11",))
    assert frame["pia.lib_version"] == ["5.11"] and frame["pia.lib_version_source"] == ["preference"]
    _check(frame, profile_for("5.11"), 0)


def test_malformed_pia_gets_expert_info(tmp_path: Path) -> None:
    p = profile_for("5.29")
    good = _plain_packet(p, 1)
    path = tmp_path / "bad.pcap"
    with path.open("wb") as f:
        w = PcapWriter(f)
        w.write_udp(good[:-10], SRC, DST, 0.0)  # footer and last message cut
        w.write_udp(b"\x32\xab\x98\x64\x7e" + bytes(40), SRC, DST, 0.1)  # header version 0x7e
    frames = dissect(path, "pia.magic", "_ws.expert.message", "_ws.expert.severity")
    assert len(frames) == 2
    for f in frames:
        assert f["pia.magic"] == ["0x32ab9864"]
        assert f.get("_ws.expert.message"), f


def test_zlib_flag_on_a_payload_that_does_not_inflate(tmp_path: Path) -> None:
    p = profile_for("5.29")
    assert p.zlib_flag is not None
    m = Message(p.protocol_ids[next(iter(p.protocol_ids))], 0, b"not zlib at all", p.zlib_flag, 0)
    data = PacketCodec(p).encode(Packet(PacketHeader(False, 5, destination_variable_id=1, source_variable_id=2), (m,)),
                                 "10.0.0.1")
    path = tmp_path / "zlib.pcap"
    with path.open("wb") as f:
        PcapWriter(f).write_udp(data, SRC, DST, 0.0)
    (row,) = decode_jsonl(str(path), "--version", "5.29")
    assert "inflate" in row["error"]
    (frame,) = dissect(path, "pia.msg.payload", "pia.msg.length", "pia.msg.compressed_payload", "_ws.expert.message")
    assert frame["pia.msg.compressed_payload"] == [b"not zlib at all".hex()]
    assert any("does not inflate" in x for x in frame["_ws.expert.message"])
    # The bytes as sent are what there is: pianode decode reports them as the payload, and the dissector keeps
    # pia.msg.length (there for every message) and pia.msg.payload with them.
    assert [m["payload"] for m in row["messages"]] == frame["pia.msg.payload"] == [b"not zlib at all".hex()]
    assert frame["pia.msg.length"] == ["15"]


# --------------------------------------------------------------------------
# LAN browse, LDN discovery


def _session_info() -> LanSessionInfo:
    return LanSessionInfo(
        game_mode=7, network_id=0xABCD, host=LanHostAddress("10.0.0.1", 49152, 0xC0A8000100000001, 0x12, 0x34),
        attributes=(1, 2, 3, 4, 5, 6), current_participants=2, min_participants=1, max_participants=8,
        system_communication_version=7, application_communication_version=3, session_type=1,
        application_data=b"hello pia", is_opened=True,
        stations=(LanStationInfo.make(1, "host", 0xC0A8000100000001),), session_key_param=bytes(range(32)),
    )


GAME_KEY = bytes(range(16))


def test_lan_browse_request_and_reply_with_session_info(tmp_path: Path) -> None:
    p = profile_for("5.18")
    challenge = seal_challenge_request(GAME_KEY, version=2, key=b"\x11" * 16, plaintext=bytes(256), counter=1,
                                       broadcast_ip="10.0.0.255")
    reply_challenge, _ = seal_challenge_reply(GAME_KEY, challenge, bytes(256), key=b"\x22" * 16, counter=2,
                                              broadcast_ip="10.0.0.255")
    request = BrowseRequest(LanSessionSearchCriteria.build(game_mode=7), challenge).encode(p)
    reply = BrowseReply(_session_info(), reply_challenge).encode(p)
    path = tmp_path / "lan.pcap"
    with path.open("wb") as f:
        w = PcapWriter(f)
        w.write_udp(request, "10.0.0.2:49153", "10.0.0.255:30000", 0.0)
        w.write_udp(reply, "10.0.0.1:30000", "10.0.0.2:49153", 0.1)
    keys = ("--version", "5.18", "--game-key", GAME_KEY.hex())
    rows = decode_jsonl(str(path), *keys)
    assert [r["kind"] for r in rows] == ["lan-browse-request", "lan-browse-reply"]
    assert [r["authenticated"] for r in rows] == [True, True]
    export = tmp_path / "lan.pcapng"
    status, _, err = pianode("decode", str(path), *keys, "--decrypted-pcap", str(export))
    assert status == 0, err
    assert [f["pia.auth"] for f in dissect(export, "pia.auth")] == [["ok"], ["ok"]]
    frames = dissect(path, "pia.lan.browse.challenge.version", "pia.lan.browse.type", "pia.lan.browse.size",
                     "pia.lan.session.game_mode", "pia.lan.session.network_id", "pia.lan.session.max_participants",
                     "pia.lan.session.application_data", "pia.lan.session.station.constant_id",
                     "pia.lan.session.key_param", "pia.lan.session.system_version")
    assert frames[0]["pia.lan.browse.type"] == ["0"] and frames[0]["pia.lan.browse.size"] == [str(0x23A)]
    r = frames[1]
    assert r["pia.lan.browse.type"] == ["1"]
    session = rows[1]["lan"]["session"]
    assert as_int(r["pia.lan.session.game_mode"][0]) == session["game_mode"] == 7
    assert as_int(r["pia.lan.session.network_id"][0]) == session["network_id"]
    assert as_int(r["pia.lan.session.max_participants"][0]) == session["max_participants"]
    assert r["pia.lan.session.application_data"] == [b"hello pia".hex()]
    assert [as_int(x) for x in r["pia.lan.session.station.constant_id"]] == [0xC0A8000100000001]
    assert r["pia.lan.session.key_param"] == [bytes(range(32)).hex()]
    assert r["pia.lan.session.system_version"] == ["7"]
    assert frames[0]["pia.lan.browse.challenge.version"] == ["2"]
    # Every field of both challenges is labelled, with the values pianode decode reads.
    fields = ("pia.lan.browse.challenge.version", "pia.lan.browse.challenge.enabled", "pia.lan.browse.challenge.counter",
              "pia.lan.browse.challenge.key", "pia.lan.browse.challenge.tag", "pia.lan.browse.challenge.data")
    for frame, row, sealed in zip(dissect(path, *fields), rows, (challenge, reply_challenge), strict=True):
        c = row["lan"]["challenge"]
        assert [as_int(frame[f][0]) for f in fields[:3]] == [c["version"], int(c["enabled"]), c["counter"]]
        assert [frame[f] for f in fields[3:]] == [[c["key"]], [c["tag"]], [sealed.data.hex()]]


def test_the_search_block_of_a_browse_request_is_labelled_as_pianode_decode_reads_it(tmp_path: Path) -> None:
    criteria = LanSessionSearchCriteria.build(game_mode=7, session_type=3, opened_only=True, result_range=(2, 9))
    chal = seal_challenge_request(GAME_KEY, version=2, key=b"\x11" * 16, plaintext=bytes(256), counter=1,
                                  broadcast_ip="10.0.0.255")
    good = BrowseRequest(criteria, chal).encode(profile_for("5.18"))
    bad = bytearray(good)
    bad[5 + 8] = 2  # "opened only" is a boolean byte
    setting = LanSearchNetworkSetting(0x1122334455667788, 8, 2, 0xC, 0x0100000000001234)
    chal6 = seal_challenge_request(GAME_KEY, version=3, key=b"\x11" * 16, plaintext=bytes(256), counter=1,
                                   broadcast_ip="10.0.0.255")
    six = BrowseRequest(setting, chal6).encode(profile_for("6.30"))
    six16 = BrowseRequest(attrs.evolve(setting, title_id=None), chal6).encode(profile_for("6.16"))  # 14 bytes
    path = tmp_path / "search.pcap"
    with path.open("wb") as f:
        w = PcapWriter(f)
        for i, data in enumerate((good, bytes(bad), six, six16)):
            w.write_udp(data, "10.0.0.2:49153", "10.0.0.255:30000", i * 0.1)
    rows = decode_jsonl(str(path))
    frames = dissect(path, "pia.lan.search.game_mode", "pia.lan.search.session_type", "pia.lan.search.opened_only",
                     "pia.lan.search.result_range_offset", "pia.lan.search.result_range_size", "pia.lan.search.flags",
                     "pia.lan.search.matchmake_key", "pia.lan.search.max_stations_upper", "pia.lan.search.title_id",
                     "pia.lan.search.attribute.range_mode", "_ws.expert.message")
    search = rows[0]["lan"]["search"]
    assert [as_int(frames[0][f"pia.lan.search.{k}"][0]) for k in ("game_mode", "session_type", "result_range_offset",
                                                                  "result_range_size")] == [
        search["game_mode"], search["session_type"], search["result_range_offset"], search["result_range_size"]]
    assert as_int(frames[0]["pia.lan.search.opened_only"][0]) == int(search["opened_only"]) == 1
    assert as_int(frames[0]["pia.lan.search.flags"][0]) == criteria.search_flags
    assert len(frames[0]["pia.lan.search.attribute.range_mode"]) == 6
    # A boolean byte other than 0 or 1: pianode decode's error, and the dissector's.
    assert rows[1]["error"] == "opened only: boolean byte 2"
    assert "opened only: boolean byte 2" in frames[1]["_ws.expert.message"]
    assert [as_int(frames[2][f][0]) for f in ("pia.lan.search.matchmake_key", "pia.lan.search.max_stations_upper",
                                              "pia.lan.search.title_id")] == [0x1122334455667788, 8, 0x0100000000001234]
    # A 6.16-6.22 request (the 14-byte setting, no title id) reads without --version, as its own version family.
    assert rows[3]["error"] is None and rows[3]["profile"] in ("6.16", "6.17", "6.18", "6.19", "6.20", "6.21", "6.22")
    assert rows[3]["lan"]["search"]["matchmake_key"] == as_int(frames[3]["pia.lan.search.matchmake_key"][0])
    assert "pia.lan.search.title_id" not in frames[3]


def test_a_version_4_challenge_shows_its_sequence_id(tmp_path: Path) -> None:
    # 6.40-6.41 insert a u8 sequence id after the enabled byte (spec §6.4); the fields after it move by one.
    v2 = ChallengeRequest(2, True, 5, b"\x11" * 16, b"\x22" * 16, bytes(range(256)))
    request = BrowseRequest(LanSessionSearchCriteria.build(game_mode=7), v2).encode(profile_for("5.18"))
    request = request[: -len(v2.encode())]
    chal = attrs.evolve(v2, version=4, sequence_id=9).encode()
    path = tmp_path / "v4.pcap"
    with path.open("wb") as f:
        PcapWriter(f).write_udp(request + chal, "10.0.0.2:49153", "10.0.0.255:30000", 0.0)
    (frame,) = dissect(path, "pia.lan.browse.challenge.version", "pia.lan.browse.challenge.sequence_id",
                       "pia.lan.browse.challenge.counter", "pia.lan.browse.challenge.key",
                       "pia.lan.browse.challenge.data")
    assert frame["pia.lan.browse.challenge.version"] == ["4"] and frame["pia.lan.browse.challenge.sequence_id"] == ["9"]
    assert frame["pia.lan.browse.challenge.counter"] == ["5"]
    assert frame["pia.lan.browse.challenge.key"] == [(b"\x11" * 16).hex()]
    assert frame["pia.lan.browse.challenge.data"] == [bytes(range(256)).hex()]


def _reply_for(version: str) -> tuple[BrowseReply, dict[str, Any]]:
    """A browse reply of *version* and the values the dissector must show for it."""
    p = profile_for(version)
    if p.version >= (6, 0):
        sysprop = bytearray(0x7C)
        sysprop[2] = 10
        sysprop[0x5C:0x7C] = bytes(range(32))
        prop = LanNetworkProperty(0x1122334455667788, bytes(sysprop) + b"app", 9, 2, 8, True, True, 2, "10.0.0.5",
                                  35000)
        chal = ChallengeReply(3, True, 2, b"\x22" * 16, bytes(16), bytes(16))
        return BrowseReply(prop, chal), {"pia.lan.session.network_id64": [0x1122334455667788],
                                          "pia.lan.session.matchmake_key": [9], "pia.lan.session.max_participants": [8],
                                          "pia.lan.session.key_param": bytes(range(32)).hex(),
                                          "pia.lan.session.application_data": b"app".hex()}
    host: StationLocation | LanHostAddress
    if p.version <= (5, 9):
        host = StationLocation(public=InetAddress.from_ip("10.0.0.1", 49154), constant_id=0x0A00000100000001,
                               variable_id=0x12, service_variable_id=0x34, url_type=1, nat_location=3)
    else:
        host = LanHostAddress("10.0.0.1", 49152, 0x0A00000100000001, 0x12, 0x34)
    info = LanSessionInfo(
        game_mode=7, network_id=0xABCD, host=host, attributes=(1, 2, 3, 4, 5, 6), current_participants=2,
        min_participants=1, max_participants=8,
        system_communication_version=None if p.version <= (5, 2) else p.lan_system_version or 0,
        application_communication_version=None if p.version <= (5, 2) else 3, session_type=1,
        application_data=b"hello pia", is_opened=True,
        stations=(LanStationInfo.make(1, "host", 0x0A00000100000001),),
        session_key_param=bytes(range(32)) if p.version >= (5, 7) else None,
    )
    chal = None
    if p.lan_challenge_version is not None:
        chal = ChallengeReply(p.lan_challenge_version, True, 2, b"\x22" * 16, bytes(16), bytes(16))
    want: dict[str, Any] = {"pia.lan.session.game_mode": [7], "pia.lan.session.network_id": [0xABCD],
                            "pia.lan.session.max_participants": [8],
                            "pia.lan.session.station.constant_id": [0x0A00000100000001],
                            "pia.lan.session.application_data": b"hello pia".hex()}
    if p.version >= (5, 7):
        want["pia.lan.session.key_param"] = bytes(range(32)).hex()
    return BrowseReply(info, chal), want


@pytest.mark.parametrize(("version", "at", "value", "reason"), [
    ("5.18", 5 + 0x1AA, (385).to_bytes(4, "big"), "application data: size 385 exceeds its 384-byte field"),
    ("5.29", 5 + 0x1AE, b"\x02", "is opened: boolean byte 2"),
    ("5.29", 5 + 1297 + 1, b"\x07", "crypto enabled: boolean byte 7"),
    ("6.30", 5 + 0x208, (0x201).to_bytes(4, "big"), "property data: size 513 exceeds its 512-byte field"),
    ("6.30", 5 + 0x219, b"\x03", "has player limit: boolean byte 3"),
])
def test_a_browse_reply_pianode_decode_refuses_gets_the_same_reason_as_expert_info(
        tmp_path: Path, version: str, at: int, value: bytes, reason: str) -> None:
    data = bytearray(_reply_for(version)[0].encode(profile_for(version)))
    data[at : at + len(value)] = value
    path = tmp_path / "reply.pcap"
    with path.open("wb") as f:
        PcapWriter(f).write_udp(bytes(data), "10.0.0.1:30000", "10.0.0.2:49153", 0.0)
    (row,) = decode_jsonl(str(path), "--version", version)
    assert row["kind"] == "lan-browse-reply" and row["error"] == reason
    (frame,) = dissect(path, "_ws.expert.message", prefs=(f"pia.version:{version}",))
    assert reason in frame["_ws.expert.message"]


@pytest.mark.parametrize("version", ["5.3", "5.9", "5.18", "5.29", "6.30"])
def test_lan_browse_reply_of_each_session_info_layout(tmp_path: Path, version: str) -> None:
    reply, want = _reply_for(version)
    path = tmp_path / "reply.pcap"
    with path.open("wb") as f:
        PcapWriter(f).write_udp(reply.encode(profile_for(version)), "10.0.0.1:30000", "10.0.0.2:49153", 0.0)
    (row,) = decode_jsonl(str(path), "--version", version)
    assert row["kind"] == "lan-browse-reply" and row["error"] is None
    export = tmp_path / "reply.pcapng"
    assert pianode("decode", str(path), "--version", version, "--decrypted-pcap", str(export))[0] == 0
    (frame,) = dissect(export, "pia.lan.browse.type", "pia.lan.browse.challenge.version", "_ws.expert.message", *want)
    assert frame["pia.lan.browse.type"] == ["1"]
    # The only expert item is the packet comment itself (Wireshark lists comments there).
    assert [m for m in frame["_ws.expert.message"] if not m.startswith("pianode: ")] == []
    for name, value in want.items():
        got = frame[name][0] if isinstance(value, str) else [as_int(x) for x in frame[name]]
        assert got == value, name
    chal = profile_for(version).lan_challenge_version
    assert frame.get("pia.lan.browse.challenge.version") == (None if chal is None else [str(chal)])


def test_ldn_advertisement(tmp_path: Path) -> None:
    adv = Advertisement(
        local_communication_id=0x0100ABCD00000000, ssid=bytes(range(16)), application_data=b"\x01\x02\x03",
        participants=(LdnParticipant("169.254.1.1", bytes.fromhex("020000000001"), "host"),),
    )
    data = encode_frame(AdvertFrame(49152, 49160, adv))
    path = tmp_path / "ldn.pcap"
    with path.open("wb") as f:
        PcapWriter(f).write_udp(data, "127.254.1.1:49160", "127.255.255.255:30400", 0.0)
    (frame,) = dissect(path, "pia.ldn.kind", "pia.ldn.pia_port", "pia.ldn.local_communication_id",
                       "pia.ldn.participant.ip", "pia.ldn.application_data", "pia.ldn.ssid")
    assert frame["pia.ldn.kind"] == ["1"] and frame["pia.ldn.pia_port"] == ["49152"]
    assert as_int(frame["pia.ldn.local_communication_id"][0]) == 0x0100ABCD00000000
    assert frame["pia.ldn.participant.ip"] == ["169.254.1.1"]
    assert frame["pia.ldn.application_data"] == ["010203"]
    assert frame["pia.ldn.ssid"] == [bytes(range(16)).hex()]


# --------------------------------------------------------------------------
# PRUDP v0 (Nintendo), v1 and Lite


def _prudp_fields(path: Path) -> list[dict[str, list[str]]]:
    return dissect(path, "prudp.version", "prudp.type", "prudp.flags", "prudp.sequence_id", "prudp.session_id",
                   "prudp.fragment_id", "prudp.payload", "prudp.connection_signature", "prudp.checksum.status",
                   "prudp.substream_id", "prudp.signature", prefs=("prudp.access_key:ridfebb9",))


def test_prudp_v0_nintendo_and_v1(tmp_path: Path) -> None:
    packets = [
        PrudpPacket(0xAF, 0xA1, PacketType.SYN, Flag.NEED_ACK, connection_signature=bytes(4)),
        PrudpPacket(0xAF, 0xA1, PacketType.DATA, Flag.RELIABLE | Flag.NEED_ACK | Flag.HAS_SIZE, session_id=0x42,
                    signature=b"\x01\x02\x03\x04", sequence_id=7, fragment_id=0, payload=b"hello"),
        PrudpPacket(0xA1, 0xAF, PacketType.PING, Flag.ACK, session_id=0x43, sequence_id=9),
    ]
    v0 = PrudpCodec("nintendo-v0", "ridfebb9")
    v1 = PrudpCodec("nintendo-v1", "ridfebb9")
    v1_packets = [
        PrudpPacket(0xAF, 0xA1, PacketType.SYN, Flag.NEED_ACK, signature=bytes(16), connection_signature=bytes(16),
                    supported_functions=4, max_substream=0),
        PrudpPacket(0xAF, 0xA1, PacketType.DATA, Flag.RELIABLE | Flag.NEED_ACK | Flag.HAS_SIZE, session_id=0x42,
                    substream_id=0, signature=bytes(range(16)), sequence_id=7, fragment_id=0, payload=b"hello"),
    ]
    path = tmp_path / "prudp.pcap"
    with path.open("wb") as f:
        w = PcapWriter(f)
        for i, pkt in enumerate(packets):
            w.write_udp(v0.encode(pkt), "10.0.0.2:60000", "10.0.0.1:60000", i * 0.01)
        w.write_udp(v1.encode_many(v1_packets), "10.0.0.2:59900", "10.0.0.1:59900", 0.1)
    frames = _prudp_fields(path)
    assert len(frames) == 4
    for frame, pkt in zip(frames[:3], packets, strict=True):
        assert frame["prudp.version"] == ["v0"]
        assert [int(frame["prudp.type"][0]), as_int(frame["prudp.flags"][0]), int(frame["prudp.sequence_id"][0])] == [
            int(pkt.type), int(pkt.flags), pkt.sequence_id]
        assert frame["prudp.checksum.status"] == ["ok"]
    assert frames[1]["prudp.payload"] == [b"hello".hex()] and frames[1]["prudp.signature"] == ["01020304"]
    v1f = frames[3]
    options = dissect(path, "prudp.supported_functions", "prudp.minor_version", "prudp.max_substream_id",
                      "prudp.fragment_id", display_filter="frame.number == 4")[0]
    assert [as_int(x) for x in options["prudp.supported_functions"]] == [4]
    assert options["prudp.minor_version"] == ["4"] and options["prudp.max_substream_id"] == ["0"]
    assert options["prudp.fragment_id"] == ["0"]
    assert v1f["prudp.version"] == ["v1", "v1"]
    assert [int(t) for t in v1f["prudp.type"]] == [0, 2]
    data_flags = Flag.RELIABLE | Flag.NEED_ACK | Flag.HAS_SIZE
    assert [as_int(t) for t in v1f["prudp.flags"]] == [int(Flag.NEED_ACK), int(data_flags)]
    assert [int(s) for s in v1f["prudp.sequence_id"]] == [0, 7]
    assert v1f["prudp.payload"] == [b"hello".hex()]
    assert v1f["prudp.signature"][1] == bytes(range(16)).hex()


def test_prudp_lite(tmp_path: Path) -> None:
    # Lite header (prudp.md §2.11): magic 0x80, options length, u16 LE payload size, stream types, source and
    # destination ports, fragment id, u16 LE type/flags, u16 LE sequence; then options and payload.
    def lite(ptype: int, flags: int, seq: int, options: bytes, payload: bytes) -> bytes:
        return struct.pack("<BBHBBBBHH", 0x80, len(options), len(payload), 0xAA, 15, 1, 0, ptype | flags << 4, seq) \
            + options + payload

    data = lite(0, 0x4, 0, bytes([0, 4, 5, 0, 0, 0]), b"") + lite(2, 0xE, 3, b"", b"lite!")
    path = tmp_path / "lite.pcap"
    with path.open("wb") as f:
        PcapWriter(f).write_udp(data, "10.0.0.2:443", "10.0.0.1:443", 0.0)
    (frame,) = _prudp_fields(path)
    assert frame["prudp.version"] == ["lite", "lite"]
    assert [int(t) for t in frame["prudp.type"]] == [0, 2]
    assert [as_int(t) for t in frame["prudp.flags"]] == [4, 0xE]
    assert [int(s) for s in frame["prudp.sequence_id"]] == [0, 3]
    assert frame["prudp.payload"] == [b"lite!".hex()]


@pytest.mark.parametrize("data", [b"\xea\xd0\x01\x00\xff\xff" + bytes(30), b"\x80\x00\x10\x00" + bytes(8)])
def test_truncated_prudp_magic_is_not_claimed(tmp_path: Path, data: bytes) -> None:
    path = tmp_path / "short.pcap"
    with path.open("wb") as f:
        PcapWriter(f).write_udp(data, "10.0.0.2:40000", "10.0.0.1:40000", 0.0)
    (frame,) = dissect(path, "prudp.type", "pia.magic")
    assert "prudp.type" not in frame and "pia.magic" not in frame


# --------------------------------------------------------------------------
# Encrypted packets of every header format through the decrypted export


@pytest.mark.parametrize("version", ["5.4", "5.9", "5.18", "5.23", "5.29", "6.20", "6.33", "7.2"])
def test_decrypted_export_of_every_header_format(tmp_path: Path, version: str) -> None:
    from pianode.capture.session_file import load_session

    key = bytes(range(16, 32))
    network = "nex" if profile_for(version).version < (6, 0) else "lan"
    settings = {"version": version, "network": network, "session_key": key.hex(), "gathering_id": 1234}
    ctx = load_session(None, settings)
    p = profile_for(version)
    keys = ctx.keys_for(p)
    assert keys.problem is None
    codec = PacketCodec(p, keys.session_key, keys.nonce_builder)
    path = tmp_path / "enc.pcap"
    with path.open("wb") as f:
        w = PcapWriter(f)
        for n in range(3):
            plain = PacketCodec(p, hmac_key=b"k" if p.header_format is HeaderFormat.A else None)
            packet = plain.decode(_plain_packet(p, n), "10.0.0.1", verify=False)
            nonce = b"" if p.header_format is HeaderFormat.A else (n + 1).to_bytes(8, "big")
            header = attrs.evolve(packet.header, encrypted=True, nonce=nonce, tag=b"")
            data = codec.encode(Packet(header, packet.messages, packet.footer), "10.0.0.1")
            w.write_udp(data, SRC, DST, n * 0.01)
    args = ("--version", version, "--network", network, "--session-key", key.hex(), "--gathering-id", "1234")
    rows = decode_jsonl(str(path), *args)
    assert [r["authenticated"] for r in rows] == [True] * 3
    out = tmp_path / "dec.pcapng"
    status, _, err = pianode("decode", str(path), *args, "--decrypted-pcap", str(out))
    assert status == 0 and "3 Pia packets decrypted" in err, err
    frames = dissect(out, *FIELDS, "pia.body_state", "pia.encrypted")
    for n, frame in enumerate(frames):
        assert frame["pia.body_state"] == ["decrypted"] and frame["pia.encrypted"] == ["1"]
        assert frame["pia.lib_version"] == [version]
        _check(frame, p, n)
    # The same capture without the export: headers only, the body flagged as encrypted.
    for frame in dissect(path, "pia.msg.payload", "pia.body", "pia.packet_id"):
        assert "pia.msg.payload" not in frame and len(frame["pia.body"]) == 1


# --------------------------------------------------------------------------
# Damaged input: expert info, never a Lua error


def test_damaged_datagrams_never_raise_lua_errors(tmp_path: Path, captures: Path) -> None:
    import json
    import random

    rng = random.Random(19)
    seeds = [_plain_packet(profile_for(v), i) for i, v in enumerate(DOCUMENTED_VERSIONS)]
    seeds += [_reply_for(v)[0].encode(profile_for(v)) for v in ("5.3", "5.18", "6.30")]
    with (captures / "gro-prudp" / "GRO_DedicatedServer_packetLog.jsonl").open() as f:
        seeds += [bytes.fromhex(json.loads(line)["hex"]) for line in f][:20]
    seeds += [bytes.fromhex("ead001") + bytes(40), b"\x80\x02\x03\x00" + bytes(20)]
    path = tmp_path / "damaged.pcap"
    count = 2000
    with path.open("wb") as f:
        w = PcapWriter(f)
        for i in range(count):
            d = bytearray(rng.choice(seeds))
            k = rng.random()
            if k < 0.3:
                d = d[: rng.randrange(0, len(d) + 1)]
            elif k < 0.7:
                for _ in range(rng.randrange(1, 4)):
                    d[rng.randrange(len(d))] = rng.randrange(256)
            else:
                d[rng.randrange(4, min(len(d), 60))] = rng.randrange(256)
            w.write_udp(bytes(d), SRC, DST, i * 0.001)
    frames = dissect(path, "_ws.expert.message", "pia.magic", "udp.payload")
    assert len(frames) == count
    flagged = 0
    for frame in frames:
        messages = frame.get("_ws.expert.message", [])
        # (_ws.malformed also matches our own expert items of the Malformed group, so it is not a crash sign.)
        assert not any("Lua Error" in m or "Malformed Packet" in m for m in messages), messages
        if frame.get("udp.payload", [""])[0].startswith("32ab9864"):
            assert frame["pia.magic"] == ["0x32ab9864"]
        flagged += bool(messages)
    assert flagged > count // 4  # damage is reported, not silently read


def test_lan_protocol_messages_and_sync_clock(tmp_path: Path) -> None:
    from protocols.pia.lan_messages import HostRequest, KeepAlive, SessionMessage, SessionRequest, encode_lan_message
    from protocols.pia.versions import Proto

    p = profile_for("5.18")
    lan, clock = p.protocol_id(Proto.LAN), p.protocol_id(Proto.SYNC_CLOCK)
    payloads = [
        encode_lan_message(HostRequest(0x01020304), p),
        encode_lan_message(SessionRequest(0x0A0B0C0D), p),
        encode_lan_message(SessionMessage(0xCAFE, 3, 1, 2, b"fragment"), p),
        encode_lan_message(KeepAlive(), p),
    ]
    msgs = tuple(Message(lan, 0, pl, 0, 0, source_constant_id=1) for pl in payloads)
    msgs += (Message(clock, 0, (123456789).to_bytes(8, "big") + bytes(8), 0, 1, source_constant_id=1),)
    data = PacketCodec(p).encode(Packet(PacketHeader(False, 1, connection_id=2), msgs), "10.0.0.1")
    path = tmp_path / "lan-msgs.pcap"
    with path.open("wb") as f:
        PcapWriter(f).write_udp(data, SRC, DST, 0.0)
    (row,) = decode_jsonl(str(path), "--version", "5.18")
    decoded = [m["decoded"] for m in row["messages"][:4]]
    assert [d["type"] for d in decoded] == ["HostRequest", "SessionRequest", "SessionMessage", "KeepAlive"]
    (frame,) = dissect(path, "pia.lan.message.type", "pia.lan.message.network_id", "pia.lan.message.tag",
                       "pia.lan.message.sequence_id", "pia.lan.message.fragment_index",
                       "pia.lan.message.fragment_count", "pia.sync_clock.tick", "pia.msg.protocol")
    assert [int(t) for t in frame["pia.lan.message.type"]] == [3, 5, 6, 7]
    assert [as_int(x) for x in frame["pia.lan.message.network_id"]] == [0x01020304, 0x0A0B0C0D]
    assert [as_int(frame[f][0]) for f in ("pia.lan.message.tag", "pia.lan.message.sequence_id",
                                          "pia.lan.message.fragment_index", "pia.lan.message.fragment_count")] == [
        decoded[2]["tag"], decoded[2]["sequence_id"], decoded[2]["fragment_index"], decoded[2]["fragment_count"]]
    assert frame["pia.sync_clock.tick"] == ["123456789"]
    assert frame["pia.msg.protocol"] == ["lan"] * 4 + ["sync-clock"]
