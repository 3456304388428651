"""LAN wire formats (spec §6): vectors D4/D5/D13/D14, sizes, round trips, garbage, criteria matching."""

from __future__ import annotations

import hashlib

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pia_type_strategies import u16, u32

from protocols.errors import AuthenticationError, DecodeError, EncodeError
from protocols.pia.lan import (
    BrowseReply,
    BrowseRequest,
    ChallengeReply,
    ChallengeRequest,
    LanHostAddress,
    LanNetworkProperty,
    LanSessionInfo,
    LanStationInfo,
    challenge_nonce,
    lan_session_key,
    open_challenge_request,
    seal_challenge_reply,
    seal_challenge_request,
    verify_challenge_reply,
)
from protocols.pia.lan_messages import (
    HostMessage,
    HostRequest,
    KeepAlive,
    SessionMessage,
    SessionReassembler,
    SessionRequest,
    decode_lan_message,
    encode_lan_message,
    fragment_session_info,
)
from protocols.pia.lan_criteria import (
    AttributeCriterion,
    LanSearchNetworkSetting,
    LanSessionSearchCriteria,
    Range,
    SearchFlag,
)
from protocols.pia.types import InetAddress, StationConnectionInfo, StationLocation
from protocols.pia.versions import profile_for

SMM2 = bytes.fromhex("667c18475889faab61f93ef1da180971")
SPLATOON2 = bytes.fromhex("ee182a63e216cdb1f51ad4bed8cf6508")
CK_REQ = b"\x11" * 16
CK_REP = b"\x22" * 16
CHAL = bytes(range(256))
BCAST = "192.168.1.255"

LAN5 = ["5.2", "5.3", "5.6", "5.7", "5.9", "5.10", "5.11", "5.18", "5.29", "5.45"]


# -- spec §8.2 D13 / D14 -------------------------------------------------------
def test_d13_challenge_request() -> None:
    from Crypto.Cipher import AES

    assert AES.new(SMM2, AES.MODE_ECB).encrypt(CK_REQ).hex() == "ea4d32c76e5342ab7e68360d9be8edb9"
    assert challenge_nonce(BCAST, 1).hex() == "c0a801ff0000000000000001"
    req = seal_challenge_request(SMM2, version=2, key=CK_REQ, plaintext=CHAL, counter=1, broadcast_ip=BCAST)
    assert req.tag.hex() == "ac691127d4e094db170826a991d629eb"
    assert req.data[:16].hex() == "36edbb76597e6a8b9cc619221b931391"
    assert hashlib.sha256(req.data).hexdigest() == "f2a84772ffd5c2aeceb307da87a7d90571a680b93a2d044d3b6356885a180cf2"
    wire = req.encode()
    assert wire[:2] == b"\x02\x01" and wire[2:10] == (1).to_bytes(8, "big") and wire[10:26] == CK_REQ
    assert wire[26:42] == req.tag and wire[42:] == req.data and len(wire) == 0x12A
    assert open_challenge_request(ChallengeRequest.decode(wire), SMM2, BCAST) == CHAL


@pytest.mark.parametrize("backend", ["pycryptodome", "cryptography"])
def test_d14_challenge_reply(backend: str) -> None:
    req = seal_challenge_request(
        SMM2, version=2, key=CK_REQ, plaintext=CHAL, counter=1, broadcast_ip=BCAST, backend=backend
    )
    reply, param = seal_challenge_reply(SMM2, req, CHAL, key=CK_REP, counter=2, broadcast_ip=BCAST, backend=backend)
    assert param == CK_REP + CK_REQ
    import hmac

    assert hmac.digest(SMM2, param, "sha256")[:16].hex() == "8711e31e7dd4abbb1a11d2387a40a865"
    assert hmac.digest(SMM2, CHAL, "sha256")[:16].hex() == "769a8a21706d7f924329144759f117f2"
    assert reply.tag.hex() == "c5a04d9cb8a44cbf7173995f8b25c922"
    assert reply.data.hex() == "5886a79035bb2472862f96af00f08c39"
    assert lan_session_key(SMM2, param).hex() == "d8d7fc529ab26a82d8bc36bc1f6e371b"
    wire = reply.encode()
    assert len(wire) == 58 and wire[:10] == b"\x02\x01" + (2).to_bytes(8, "big")
    assert verify_challenge_reply(ChallengeReply.decode(wire), SMM2, CK_REQ, CHAL, BCAST, backend=backend) == param


def test_d4_d5_session_key() -> None:
    assert lan_session_key(SPLATOON2, bytes(range(32))).hex() == "9f1bba38de3b1df42ab5b29e7844d207"
    assert lan_session_key(SPLATOON2, bytes(32)).hex() == "b8e208ff638e50248fae719a08791815"


def test_challenge_rejects_wrong_key_broadcast_and_tamper() -> None:
    req = seal_challenge_request(SMM2, version=2, key=CK_REQ, plaintext=CHAL, counter=1, broadcast_ip=BCAST)
    with pytest.raises(AuthenticationError):
        open_challenge_request(req, SPLATOON2, BCAST)
    with pytest.raises(AuthenticationError):
        open_challenge_request(req, SMM2, "127.255.255.255")
    reply, _ = seal_challenge_reply(SMM2, req, CHAL, key=CK_REP, counter=2, broadcast_ip=BCAST)
    bad = attrs.evolve(reply, data=bytes([reply.data[0] ^ 1]) + reply.data[1:])
    with pytest.raises(AuthenticationError):
        verify_challenge_reply(bad, SMM2, CK_REQ, CHAL, BCAST)
    # A host that answered a different challenge: GCM verifies, response does not.
    other, _ = seal_challenge_reply(SMM2, req, bytes(256), key=CK_REP, counter=2, broadcast_ip=BCAST)
    with pytest.raises(AuthenticationError, match="response"):
        verify_challenge_reply(other, SMM2, CK_REQ, CHAL, BCAST)


def test_challenge_layouts_per_version() -> None:
    for version in (1, 2, 3):
        req = ChallengeRequest(version, True, 7, CK_REQ, bytes(16), bytes(256))
        assert len(req.encode()) == 298 and req.encode()[0] == version
        assert ChallengeRequest.decode(req.encode()) == req
    # Version 4 (6.40-6.41): u8 sequence id at 0x2, every later field one byte further.
    req4 = ChallengeRequest(4, True, 7, CK_REQ, bytes(16), bytes(256), sequence_id=9)
    wire = req4.encode()
    assert len(wire) == 299 and wire[2] == 9 and wire[3:11] == (7).to_bytes(8, "big") and wire[11:27] == CK_REQ
    rep4 = ChallengeReply(4, True, 8, CK_REP, bytes(16), bytes(16), sequence_id=9)
    assert len(rep4.encode()) == 59 and ChallengeReply.decode(rep4.encode()) == rep4
    with pytest.raises(EncodeError):
        ChallengeRequest(4, True, 7, CK_REQ, bytes(16), bytes(256)).encode()
    with pytest.raises(DecodeError):
        ChallengeRequest.decode(b"\x05" + bytes(297))


def test_disabled_challenge_form() -> None:
    req = ChallengeRequest(2, False, 3, CK_REQ, b"\xaa" * 16, b"\xbb" * 256)
    wire = req.encode()
    assert wire[1] == 0 and ChallengeRequest.decode(wire) == req
    with pytest.raises(AuthenticationError):
        open_challenge_request(req, SMM2, BCAST)
    rep = ChallengeReply(2, False, 3, CK_REP, b"\xaa" * 16, b"\xbb" * 16)
    with pytest.raises(AuthenticationError):
        verify_challenge_reply(rep, SMM2, CK_REQ, CHAL, BCAST)


# -- LanSessionInfo --------------------------------------------------------------
def _info(version: str, **kw: object) -> LanSessionInfo:
    v = profile_for(version).version
    host: StationLocation | LanHostAddress
    if v <= (5, 9):
        host = StationLocation(
            public=InetAddress.from_ip("192.168.178.215", 49154), constant_id=0xC0A8B2D70000C002,
            variable_id=0x1234, service_variable_id=0xB2D7C002, url_type=1, nat_location=3,
        )
    else:
        host = LanHostAddress("192.168.178.215", 49154, 0xC0A8B2D70000C002, 0x1234, 0xB2D7C002)
    base: dict[str, object] = {
        "game_mode": 1,
        "network_id": 100,
        "host": host,
        "attributes": (0, 1, 2, 3, 4, 5),
        "current_participants": 1,
        "min_participants": 1,
        "max_participants": 4,
        "system_communication_version": None if v <= (5, 2) else 10,
        "application_communication_version": None if v <= (5, 2) else 35,
        "session_type": 1,
        "application_data": b"hello",
        "is_opened": True,
        "stations": (LanStationInfo.make(1, "host", 0xC0A8B2D70000C002),),
        "session_key_param": bytes(32) if v >= (5, 7) else None,
    }
    base.update(kw)
    return LanSessionInfo(**base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("version", "size"), [("5.2", 1266), ("5.3", 1266), ("5.6", 1266), ("5.7", 1298), ("5.9", 1298),
                          ("5.10", 1297), ("5.11", 1297), ("5.18", 1297), ("5.29", 1297), ("5.45", 1297)]
)
def test_session_info_sizes_and_round_trip(version: str, size: int) -> None:
    prof = profile_for(version)
    info = _info(version)
    wire = info.encode(prof)
    assert len(wire) == size == LanSessionInfo.size_for(prof)
    assert LanSessionInfo.decode(wire, prof) == info


def test_nc_final_round_trip_fixture() -> None:
    """Spec §8.1: NC-final's 5.9 fixture values survive a round trip (game key = 16 zero bytes)."""
    prof = profile_for("5.9")
    for nid in (100, 101):
        info = _info("5.9", network_id=nid, application_data=b"", stations=())
        wire = info.encode(prof)
        back = LanSessionInfo.decode(wire, prof)
        assert back == info
        assert (back.game_mode, back.network_id, back.attributes) == (1, nid, (0, 1, 2, 3, 4, 5))
        assert (back.current_participants, back.min_participants, back.max_participants) == (1, 1, 4)
        assert (back.system_communication_version, back.application_communication_version) == (10, 35)
        assert back.session_type == 1 and back.is_opened and back.session_key_param == bytes(32)
        # Offsets of spec §6.3: session type at 0x28 (u16), opened at 0x1AE, param at 0x4F2.
        assert wire[0x26:0x2A] == bytes([10, 35, 0, 1]) and wire[0x1AE] == 1 and wire[0x4F2:] == bytes(32)
        assert back.session_key(bytes(16)) == lan_session_key(bytes(16), bytes(32))


def test_session_info_offsets_5_10_plus() -> None:
    wire = _info("5.18").encode(profile_for("5.18"))
    assert wire[0x1AF:0x1B3] == bytes([192, 168, 178, 215]) and wire[0x1B3:0x1BF] == bytes(12)
    assert wire[0x1BF:0x1C1] == (49154).to_bytes(2, "big")
    assert wire[0x1C1:0x1C9] == (0xC0A8B2D70000C002).to_bytes(8, "big")
    assert wire[0x1C9:0x1CD] == (0x1234).to_bytes(4, "big") and wire[0x1CD:0x1D1] == (0xB2D7C002).to_bytes(4, "big")
    assert wire[0x1D1] == 1  # first station: host role
    assert wire[0x4F1:] == bytes(32)


def test_session_info_5_10_six_byte_address_form() -> None:
    prof = profile_for("5.10")
    info = _info("5.10", host=LanHostAddress("10.0.0.1", 49152, 5, 6, 7, address_size=6))
    wire = info.encode(prof)
    assert len(wire) == 1285 and wire[0x1AF:0x1B5] == bytes([10, 0, 0, 1, 0xC0, 0x00])
    assert LanSessionInfo.decode(wire, prof) == info
    with pytest.raises(EncodeError):
        info.encode(profile_for("5.11"))


@pytest.mark.parametrize("version", ["5.9", "5.18"])
def test_host_accessors_and_location_offsets(version: str) -> None:
    prof = profile_for(version)
    info = _info(version)
    assert (info.host_ip, info.host_port) == ("192.168.178.215", 49154)
    assert (info.host_constant_id, info.host_service_variable_id) == (0xC0A8B2D70000C002, 0xB2D7C002)
    assert info.host_variable_id == 0x1234
    if prof.version <= (5, 9):
        # 35-byte 5.2-5.9 StationLocation at 0x1AF: address, port, u64/u32/u32 ids, 7 URL bytes, relay.
        wire = info.encode(prof)
        loc = wire[0x1AF : 0x1AF + 35]
        assert loc[:6] == bytes([192, 168, 178, 215, 0xC0, 0x02]) and loc[6:14] == (0xC0A8B2D70000C002).to_bytes(8, "big")
        assert loc[22] == 1 and loc[27] == 3 and loc[29:] == bytes(6)


def test_station_info_names() -> None:
    assert LanStationInfo.make(2, "Mario", 1).username == "Mario"
    assert LanStationInfo.make(2, "ルイージ", 1, encoding=2).username == "ルイージ"
    assert LanStationInfo().username == ""


def test_application_data_padding_kept() -> None:
    prof = profile_for("5.18")
    wire = bytearray(_info("5.18", application_data=b"ab").encode(prof))
    wire[0x2A + 10] = 0x55  # junk after the used bytes of the 384-byte field
    info = LanSessionInfo.decode(bytes(wire), prof)
    assert info.application_data == b"ab" and info.encode(prof) == bytes(wire)


# -- browse packets -------------------------------------------------------------
@pytest.mark.parametrize("version", LAN5)
def test_browse_request_and_reply_round_trip(version: str) -> None:
    prof = profile_for(version)
    crit = LanSessionSearchCriteria.build(game_mode=1, max_participants=Range(2, 8))
    chal = None
    if prof.lan_challenge_version is not None:
        chal = seal_challenge_request(
            SMM2, version=prof.lan_challenge_version, key=CK_REQ, plaintext=CHAL, counter=1, broadcast_ip=BCAST
        )
    req = BrowseRequest(crit, chal)
    wire = req.encode(prof)
    assert len(wire) == (575 if prof.version <= (5, 6) else 873)
    assert wire[0] == 0 and wire[1:5] == (0x23A).to_bytes(4, "big")
    assert BrowseRequest.decode(wire, prof) == req
    rchal = None
    if chal is not None:
        rchal, _ = seal_challenge_reply(SMM2, chal, CHAL, key=CK_REP, counter=2, broadcast_ip=BCAST)
    reply = BrowseReply(_info(version), rchal)
    rwire = reply.encode(prof)
    assert rwire[0] == 1 and int.from_bytes(rwire[1:5], "big") == LanSessionInfo.size_for(prof)
    assert len(rwire) == 5 + LanSessionInfo.size_for(prof) + (58 if rchal else 0)
    assert BrowseReply.decode(rwire, prof) == reply


def test_browse_request_6x() -> None:
    for version, size in (("6.16", 14), ("6.23", 22), ("6.30", 22)):
        prof = profile_for(version)
        setting = LanSearchNetworkSetting(7, 8, 2, 3, title_id=0x0100 if size == 22 else None)
        chal = ChallengeRequest(3, True, 1, CK_REQ, bytes(16), bytes(256))
        wire = BrowseRequest(setting, chal).encode(prof)
        assert wire[1:5] == size.to_bytes(4, "big") and len(wire) == 5 + size + 298
        assert BrowseRequest.decode(wire, prof) == BrowseRequest(setting, chal)


def test_network_property_round_trip() -> None:
    prof = profile_for("6.30")
    sysprop = bytearray(0x7C)
    sysprop[0x5C:0x7C] = bytes(range(32))
    prop = LanNetworkProperty(0x1122334455667788, bytes(sysprop) + b"app", 9, 2, 8, True, True, 2, "10.0.0.5", 35000)
    wire = prop.encode(prof)
    assert len(wire) == 0x22D and wire[0x218] == 1 and wire[0x21B:0x21F] == bytes([10, 0, 0, 5])
    assert LanNetworkProperty.decode(wire, prof) == prop
    assert prop.session_key_param == bytes(range(32))
    reply = BrowseReply(prop, ChallengeReply(3, True, 2, CK_REP, bytes(16), bytes(16)))
    assert BrowseReply.decode(reply.encode(prof), prof) == reply


# -- LAN protocol messages ------------------------------------------------------
def test_lan_messages_round_trip() -> None:
    prof = profile_for("5.18")
    loc = StationLocation(public=InetAddress.from_ip("127.0.0.2", 49152), constant_id=5, variable_id=6)
    msgs = [HostRequest(0xB2D7C002), HostMessage(5, loc), SessionRequest(7), KeepAlive(),
            SessionMessage(0xDEADBEEF, 3, 1, 2, b"abc")]
    for m in msgs:
        wire = encode_lan_message(m, prof)
        assert wire[1:12] == bytes(11)
        assert decode_lan_message(wire, prof) == m
    assert len(encode_lan_message(HostRequest(1), prof)) == 16 and len(encode_lan_message(KeepAlive(), prof)) == 12
    assert encode_lan_message(HostRequest(0x01020304), prof) == bytes([3]) + bytes(11) + bytes([1, 2, 3, 4])
    session = encode_lan_message(SessionMessage(1, 2, 0, 1, b"xy"), prof)
    assert session[12:] == bytes.fromhex("000000010002000100000002") + b"xy"
    # <= 5.9: the host message carries a 70-byte StationConnectionInfo.
    p59 = profile_for("5.9")
    old = HostMessage(5, StationConnectionInfo(loc, StationLocation()))
    wire = encode_lan_message(old, p59)
    assert len(wire) == 16 + 70 and decode_lan_message(wire, p59) == old
    with pytest.raises(EncodeError):
        encode_lan_message(HostMessage(5, loc), p59)


def test_session_fragmentation_and_reassembly() -> None:
    data = _info("5.18").encode(profile_for("5.18"))
    frags = fragment_session_info(data, tag=42, sequence_id=3)
    assert [len(f.data) for f in frags] == [800, 497] and {f.fragment_count for f in frags} == {2}
    r = SessionReassembler()
    assert r.add("a", frags[1]) is None
    assert r.add("b", frags[0]) is None  # other sender: separate
    assert r.add("a", frags[0]) == data
    assert r.add("x", fragment_session_info(b"small", tag=1, sequence_id=0)[0]) == b"small"


# -- garbage in -> value or DecodeError -------------------------------------------
def _decoders() -> list[object]:
    out: list[object] = []
    for v in ("5.3", "5.9", "5.10", "5.18", "6.30"):
        prof = profile_for(v)
        out.append(lambda d, p=prof: BrowseRequest.decode(d, p))
        out.append(lambda d, p=prof: BrowseReply.decode(d, p))
    out += [ChallengeRequest.decode, ChallengeReply.decode, LanSessionSearchCriteria.decode]
    out += [lambda d: decode_lan_message(d, profile_for("5.9")), lambda d: decode_lan_message(d, profile_for("5.29"))]
    return out


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=1400), st.sampled_from(range(15)))
def test_garbage_value_or_decode_error(data: bytes, which: int) -> None:
    decode = _decoders()[which]
    try:
        decode(data)  # type: ignore[operator]
    except DecodeError:
        pass


_VALID = [
    (profile_for("5.9"), BrowseReply(_info("5.9"), ChallengeReply(1, True, 1, CK_REP, bytes(16), bytes(16)))),
    (profile_for("5.18"), BrowseReply(_info("5.18"), ChallengeReply(2, True, 1, CK_REP, bytes(16), bytes(16)))),
    (profile_for("5.3"), BrowseReply(_info("5.3"))),
    (profile_for("5.18"), BrowseRequest(LanSessionSearchCriteria.build(game_mode=3),
                                        ChallengeRequest(2, True, 1, CK_REQ, bytes(16), bytes(256)))),
]


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(range(len(_VALID))), st.data())
def test_mutated_packets_round_trip_or_decode_error(which: int, data: st.DataObject) -> None:
    prof, value = _VALID[which]
    wire = bytearray(value.encode(prof))
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(wire) - 1))
        wire[pos] = data.draw(st.integers(0, 255))
    if data.draw(st.booleans()):
        del wire[data.draw(st.integers(0, len(wire))) :]
    cls = type(value)
    try:
        back = cls.decode(bytes(wire), prof)
    except DecodeError:
        return
    assert back.encode(prof) == bytes(wire)


# -- hypothesis round trips ---------------------------------------------------------
station = st.builds(LanStationInfo, st.integers(0, 255), st.integers(0, 255), st.binary(min_size=40, max_size=40),
                    st.integers(0, 2**64 - 1))


@st.composite
def session_infos(draw: st.DrawFn) -> tuple[str, LanSessionInfo]:
    version = draw(st.sampled_from(LAN5))
    v = profile_for(version).version
    host: LanStationLocation | LanHostAddress
    if v <= (5, 9):
        host = StationLocation(
            public=InetAddress(draw(st.binary(min_size=4, max_size=4)), draw(u16)),
            constant_id=draw(st.integers(0, 2**64 - 1)), variable_id=draw(u32), service_variable_id=draw(u32),
            url_type=draw(st.integers(0, 255)), nat_location=draw(st.integers(0, 255)),
            relay=InetAddress(draw(st.binary(min_size=4, max_size=4)), draw(u16)),
        )
    else:
        ip = draw(st.sampled_from(["127.0.0.2", "10.1.2.3", "2001:db8::1", "fe80::1"]))
        host = LanHostAddress(ip, draw(u16), draw(st.integers(0, 2**64 - 1)), draw(u32), draw(u32))
    app = draw(st.binary(max_size=384))
    info = LanSessionInfo(
        game_mode=draw(u32), network_id=draw(u32), host=host,
        attributes=tuple(draw(st.lists(u32, min_size=6, max_size=6))),
        current_participants=draw(u16), min_participants=draw(u16), max_participants=draw(u16),
        system_communication_version=None if v <= (5, 2) else draw(st.integers(0, 255)),
        application_communication_version=None if v <= (5, 2) else draw(st.integers(0, 255)),
        session_type=draw(u32 if v <= (5, 2) else u16), application_data=app, is_opened=draw(st.booleans()),
        stations=tuple(draw(st.lists(station, max_size=16))),
        session_key_param=draw(st.binary(min_size=32, max_size=32)) if v >= (5, 7) else None,
    )
    return version, info


@settings(max_examples=80, deadline=None)
@given(session_infos())
def test_session_info_round_trip_property(case: tuple[str, LanSessionInfo]) -> None:
    version, info = case
    prof = profile_for(version)
    assert LanSessionInfo.decode(info.encode(prof), prof) == info


attr_crit = st.builds(
    AttributeCriterion, st.lists(u32, max_size=20).map(tuple), st.integers(0, 255), u32, u32, st.booleans()
)
criteria = st.builds(
    LanSessionSearchCriteria, st.builds(Range, u16, u16), st.builds(Range, u16, u16), st.booleans(), st.booleans(),
    u32, u32, u32, u32, st.lists(attr_crit, min_size=6, max_size=6).map(tuple), u32,
)


@settings(max_examples=80, deadline=None)
@given(criteria)
def test_criteria_round_trip(crit: LanSessionSearchCriteria) -> None:
    wire = crit.encode()
    assert len(wire) == 570
    assert LanSessionSearchCriteria.decode(wire) == crit


# -- criteria matching (spec §6.2) --------------------------------------------------
small = st.integers(0, 12)


@st.composite
def infos_small(draw: st.DrawFn) -> LanSessionInfo:
    mx = draw(small)
    return _info(
        "5.18", min_participants=draw(small), max_participants=mx, current_participants=draw(small),
        is_opened=draw(st.booleans()), game_mode=draw(small), session_type=draw(small),
        attributes=tuple(draw(st.lists(small, min_size=6, max_size=6))),
    )


@given(infos_small(), small, small)
def test_participant_ranges_inclusive(info: LanSessionInfo, a: int, b: int) -> None:
    lo, hi = min(a, b), max(a, b)
    c1 = LanSessionSearchCriteria.build(min_participants=Range(lo, hi))
    assert c1.matches(info) == (lo <= info.min_participants <= hi)
    c2 = LanSessionSearchCriteria.build(max_participants=Range(lo, hi))
    assert c2.matches(info) == (lo <= info.max_participants <= hi)
    # Boundaries belong to the range.
    assert LanSessionSearchCriteria.build(max_participants=Range(info.max_participants, info.max_participants)).matches(info)


@given(infos_small())
def test_opened_and_vacant(info: LanSessionInfo) -> None:
    assert LanSessionSearchCriteria.build(opened_only=True).matches(info) == info.is_opened
    assert LanSessionSearchCriteria.build(vacant_only=True).matches(info) == (
        info.current_participants < info.max_participants
    )
    # Flag set but byte 0: no restriction.
    assert LanSessionSearchCriteria.build(opened_only=False, vacant_only=False).matches(info)


@given(infos_small(), st.integers(0, 5), st.lists(small, max_size=20), small, small)
def test_attribute_list_vs_range_mode(info: LanSessionInfo, i: int, values: list[int], a: int, b: int) -> None:
    value = info.attributes[i]
    lst = LanSessionSearchCriteria.build(attributes={i: AttributeCriterion.one_of(*values)})
    assert lst.matches(info) == (value in values)
    lo, hi = min(a, b), max(a, b)
    rng = LanSessionSearchCriteria.build(attributes={i: AttributeCriterion.between(lo, hi)})
    assert rng.matches(info) == (lo <= value <= hi)
    # List mode looks only at the first list_size values.
    hidden = AttributeCriterion(list_values=(99, value), list_size=1)
    assert not LanSessionSearchCriteria.build(attributes={i: hidden}).matches(info) or value == 99


@given(infos_small(), small, small, u32)
def test_search_flags_gate_each_criterion(info: LanSessionInfo, gm: int, stype: int, flags: int) -> None:
    impossible = LanSessionSearchCriteria(
        min_participants=Range(100, 50), max_participants=Range(100, 50), opened_only=True, vacant_only=True,
        game_mode=gm, session_type=stype,
        attributes=(AttributeCriterion.between(100, 50),) * 6, search_flags=flags,
    )
    expected = True
    f = flags
    if f & (SearchFlag.MIN_PARTICIPANTS | SearchFlag.MAX_PARTICIPANTS):
        expected = False
    if f & SearchFlag.OPENED_ONLY and not info.is_opened:
        expected = False
    if f & SearchFlag.VACANT_ONLY and info.current_participants >= info.max_participants:
        expected = False
    if f & SearchFlag.GAME_MODE and info.game_mode != gm:
        expected = False
    if f & SearchFlag.SESSION_TYPE and info.session_type != stype:
        expected = False
    if any(f & SearchFlag.attribute(i) for i in range(6)):
        expected = False
    assert impossible.matches(info) == expected


def test_build_sets_flags() -> None:
    c = LanSessionSearchCriteria.build(min_participants=Range(1, 2), game_mode=3, attributes={5: AttributeCriterion.one_of(1)})
    assert c.search_flags == SearchFlag.MIN_PARTICIPANTS | SearchFlag.GAME_MODE | 0x800
    assert LanSessionSearchCriteria.build().search_flags == 0


@settings(max_examples=150, deadline=None)
@given(st.integers(0, 9), st.binary(max_size=120), st.sampled_from(["5.9", "5.10", "5.18", "5.29"]))
def test_lan_message_shaped_garbage(kind: int, tail: bytes, version: str) -> None:
    prof = profile_for(version)
    wire = bytes([kind]) + bytes(11) + tail
    try:
        msg = decode_lan_message(wire, prof)
    except DecodeError:
        return
    assert encode_lan_message(msg, prof) == wire


@given(st.integers(0, 0x1F), small, small, small, st.booleans(), st.sampled_from(["6.16", "6.30"]))
def test_network_setting_flags_gate_matching(flags: int, cur: int, mx: int, key: int, opened: bool, version: str) -> None:
    prof = profile_for(version)
    prop = LanNetworkProperty(1, bytes(0x7C), key, cur, mx, opened)
    setting = LanSearchNetworkSetting(matchmake_key=5, max_stations_upper=8, max_stations_lower=4, flags=flags)
    # 6.29-6.30 moved every flag up one bit (0x1 ignored); 6.16-6.26 start at 0x1 (spec §6.2).
    shift = 1 if version == "6.30" else 0
    expected = True
    if flags & (0x1 << shift) and key != 5:
        expected = False
    if flags & (0x2 << shift) and not 4 <= mx <= 8:
        expected = False
    if flags & (0x4 << shift) and not opened:
        expected = False
    if flags & (0x8 << shift) and cur >= mx:
        expected = False
    assert setting.matches(prop, prof) == expected


def test_reassembler_is_bounded() -> None:
    r = SessionReassembler(max_pending=2)
    for tag in range(5):
        assert r.add("a", SessionMessage(tag, 0, 0, 2, b"x")) is None
    assert r.add("a", SessionMessage(0, 0, 1, 2, b"y")) is None  # tag 0 was forgotten
    assert r.add("a", SessionMessage(4, 0, 1, 2, b"y")) == b"xy"
