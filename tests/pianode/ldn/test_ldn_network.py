"""Simulated LDN networks (pianode/ldn/network.py): codecs, keys as consoles derive them, and whole sessions.

The whole-session tests run host and stations on pianode.sim.netsim under the
autojump MockClock, record every datagram the nodes send, and decode the
recording with ``pianode decode`` given only what a console capture offers
(game key, application data, MACs).  (Named test_ldn_network.py because
tests/protocols/pia/test_ldn.py already owns the module name test_ldn.)
"""

from __future__ import annotations

import json
import pathlib
import random
import zlib

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from pianode.ldn import network as ldn
from pianode.cli.main import main as cli_main
from pianode.mesh.config import NodeConfig
from pianode.mesh.events import DataReceived
from pianode.ldn.local import HostIdentity, UpdateSessionAnnouncer, answer_update_session
from pianode.sim.netsim import SimulatedNetwork
from protocols.errors import BadValue, ConfigError, DecodeError
from protocols.pia.keys import ldn_constant_id, parse_game_key
from protocols.pia.ldn import LdnApplicationData, LdnSystemProperty
from protocols.pia.local import UNUSED_RANKING, UpdateSessionAck
from protocols.pia.versions import profile_for

SMM2 = "667c18475889faab61f93ef1da180971"
GAME_KEY = parse_game_key(SMM2)


# ---------------------------------------------------------------- address plan


def test_address_plan_maps_ldn_onto_loopback_and_back() -> None:
    assert ldn.ldn_to_loopback("169.254.37.1") == "127.254.37.1"
    assert ldn.loopback_to_ldn("127.254.37.9") == "169.254.37.9"
    for bad in ("192.168.1.2", "127.0.0.1"):
        with pytest.raises(ConfigError):
            ldn.ldn_to_loopback(bad) if bad.startswith("192") else ldn.loopback_to_ldn(bad)


# ---------------------------------------------------------------- advertisement codec

participants = st.lists(
    st.builds(
        ldn.LdnParticipant,
        ip=st.integers(0, 0xFFFF).map(lambda n: f"169.254.{n >> 8}.{n & 0xFF}"),
        mac=st.binary(min_size=6, max_size=6),
        name=st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=31),
        connected=st.booleans(),
        platform=st.integers(0, 1),
        app_version=st.integers(0, 0xFFFF),
    ),
    min_size=1,
    max_size=8,
)
advertisements = st.builds(
    ldn.Advertisement,
    local_communication_id=st.integers(0, 2**64 - 1),
    ssid=st.binary(min_size=16, max_size=16),
    application_data=st.binary(max_size=384),
    max_participants=st.integers(0, 8),
    participants=participants.map(tuple),
    game_mode=st.integers(0, 0xFFFF),
    network_key=st.binary(min_size=16, max_size=16),
    ldn_version=st.integers(0, 255),
    channel=st.integers(0, 0xFFFF),
    nonce=st.integers(0, 2**32 - 1),
    auth_token=st.integers(0, 2**64 - 1),
)
frames = st.one_of(
    st.builds(ldn.AdvertFrame, st.integers(0, 0xFFFF), st.integers(0, 0xFFFF), advertisements),
    st.builds(ldn.ConnectRequest, st.binary(min_size=8, max_size=8), st.text("abcxyz", max_size=31),
              st.integers(0, 255), st.integers(0, 0xFFFF), st.ip_addresses(v=4).map(str)),
    st.builds(ldn.ConnectReply, st.binary(min_size=8, max_size=8), st.integers(0, 255),
              st.ip_addresses(v=4).map(str), st.binary(min_size=6, max_size=6)),
    st.builds(ldn.LeaveNotice, st.ip_addresses(v=4).map(str), st.integers(0, 255)),
)


@settings(max_examples=60, deadline=None)
@given(frames)
def test_frames_round_trip(frame: ldn.Frame) -> None:
    data = ldn.encode_frame(frame)
    assert ldn.decode_frame(data) == frame
    assert ldn.encode_frame(ldn.decode_frame(data)) == data


@settings(max_examples=150, deadline=None)
@given(frames, st.data())
def test_mutated_or_cut_frames_give_a_value_or_decode_error(frame: ldn.Frame, data: st.DataObject) -> None:
    raw = bytearray(ldn.encode_frame(frame))
    if data.draw(st.booleans()):
        raw = raw[: data.draw(st.integers(0, len(raw)))]
    else:
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] ^= data.draw(st.integers(1, 255))
    try:
        ldn.decode_frame(bytes(raw))
    except DecodeError:
        pass


@settings(max_examples=100, deadline=None)
@given(st.binary(max_size=1500))
def test_garbage_gives_decode_error(data: bytes) -> None:
    with pytest.raises(DecodeError):
        ldn.decode_frame(data)


def test_advertisement_layout_follows_spec_7_1() -> None:
    host = ldn.LdnParticipant("169.254.9.1", bytes.fromhex("02007ffe0901"), "alice", app_version=0x1234)
    adv = ldn.Advertisement(0x0100ABCD00001000, bytes(range(16)), b"\xaa" * 24, 4, (host,), game_mode=7,
                            network_key=b"\x11" * 16, auth_token=0x0102030405060708)
    raw = adv.encode()
    assert len(raw) == 32 + 1 + 1 + 2 + 4 + 32 + 1280  # session info, header, SHA-256, data
    assert raw[:8] == bytes.fromhex("0100abcd00001000") and raw[10:12] == b"\x00\x07"
    assert raw[16:32] == bytes(range(16))
    assert raw[33] == 1 and raw[34:36] == (1280).to_bytes(2, "big")
    body = raw[72:]
    import hashlib

    assert raw[40:72] == hashlib.sha256(body).digest()
    assert body[:16] == b"\x11" * 16 and body[22] == 4 and body[23] == 1
    slot = body[24:80]
    assert slot[:4] == bytes((169, 254, 9, 1)) and slot[4:10] == host.mac and slot[10] == 1
    assert slot[12:17] == b"alice" and slot[44:46] == b"\x12\x34"
    assert body[474:476] == (24).to_bytes(2, "big") and body[476:500] == b"\xaa" * 24
    assert body[1272:] == bytes.fromhex("0102030405060708")


def test_tampered_advertisement_is_refused() -> None:
    adv = ldn.Advertisement(1, bytes(16), b"x", 2, (ldn.LdnParticipant("169.254.1.1", bytes(6)),))
    raw = bytearray(ldn.encode_frame(ldn.AdvertFrame(1, 2, adv)))
    raw[-100] ^= 1
    with pytest.raises(BadValue, match="SHA-256"):
        ldn.decode_frame(bytes(raw))


# ---------------------------------------------------------------- keys (spec §8.2 D6, D12; §11)


def _adv(app: bytes, ssid: bytes = bytes(16)) -> ldn.Advertisement:
    return ldn.Advertisement(1, ssid, app, 4, (ldn.LdnParticipant("169.254.1.1", bytes(6)),))


@pytest.mark.parametrize("version", ["5.9", "5.18", "5.29", "5.45"])
def test_station_derives_d6_key_and_network_id_from_the_advertisement(version: str) -> None:
    profile = profile_for(version)
    app = LdnApplicationData.build(profile, network_id=0x11223344, session_param=0x12345678).encode(profile)
    assert app[:4] == bytes.fromhex("44332211") and app[12:16] == bytes.fromhex("78563412")  # little-endian, §7.2
    session = ldn.derive_session(profile, GAME_KEY, ldn.Advertisement.decode(_adv(app).encode()))
    assert session.session_key.hex() == "f3aca7d4fba7f5b713f86ccace702c47"  # D6
    assert session.network_id == 0x11223344


def test_station_derives_6x_d12_values_from_the_ssid() -> None:
    profile = profile_for("6.16")
    app = LdnSystemProperty(21).encode(profile)
    session = ldn.derive_session(profile, GAME_KEY, _adv(app, ssid=bytes(range(16))))
    assert session.network_id == 0xF5A6AA3A
    assert session.session_key.hex() == "c4fd49cc9971756176ee8c68c3043d7f"


def test_derivation_refusals() -> None:
    p518, p57 = profile_for("5.18"), profile_for("5.7")
    other = LdnApplicationData.build(profile_for("5.29"), network_id=1, session_param=2).encode()
    with pytest.raises(ConfigError, match="system communication version 8"):
        ldn.derive_session(p518, GAME_KEY, _adv(other))
    app57 = LdnApplicationData.build(p57, network_id=5).encode(p57)
    with pytest.raises(ConfigError, match="supplied by the game"):
        ldn.derive_session(p57, GAME_KEY, _adv(app57))
    assert ldn.derive_session(p57, GAME_KEY, _adv(app57), session_key=b"k" * 16).session_key == b"k" * 16
    # <= 5.6: not encrypted; the game key signs (as in the real 3DS local-play frames).
    old = ldn.derive_session(profile_for("5.6"), GAME_KEY, _adv(app57))
    assert old.session_key == GAME_KEY and old.network_id == 5


# ---------------------------------------------------------------- host state


def _state(max_participants: int = 3, version: str = "5.18") -> ldn.LdnHostState:
    return ldn.LdnHostState(profile_for(version), GAME_KEY, rng=random.Random(5), max_participants=max_participants,
                            subnet=42, join_grace=10.0)


def test_host_state_assigns_addresses_and_macs_and_refuses_when_full() -> None:
    state = _state()
    assert state.host.ip == "169.254.42.1" and state.host.mac == bytes.fromhex("02007ffe2a01")
    a = state.connect(ldn.ConnectRequest(b"a" * 8, "a"), 0.0)
    b = state.connect(ldn.ConnectRequest(b"b" * 8, "b"), 0.0)
    assert (a.result, a.ip, b.ip) == (0, "169.254.42.2", "169.254.42.3")
    assert a.mac == bytes((2, 0, 127, 254, 42, 2))
    assert state.connect(ldn.ConnectRequest(b"a" * 8, "a"), 1.0) == a  # a retransmitted request
    assert state.connect(ldn.ConnectRequest(b"c" * 8, "c"), 0.0).result == ldn.REJECTED
    assert [p.name for p in state.advertisement().participants] == ["pianode", "a", "b"]
    assert state.leave("169.254.42.2") and not state.leave("169.254.42.1")
    c = state.connect(ldn.ConnectRequest(b"c" * 8, "c"), 2.0)
    assert c.ip == "169.254.42.2"  # the freed address is reused


def test_host_state_grants_a_requested_address_only_when_free_and_inside_the_network() -> None:
    state = _state(max_participants=4)
    assert state.connect(ldn.ConnectRequest(b"a" * 8, "a", requested_ip="169.254.42.7"), 0.0).ip == "169.254.42.7"
    for taken_or_foreign in ("169.254.42.7", "169.254.42.1", "169.254.43.3", "10.0.0.3", "169.254.42.255"):
        reply = state.connect(ldn.ConnectRequest(b"b" * 8, "b", requested_ip=taken_or_foreign), 0.0)
        assert reply.result == ldn.REJECTED, taken_or_foreign
    assert state.connect(ldn.ConnectRequest(b"c" * 8, "c"), 0.0).ip == "169.254.42.2"


def test_host_state_prunes_stations_gone_from_the_mesh_or_never_joined() -> None:
    state = _state(max_participants=4)
    a = state.connect(ldn.ConnectRequest(b"a" * 8, "a"), 0.0)
    b = state.connect(ldn.ConnectRequest(b"b" * 8, "b"), 0.0)
    assert state.prune(5.0, {"127.254.42.1", ldn.ldn_to_loopback(a.ip)}) == []
    assert state.prune(11.0, {"127.254.42.1", ldn.ldn_to_loopback(a.ip)}) == [b.ip]  # b never joined
    assert state.prune(12.0, {"127.254.42.1"}) == [a.ip]  # a left the mesh
    assert [p.ip for p in state.participants] == ["169.254.42.1"]


def test_relay_plan_maps_ldn_addresses_to_the_sites_sockets() -> None:
    """Through a relay: LDN addresses as a console sees them, sockets (and MACs) on the sites' virtual addresses."""
    state = ldn.LdnHostState(profile_for("5.29"), GAME_KEY, rng=random.Random(5), max_participants=4, subnet=42,
                             join_grace=10.0, socket_address="10.77.0.1")  # fmt: skip
    assert state.host.ip == "169.254.42.1" and state.socket_ip(state.host.ip) == "10.77.0.1"
    assert state.host.mac == bytes((2, 0, 10, 77, 0, 1))
    a = state.connect(ldn.ConnectRequest(b"a" * 8, "a"), 0.0, source="10.77.0.5")
    assert (a.result, a.ip, a.mac) == (0, "169.254.42.2", bytes((2, 0, 10, 77, 0, 5)))
    assert state.socket_ip(a.ip) == "10.77.0.5"
    assert state.connect(ldn.ConnectRequest(b"a" * 8, "a"), 1.0, source="10.77.0.5") == a  # a retransmission
    assert state.connect(ldn.ConnectRequest(b"b" * 8, "b"), 1.0, source="10.77.0.5").result == ldn.REJECTED  # one per site
    assert state.connect(ldn.ConnectRequest(b"c" * 8, "c"), 1.0).result == ldn.REJECTED  # where from?
    assert state.prune(5.0, {"10.77.0.1", "10.77.0.5"}) == [] and state.prune(6.0, {"10.77.0.1"}) == [a.ip]
    again = state.connect(ldn.ConnectRequest(b"d" * 8, "a"), 7.0, source="10.77.0.5")  # the site comes back
    assert again.result == 0 and state.socket_ip(again.ip) == "10.77.0.5"
    assert state.session_file("5.29", SMM2)["macs"] == {"10.77.0.1": "02:00:0a:4d:00:01", "10.77.0.5": "02:00:0a:4d:00:05"}


@pytest.mark.parametrize("version", ["5.18", "5.29"])
def test_host_keys_are_what_a_station_derives_from_the_advertisement(version: str) -> None:
    state = _state(version=version)
    profile = profile_for(version)
    heard = ldn.decode_frame(ldn.encode_frame(ldn.AdvertFrame(1, 2, state.advertisement())))
    assert isinstance(heard, ldn.AdvertFrame)
    station = ldn.derive_session(profile, GAME_KEY, heard.advertisement)
    assert station.session_key == state.session.session_key
    assert station.network_id == int.from_bytes(state.application_data[:4], "little")
    assert state.application_data[8] == profile.ldn_system_version


def test_6x_host_state_advertises_a_system_property_and_keys_from_the_ssid() -> None:
    # The node cannot run 6.x yet, but the network and its derivation can (spec §7.2, §11).
    state = ldn.LdnHostState(profile_for("6.16"), GAME_KEY, rng=random.Random(7), name="host6", subnet=9)
    prop = LdnSystemProperty.decode(state.application_data, profile_for("6.16"))
    assert prop.system_communication_version == 21 and prop.player_name == "host6"
    heard = ldn.Advertisement.decode(state.advertisement().encode())
    station = ldn.derive_session(profile_for("6.16"), GAME_KEY, heard)
    assert station.network_id == zlib.crc32(state.ssid[1:16]) == state.session.network_id
    from Crypto.Cipher import AES

    assert station.session_key == AES.new(GAME_KEY, AES.MODE_ECB).encrypt(state.ssid)


def test_session_file_holds_only_what_a_capture_offers() -> None:
    state = _state()
    state.connect(ldn.ConnectRequest(b"a" * 8, "a"), 0.0)
    doc = state.session_file("5.18", SMM2)
    assert set(doc) == {"version", "network", "game_key", "application_data", "macs"}
    assert doc["macs"] == {"127.254.42.1": "02:00:7f:fe:2a:01", "127.254.42.2": "02:00:7f:fe:2a:02"}


# ---------------------------------------------------------------- whole sessions on netsim


async def _session(version: str, n_stations: int, recorder: ldn.LdnRecorder) -> dict[str, object]:
    """Host + stations on netsim; every station broadcasts 5 reliable messages; returns what happened."""
    cfg = ldn.LdnHostConfig(node=NodeConfig(version=version, network="ldn", seed=11), game_key=GAME_KEY,
                            max_participants=n_stations + 1)
    got: dict[int, list[tuple[int, bytes]]] = {}

    async def collect(node: object, me: int) -> None:
        async for event in node.events():  # type: ignore[attr-defined]
            if isinstance(event, DataReceived):
                got.setdefault(me, []).append((event.source_index, event.data))

    async with ldn.open_ldn_host(cfg, tap=recorder.tap) as host, trio.open_nursery() as nursery:
        nodes = [host.node]
        found = await ldn.scan(1.0, first=True)
        assert len(found) == 1 and found[0].advertisement.ssid == host.state.ssid
        stations = []
        async with trio.open_nursery() as joins:
            for i in range(n_stations):

                async def join(i: int = i) -> None:
                    cm = ldn.open_ldn_station(found[0], NodeConfig(version=version, seed=100 + i), GAME_KEY,
                                              name=f"s{i}", tap=recorder.tap)
                    stations.append(await nursery.start(_hold, cm))

                joins.start_soon(join)
        nodes += [s.node for s in stations]
        for node in nodes:
            nursery.start_soon(collect, node, node.station_index)
        for node in nodes:
            assert await node.wait_connected(n_stations, timeout=10)
        for node in nodes:
            for k in range(5):
                await node.broadcast(b"msg %d %d" % (node.station_index, k))
            # One unreliable broadcast: from 5.27 a single packet whose footer names the receivers (§1.6, §7.3).
            await node.broadcast(b"all %d" % node.station_index, reliable=False)
        with trio.move_on_after(10):
            while sum(len(v) for v in got.values()) < 6 * len(nodes) * n_stations:
                await trio.sleep(0.05)
        await trio.sleep(0.3)  # one more advertisement with everyone in it
        heard = (await ldn.scan(0.5, first=True))[0].advertisement
        views = [(s.ip, s.mac, s.node.config.name, s.node.address[0], s.node.session.constant_id) for s in stations]
        # Every station learned every participant's MAC from the advertisements (spec §7.1).
        host_view = host.session_file(SMM2)
        assert all(s.session_file(SMM2) == host_view for s in stations)
        result = {"got": got, "stations": views, "heard": heard, "host": host,
                  "indexes": sorted(n.station_index for n in nodes), "session": host.session_file(SMM2)}
        nursery.cancel_scope.cancel()
    return result


async def _hold(cm: object, task_status: trio.TaskStatus[ldn.LdnStation]) -> None:
    async with cm as station:  # type: ignore[attr-defined]
        task_status.started(station)
        await trio.sleep_forever()


def _decode(capsys: pytest.CaptureFixture[str], pcap: pathlib.Path, session: pathlib.Path) -> list[dict[str, object]]:
    capsys.readouterr()
    assert cli_main(["decode", str(pcap), "--session", str(session), "--format", "jsonl"]) == 0
    return [json.loads(line) for line in capsys.readouterr().out.splitlines() if line.strip()]


@pytest.mark.parametrize("version", ["5.18", "5.29"])  # header v4 (H-C) and variable ids with footer (H-E)
async def test_four_station_ldn_session_and_its_recording_decodes_from_capture_inputs(
    version: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.testing.MockClock
) -> None:
    recorder = ldn.LdnRecorder()
    async with SimulatedNetwork() as net:
        net.install()
        r = await _session(version, 3, recorder)
    # A 4-station mesh, every message delivered once.
    assert r["indexes"] == [0, 1, 2, 3]
    got = r["got"]
    assert isinstance(got, dict)
    for me, items in got.items():
        assert len(items) == 18 and len(set(items)) == 18
        assert {src for src, _ in items} == {0, 1, 2, 3} - {me}
    # Stations learn every participant's LDN address and MAC from the advertisement (spec §7.1).
    heard = r["heard"]
    assert isinstance(heard, ldn.Advertisement)
    assert [p.name for p in heard.participants][0] == "pianode"
    assert sorted(p.name for p in heard.participants[1:]) == ["s0", "s1", "s2"]
    for ip, mac, name, bound_ip, constant_id in r["stations"]:  # type: ignore[attr-defined]
        assert ldn.LdnParticipant(ip, mac, name) in heard.participants
        assert constant_id == ldn_constant_id(mac)  # §4: the LDN constant id comes from the MAC
        assert bound_ip == ldn.ldn_to_loopback(ip)
    # The recording: only game key, application data and MACs in the session file.
    session = r["session"]
    assert isinstance(session, dict)
    assert set(session) == {"version", "network", "game_key", "application_data", "macs"}
    assert len(session["macs"]) == 4
    pcap = tmp_path / "ldn.pcap"
    session_path = pathlib.Path(recorder.write(str(pcap), session)["session"])
    rows = _decode(capsys, pcap, session_path)
    assert len(rows) == len(recorder.records) > 50
    assert all(row["kind"] == "pia" and row["authenticated"] is True and row["error"] is None for row in rows)
    assert {row["profile"] for row in rows} == {version}
    footers = [row["header"]["footer"] for row in rows if row["header"].get("footer")]
    if version == "5.29":  # the group packets decode too: the footer is outside the ciphertext (§11)
        assert len(footers) >= 4 * 3 and all(len(f) == 3 for f in footers)
    else:
        assert footers == []
    # The same capture with the MACs taken from its link layer (what a decrypted 802.11 capture shows).
    bare = dict(session)
    del bare["macs"]
    bare_path = tmp_path / "bare.session.json"
    bare_path.write_text(json.dumps(bare))
    assert all(row["authenticated"] is True for row in _decode(capsys, pcap, bare_path))
    # A wrong MAC for one station breaks exactly that station's nonces: the MACs really matter.
    wrong = json.loads(session_path.read_text())
    victim = sorted(wrong["macs"])[1]
    wrong["macs"][victim] = "02:00:00:00:00:01"
    wrong_path = tmp_path / "wrong.session.json"
    wrong_path.write_text(json.dumps(wrong))
    rows = _decode(capsys, pcap, wrong_path)
    assert {row["src"].rsplit(":", 1)[0] for row in rows if row["authenticated"] is not True} == {victim}


async def test_one_scan_finds_two_networks(autojump_clock: trio.testing.MockClock) -> None:
    async with SimulatedNetwork() as net:
        net.install()
        cfg = ldn.LdnHostConfig(node=NodeConfig(version="5.29", network="ldn", seed=1), game_key=GAME_KEY)
        async with ldn.open_ldn_host(cfg) as a, ldn.open_ldn_host(attrs_evolve(cfg, seed=2)) as b:
            found = await ldn.scan(0.5)
            assert {f.host_address for f in found} == {a.node.address, b.node.address}
    assert {f.advertisement.ssid for f in found} == {a.state.ssid, b.state.ssid}
    assert a.state.x != b.state.x


def attrs_evolve(cfg: ldn.LdnHostConfig, *, seed: int) -> ldn.LdnHostConfig:
    import attrs

    return attrs.evolve(cfg, node=attrs.evolve(cfg.node, seed=seed))


async def test_full_network_refuses_and_leaving_frees_the_slot(autojump_clock: trio.testing.MockClock) -> None:
    async with SimulatedNetwork() as net:
        net.install()
        cfg = ldn.LdnHostConfig(node=NodeConfig(version="5.18", network="ldn", seed=3), game_key=GAME_KEY,
                                max_participants=2)
        async with ldn.open_ldn_host(cfg) as host:
            found = (await ldn.scan(0.5, first=True))[0]
            async with ldn.open_ldn_station(found, NodeConfig(version="5.18", seed=4), GAME_KEY, name="one") as one:
                assert one.ip == f"169.254.{host.state.x}.2"
                with pytest.raises(ldn.JoinRefused, match="reason 5"):
                    async with ldn.open_ldn_station(found, NodeConfig(version="5.18", seed=5), GAME_KEY):
                        pass
            await trio.sleep(0.5)
            assert [p.ip for p in host.state.participants] == [host.state.host.ip]


async def test_wrong_version_station_refuses_before_connecting(autojump_clock: trio.testing.MockClock) -> None:
    async with SimulatedNetwork() as net:
        net.install()
        cfg = ldn.LdnHostConfig(node=NodeConfig(version="5.18", network="ldn", seed=3), game_key=GAME_KEY)
        async with ldn.open_ldn_host(cfg) as host:
            found = (await ldn.scan(0.5, first=True))[0]
            with pytest.raises(ConfigError, match="system communication version"):
                async with ldn.open_ldn_station(found, NodeConfig(version="5.29", seed=4), GAME_KEY):
                    pass
            assert len(host.state.participants) == 1



# ---------------------------------------------------------------- pianode mesh --network ldn engine


async def test_ldn_mesh_run_forms_by_discovery_migrates_and_records(
    tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.testing.MockClock
) -> None:
    from pianode.sim.ldn_run import LdnMeshRun

    pcap = tmp_path / "mesh.pcap"
    run = LdnMeshRun(NodeConfig(version="5.29", network="ldn", seed=9), nodes=4, game_key=GAME_KEY,
                     game_key_text=SMM2, record=str(pcap), leave_host=True, messages=5)
    async with SimulatedNetwork() as net:
        net.install()
        result = await run.run()
    assert result.ok, result.problems
    assert result.reliable_delivered == result.reliable_expected > 0
    assert len(result.host_changes) == 3  # every remaining station saw the host migrate
    assert run.host is not None
    stations = {row["address"].rsplit(":", 1)[0] for row in result.stations}
    assert stations <= {ldn.ldn_to_loopback(p) for p in run.host.state.history}
    assert result.record is not None
    session = json.loads(pathlib.Path(result.record["session"]).read_text())
    assert set(session) == {"version", "network", "game_key", "application_data", "macs"}
    rows = _decode(capsys, pcap, pathlib.Path(result.record["session"]))
    pia = [row for row in rows if row["kind"] == "pia"]
    assert len(pia) == result.record["datagrams"]
    assert all(row["authenticated"] is True for row in pia)
    # The discovery frames went into the recording too, as non-IP link frames that decode names field by field.
    link = [row for row in rows if row["kind"] == "ldn-discovery"]
    assert len(link) == result.record["link_frames"] == len(rows) - len(pia)
    # (the stations' leave notices come after the host has left: a host that hears them records them too)
    assert {row["ldn"]["type"] for row in link} == {"AdvertFrame", "ConnectRequest", "ConnectReply"}
    assert all(row["error"] is None for row in link)
    adverts = [row for row in link if row["ldn"]["type"] == "AdvertFrame"]
    assert {row["dst"] for row in adverts} == {"ff:ff:ff:ff:ff:ff"}
    assert adverts[-1]["ldn"]["advertisement"]["application_data"] == session["application_data"]


@pytest.mark.parametrize("version", ["5.7", "5.8"])
async def test_ldn_mesh_run_of_a_version_whose_game_supplies_the_key(
    version: str, tmp_path: pathlib.Path, capsys: pytest.CaptureFixture[str], autojump_clock: trio.testing.MockClock
) -> None:
    """5.7-5.8 LDN keys are not derived from the advertisement (spec §3.3): the run supplies one to the
    host and every station, as a game does, and the recording's session file carries it, so the
    capture decodes authenticated."""
    from pianode.sim.ldn_run import LdnMeshRun

    pcap = tmp_path / "mesh.pcap"
    run = LdnMeshRun(NodeConfig(version=version, network="ldn", seed=10), nodes=3, game_key=GAME_KEY,
                     game_key_text=SMM2, record=str(pcap), messages=3)  # fmt: skip
    async with SimulatedNetwork() as net:
        net.install()
        result = await run.run()
    assert result.ok, result.problems
    assert result.reliable_delivered == result.reliable_expected == 3 * 2 * 3
    assert result.record is not None
    session = json.loads(pathlib.Path(result.record["session"]).read_text())
    assert len(bytes.fromhex(session["session_key"])) == 16
    rows = _decode(capsys, pcap, pathlib.Path(result.record["session"]))
    pia = [row for row in rows if row["kind"] == "pia"]
    assert len(pia) == result.record["datagrams"] > 0
    assert all(row["authenticated"] is True for row in pia)


def test_ldn_mesh_run_refuses_more_than_eight_stations() -> None:
    from pianode.sim.ldn_run import LdnMeshRun

    with pytest.raises(ValueError, match="2..8 stations"):
        LdnMeshRun(NodeConfig(version="5.18", network="ldn"), nodes=9, game_key=GAME_KEY, game_key_text=SMM2)


# ---------------------------------------------------------------- Local protocol update session (spec §5.10)


def _announcer(version: str = "5.18") -> UpdateSessionAnnouncer:
    return UpdateSessionAnnouncer(profile_for(version), HostIdentity(0x1234, 0xABCD, 0x7F02FE0100000000),
                                  rng=random.Random(1))


A, B, C, D = (("127.254.5.1", 49152), ("127.254.5.2", 49152), ("127.254.5.3", 49152), ("127.254.5.4", 49152))


def test_update_session_is_resent_every_100_ms_until_each_station_acks() -> None:
    an = _announcer()
    assert an.set_members([A, B, C], 10.0)
    sent = an.due(10.0)
    assert [addr for addr, _ in sent] == [B, C]  # not to the host itself
    payload = sent[0][1]
    assert payload[:2] == b"\x01\x11" and int.from_bytes(payload[2:4], "little") == len(payload) - 12
    msg, ack = answer_update_session(profile_for("5.18"), payload)
    assert msg.sequence_id == an.sequence_id and msg.host_constant_id == 0x7F02FE0100000000
    assert [n.ranking for n in msg.nodes] == [0, 1, 2] + [UNUSED_RANKING] * 5
    assert str(msg.nodes[2].address.inet.ip) == "127.254.5.3"
    assert an.due(10.05) == [] and an.get_timer() == pytest.approx(10.1)
    assert an.receive(B, ack)
    assert [addr for addr, _ in an.due(10.1)] == [C]
    stale = (msg.sequence_id - 1) & 0xFFFFFFFF
    assert not an.receive(C, UpdateSessionAck(stale).encode(profile_for("5.18")))
    assert an.receive(C, ack) and an.settled and an.get_timer() is None
    assert an.due(11.0) == []


def test_update_session_sequence_and_rankings_follow_joins_and_leaves() -> None:
    an = _announcer("5.29")
    an.set_members([A, B, C], 0.0)
    first = an.sequence_id
    assert not an.set_members([A, B, C], 1.0)  # nothing changed, nothing sent
    assert an.sequence_id == first
    an.set_members([A, C], 2.0)
    assert an.sequence_id == (first + 1) & 0xFFFFFFFF
    assert (an.ranking(A), an.ranking(C)) == (0, 2)  # a leave keeps the gap
    an.set_members([A, C, D], 3.0)
    assert [an.ranking(x) for x in (A, C, D)] == [0, 1, 2]  # a join renumbers
    an.set_members([A, C, D], 4.0, allow_participation=False)
    assert an.sequence_id == (first + 3) & 0xFFFFFFFF and an.message().allow_participation == 0


async def test_direct_plan_binds_the_ldn_addresses_themselves(autojump_clock: trio.testing.MockClock) -> None:
    # A real link (namespaces, machines): sockets on 169.254.77.Y, advertisements to 169.254.77.255.
    async with SimulatedNetwork(broadcast_networks=["169.254.77.0/24"]) as net:
        net.install()
        cfg = ldn.LdnHostConfig(node=NodeConfig(version="5.29", network="ldn", seed=21), game_key=GAME_KEY,
                                address="169.254.77.1", discovery=("169.254.77.255", ldn.DISCOVERY_PORT))
        async with ldn.open_ldn_host(cfg) as host:
            assert host.node.address == ("169.254.77.1", ldn.PIA_PORT)
            found = (await ldn.scan(0.5, first=True))[0]
            assert found.host_address == host.node.address
            async with ldn.open_ldn_station(found, NodeConfig(version="5.29", seed=22), GAME_KEY,
                                            address="169.254.77.3") as station:
                assert station.node.address == ("169.254.77.3", ldn.PIA_PORT)
                assert station.mac == bytes.fromhex("0200a9fe4d03")
                assert await station.node.wait_connected(1, timeout=5)
                assert host.session_file(SMM2)["macs"] == {"169.254.77.1": "02:00:a9:fe:4d:01",
                                                           "169.254.77.3": "02:00:a9:fe:4d:03"}
                with pytest.raises(ldn.JoinRefused):  # the same address twice
                    async with ldn.open_ldn_station(found, NodeConfig(version="5.29", seed=23), GAME_KEY,
                                                    address="169.254.77.3"):
                        pass


@pytest.mark.parametrize("version", ["5.7", "5.9", "5.10", "5.11", "5.20", "5.26", "5.45"])
async def test_every_ldn_era_hosts_and_joins(version: str, autojump_clock: trio.testing.MockClock) -> None:
    # 5.7 takes the key from the game (§3.3); the others derive it from the session param.
    key = b"game-given key!!" if version == "5.7" else None
    async with SimulatedNetwork() as net:
        net.install()
        cfg = ldn.LdnHostConfig(node=NodeConfig(version=version, network="ldn", seed=31), game_key=GAME_KEY,
                                session_key=key)
        async with ldn.open_ldn_host(cfg) as host:
            found = (await ldn.scan(0.5, first=True))[0]
            async with ldn.open_ldn_station(found, NodeConfig(version=version, seed=32), GAME_KEY,
                                            session_key=key) as station:
                assert await station.node.wait_connected(1, timeout=5)
                await station.node.send(0, b"ping")
                with trio.fail_after(5):
                    async for event in host.node.events():
                        if isinstance(event, DataReceived):
                            assert event.data == b"ping"
                            break
    assert station.session.session_key == host.state.session.session_key
    assert (key is None) == (station.session.session_key != key)
