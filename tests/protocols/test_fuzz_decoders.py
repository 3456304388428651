"""Hypothesis fuzz of every decoder in ``protocols/``: any bytes in → a value or a DecodeError.

The project rule (protocols/errors.py): a decoder given bytes from the network
returns a value or raises the :class:`~protocols.errors.DecodeError` family;
IndexError, struct.error, KeyError, a bare ValueError, zlib.error or
UnicodeDecodeError escaping is a bug.  Each decoder here is fed

* garbage (arbitrary bytes), and
* valid inputs with a few mutations (bit flips, byte overwrites, cuts,
  insertions, duplicated runs), so the fuzz gets past magic numbers and length
  fields.  The valid inputs are the datagrams of real sans-IO meshes
  (``tests/support/mesh_harness.py``) of eight versions from 5.9 to 5.45, their
  decrypted message areas and sub-protocol payloads, packets sealed for the
  other eras (5.3 ECB+HMAC, 6.x), and for PRUDP the real Ghost Recon Online
  datagrams of ../shared/captures/gro-prudp plus packets encoded for every
  variant.

A decoder whose profile does not apply (it raises ConfigError on empty input
for that version, e.g. a 6.x-only structure asked for 5.3) is left out for
that version; :func:`test_the_fuzz_covers_every_decoder` checks that every
decoder still runs for at least one version.
"""

from __future__ import annotations

import json
import pathlib
from collections.abc import Callable
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mesh_harness import MeshHarness

from pianode.bench.codec import bench_header, bench_message
from protocols.crypto.aead import available_backends
from protocols.errors import ConfigError, DecodeError, EncodeError
from protocols.pia import lan, lan_criteria, lan_messages, ldn, types
from protocols.pia.header import decode_header, sniff_header_format
from protocols.pia.keepalive import decode_keep_alive
from protocols.pia.local import decode_local_message
from protocols.pia.mesh import decode_mesh_message
from protocols.pia.message import Message, decode_messages, encode_messages, inflate_payload
from protocols.pia.nonce import nonce_builder
from protocols.pia.packet import Packet, PacketCodec
from protocols.pia.reliable import decode_bulk_ack, decode_segment
from protocols.pia.rtt import decode_rtt
from protocols.pia.station import decode_station_message
from protocols.pia.subprotocols import decode_payload
from protocols.pia.versions import Cipher, NetworkType, Proto, VersionProfile, profile_for
from protocols.prudp.codec import PacketCodec as PrudpCodec
from protocols.prudp.codec import decode_datagram, quazal_open
from protocols.prudp.framing_v1 import decode_v1
from protocols.prudp.packet import Flag, PacketType, PrudpPacket
from protocols.prudp.payload import aes_cbc_open, strip_ratio, strip_sequence_suffix
from protocols.prudp.rendezvous import HostHello, load_public_key
from protocols.prudp.variants import VARIANTS

CAPTURES = pathlib.Path(__file__).resolve().parents[2].parent / "shared" / "captures"

VERSIONS = ("3.3", "4.10", "5.3", "5.6", "5.9", "5.11", "5.14", "5.18", "5.23", "5.29", "5.31", "5.45",
            "6.16", "6.25", "6.30", "6.32", "7.2")  # fmt: skip
NODE_VERSIONS = ("5.9", "5.11", "5.14", "5.18", "5.23", "5.29", "5.31", "5.45")
KEY = bytes(range(16))  # the harness mesh key
SRC = "127.0.0.1"
GRO_KEY = b"8dtRv2oj"


# ---------------------------------------------------------------------------- seed corpus


def _lan_codec(profile: VersionProfile, key: bytes | None, backend: str | None = None) -> PacketCodec:
    if key is None:
        return PacketCodec(profile)
    if profile.cipher is Cipher.ECB_HMAC:
        return PacketCodec(profile, key)
    return PacketCodec(profile, key, nonce_builder(profile, NetworkType.LAN), backend=backend)


def _mesh_seeds(version: str) -> dict[str, list[bytes]]:
    """Datagrams, message areas and payloads of a small real mesh of *version*."""
    # RTT probes only at connection time: keep-alives fill the silence after it.
    h = MeshHarness(3, version=version, key=KEY, rtt_interval=3600.0)
    recorded: list[tuple[bytes, str]] = []

    def record(data: bytes, src: tuple[str, int], dst: tuple[str, int]) -> bytes:
        recorded.append((data, src[0]))
        return data

    h.hook = record
    assert h.form(10)
    s0, s1 = h.sessions[0], h.sessions[1]
    assert s0.index is not None
    s1.send(s0.index, b"reliable data", reliable=True, now=h.now)
    s1.send(s0.index, bytes(300), reliable=False, now=h.now)
    h.run_for(2.5)
    profile = profile_for(version)
    codec = _lan_codec(profile, KEY)
    seeds: dict[str, list[bytes]] = {"datagram": [], "body": []}
    for data, src in recorded[:40]:
        packet = codec.decode(data, src)
        # Re-sealed as if sent from SRC (the LAN nonce holds the source address),
        # so an unmutated seed authenticates in the fuzzed codec.
        seeds["datagram"].append(codec.encode(packet, SRC))
        plain = attrs.evolve(packet.header, encrypted=False, tag=b"")
        seeds["datagram"].append(codec.encode(Packet(plain, packet.messages, packet.footer), SRC))
        seeds["body"].append(encode_messages(packet.messages, profile))
        for m in packet.messages:
            name = profile.protocol_name(m.protocol_type)
            seeds.setdefault(f"{name}:{m.protocol_port}", []).append(m.payload)
    return seeds


def _era_seeds(profile: VersionProfile) -> dict[str, list[bytes]]:
    """Packets sealed by the codec for versions the node does not speak (ECB+HMAC, 6.x)."""
    codec = _lan_codec(profile, KEY)
    seeds: dict[str, list[bytes]] = {"datagram": [], "body": []}
    for size in (0, 5, 64):
        message = bench_message(profile, bytes(range(size)))
        for encrypted in (True, False):
            header = attrs.evolve(bench_header(profile, size.to_bytes(8, "big")), encrypted=encrypted)
            footer = (1, 2) if profile.footer != "none" else ()
            try:
                seeds["datagram"].append(codec.encode(Packet(header, (message,), footer), SRC))
            except (EncodeError, ConfigError):
                continue
        seeds["body"].append(encode_messages((message, message), profile))
    return seeds


SEEDS: dict[str, dict[str, list[bytes]]] = {}
for _v in VERSIONS:
    _p = profile_for(_v)
    SEEDS[_v] = _mesh_seeds(_v) if _v in NODE_VERSIONS else {}
    for _k, _items in _era_seeds(_p).items():
        SEEDS[_v].setdefault(_k, []).extend(_items)


def _prudp_seeds() -> dict[str, list[bytes]]:
    seeds: dict[str, list[bytes]] = {name: [] for name in VARIANTS}
    for path in sorted((CAPTURES / "gro-prudp").glob("*.jsonl"))[:2]:
        for line in path.read_text().splitlines()[:60]:
            seeds["quazal-v0"].append(bytes.fromhex(json.loads(line)["hex"]))
    samples = [
        PrudpPacket(source=0xAF, destination=0xA1, type=PacketType.PING, flags=Flag.NEED_ACK | Flag.HAS_SIZE, sequence_id=3),
        PrudpPacket(source=0xAF, destination=0xA1, type=PacketType.SYN, flags=Flag.NEED_ACK | Flag.HAS_SIZE,
                    connection_signature=bytes(4)),
        PrudpPacket(source=0xAF, destination=0xA1, type=PacketType.DATA, flags=Flag.NEED_ACK | Flag.RELIABLE | Flag.HAS_SIZE,
                    sequence_id=9, fragment_id=0, payload=b"\x00hello prudp"),
    ]  # fmt: skip
    for name in VARIANTS:
        codec = PrudpCodec(name, GRO_KEY)
        for sample in samples:
            for variant_sample in (sample, attrs.evolve(sample, signature=bytes(16), connection_signature=bytes(16) if sample.connection_signature else None)):
                try:
                    seeds[name].append(codec.encode(variant_sample))
                except (EncodeError, ConfigError, ValueError):
                    continue
    return seeds


PRUDP_SEEDS = _prudp_seeds()


# ---------------------------------------------------------------------------- decoders


def _codec_decoder(key: bytes | None, backend: str | None, inspect: bool) -> Callable[[bytes, VersionProfile], Any]:
    cache: dict[str, PacketCodec] = {}

    def run(data: bytes, profile: VersionProfile) -> Any:
        codec = cache.get(profile.name)
        if codec is None:
            codec = cache[profile.name] = _lan_codec(profile, key, backend)
        if inspect:
            report = codec.inspect(data, SRC)
            assert report.error is None or isinstance(report.error, DecodeError)
            return report
        return codec.decode(data, SRC)

    return run


def _inflate(data: bytes, profile: VersionProfile) -> bytes:
    if profile.zlib_flag is None:
        raise ConfigError("no zlib flag in this version")
    return inflate_payload(Message(0x68, 0, data, flags=profile.zlib_flag), profile)


def _sub(proto: Proto, port: int) -> Callable[[bytes, VersionProfile], Any]:
    return lambda data, profile: decode_payload(proto, port, data, profile)


#: name -> (decoder(data, profile), seed kind or None)
PIA_DECODERS: dict[str, tuple[Callable[[bytes, VersionProfile], Any], str | None]] = {
    "decode_header": (decode_header, "datagram"),
    "sniff_header_format": (lambda d, p: sniff_header_format(d), "datagram"),
    "decode_messages": (decode_messages, "body"),
    "inflate_payload": (_inflate, None),
    "codec.decode (no key)": (_codec_decoder(None, None, False), "datagram"),
    "codec.inspect (no key)": (_codec_decoder(None, None, True), "datagram"),
    "decode_keep_alive": (decode_keep_alive, "keep-alive:0"),
    "decode_rtt": (decode_rtt, "rtt:1"),
    "decode_station_message": (decode_station_message, "station:0"),
    "decode_mesh_message": (decode_mesh_message, "mesh:0"),
    "decode_local_message": (decode_local_message, None),
    "decode_segment": (decode_segment, "mesh:1"),
    "decode_segment (reliable)": (decode_segment, "reliable:0"),
    "decode_bulk_ack": (lambda d, p: decode_bulk_ack(d), None),
    "decode_payload station": (_sub(Proto.STATION, 0), "station:0"),
    "decode_payload mesh 0": (_sub(Proto.MESH, 0), "mesh:0"),
    "decode_payload mesh 1": (_sub(Proto.MESH, 1), "mesh:1"),
    "decode_payload keep-alive": (_sub(Proto.KEEP_ALIVE, 0), "keep-alive:0"),
    "decode_payload rtt": (_sub(Proto.RTT, 1), "rtt:1"),
    "decode_payload local": (_sub(Proto.LOCAL, 0), None),
    "decode_lan_message": (lan_messages.decode_lan_message, None),
    "LanSessionInfo.decode": (lan.LanSessionInfo.decode, None),
    "LanNetworkProperty.decode": (lan.LanNetworkProperty.decode, None),
    "ChallengeRequest.decode": (lambda d, p: lan.ChallengeRequest.decode(d), None),
    "ChallengeReply.decode": (lambda d, p: lan.ChallengeReply.decode(d), None),
    "BrowseRequest.decode": (lan.BrowseRequest.decode, None),
    "BrowseReply.decode": (lan.BrowseReply.decode, None),
    "LanSessionSearchCriteria.decode": (lambda d, p: lan_criteria.LanSessionSearchCriteria.decode(d), None),
    "LanSearchNetworkSetting.decode": (lan_criteria.LanSearchNetworkSetting.decode, None),
    "LdnApplicationData.decode": (ldn.LdnApplicationData.decode, None),
    "LdnSystemProperty.decode": (ldn.LdnSystemProperty.decode, None),
    "decode_application_data": (ldn.decode_application_data, None),
    "decode_inet_address": (lambda d, p: types.decode_inet_address(d), None),
    "decode_station_address": (types.decode_station_address, None),
    "decode_station_location": (types.decode_station_location, None),
    "decode_station_connection_info": (types.decode_station_connection_info, None),
    "decode_player_info": (types.decode_player_info, None),
    "decode_session_station_address": (types.decode_session_station_address, None),
    "decode_session_player_info": (types.decode_session_player_info, None),
    "decode_mesh_station_info": (types.decode_mesh_station_info, None),
}
for _backend in available_backends():
    PIA_DECODERS[f"codec.decode ({_backend})"] = (_codec_decoder(KEY, _backend, False), "datagram")
    PIA_DECODERS[f"codec.inspect ({_backend})"] = (_codec_decoder(KEY, _backend, True), "datagram")


def _applies(decoder: Callable[[bytes, VersionProfile], Any], profile: VersionProfile) -> bool:
    for probe in (b"", bytes(64)):
        try:
            decoder(probe, profile)
        except ConfigError:
            return False
        except DecodeError:
            pass
    return True


APPLICABLE: dict[str, list[str]] = {
    name: [v for v in VERSIONS if _applies(fn, profile_for(v))] for name, (fn, _) in PIA_DECODERS.items()
}


def _prudp_decoders() -> dict[str, Callable[[bytes], Any]]:
    rv_key = bytes(range(16, 32))
    out: dict[str, Callable[[bytes], Any]] = {
        "prudp decode_v1": decode_v1,
        "prudp strip_ratio": strip_ratio,
        "prudp aes_cbc_open": lambda d: aes_cbc_open(rv_key, d),
        "prudp strip_sequence_suffix": lambda d: strip_sequence_suffix(d, 7),
        "prudp HostHello.decode": HostHello.decode,
        "prudp load_public_key": load_public_key,
    }
    for name, variant in VARIANTS.items():
        codec = PrudpCodec(name, GRO_KEY)
        out[f"prudp {name} decode"] = codec.decode
        out[f"prudp {name} decode (no verify)"] = lambda d, c=codec: c.decode(d, verify=False)
        out[f"prudp {name} decode_datagram"] = lambda d, n=name: decode_datagram(
            d, n, GRO_KEY, aes_key=rv_key, nex_streams={}
        )
        for ptype in (PacketType.DATA, PacketType.CONNECT):
            out[f"prudp {name} quazal_open {ptype.name}"] = lambda d, v=variant, t=ptype: quazal_open(d, v, t, 0x31)
    return out


PRUDP_DECODERS = _prudp_decoders()


# ---------------------------------------------------------------------------- strategies


@st.composite
def mutated(draw: st.DrawFn, seeds: list[bytes]) -> bytes:
    data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(0, 4))):
        op = draw(st.sampled_from(("flip", "set", "cut", "insert", "repeat")))
        if not data:
            data.append(0)
        i = draw(st.integers(0, len(data) - 1))
        if op == "flip":
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set":
            data[i] = draw(st.sampled_from((0x00, 0x01, 0x7F, 0x80, 0xFF)) | st.integers(0, 255))
        elif op == "cut":
            del data[i:]
        elif op == "insert":
            data[i:i] = draw(st.binary(min_size=1, max_size=8))
        else:
            data[i:i] = data[i : i + draw(st.integers(1, 16))]
    return bytes(data)


def _bytes_for(seeds: list[bytes]) -> st.SearchStrategy[bytes]:
    garbage = st.binary(max_size=300)
    return st.one_of(garbage, mutated(seeds)) if seeds else garbage


FUZZ = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _check(decoder: Callable[..., Any], *args: Any) -> None:
    try:
        decoder(*args)
    except DecodeError:
        pass


# ---------------------------------------------------------------------------- tests


@pytest.mark.parametrize("name", sorted(PIA_DECODERS))
@FUZZ
@given(data=st.data())
def test_pia_decoder_garbage_gives_value_or_decode_error(name: str, data: st.DataObject) -> None:
    decoder, kind = PIA_DECODERS[name]
    version = data.draw(st.sampled_from(APPLICABLE[name]), label="version")
    seeds = SEEDS[version].get(kind, []) if kind else []
    _check(decoder, data.draw(_bytes_for(seeds), label="input"), profile_for(version))


@pytest.mark.parametrize("name", sorted(PRUDP_DECODERS))
@FUZZ
@given(data=st.data())
def test_prudp_decoder_garbage_gives_value_or_decode_error(name: str, data: st.DataObject) -> None:
    variant = name.split()[1]
    seeds = PRUDP_SEEDS.get(variant) or [s for group in PRUDP_SEEDS.values() for s in group]
    _check(PRUDP_DECODERS[name], data.draw(_bytes_for(seeds), label="input"))


@FUZZ
@given(version=st.sampled_from(VERSIONS[4:]), network=st.sampled_from(("lan", "ldn", "nex")), source=st.text(max_size=40))
def test_nonce_builders_refuse_odd_sources_with_decode_error(version: str, network: str, source: str) -> None:
    profile = profile_for(version)
    try:
        builder = nonce_builder(profile, network, gathering_id=7, network_id=9, macs={"127.0.0.1": "02:00:00:00:00:01"})
    except ConfigError:
        return  # an undocumented combination (e.g. NEX 6.x): a setting, not input
    header = bench_header(profile, bytes(8))
    try:
        nonce = builder(header, source)
    except DecodeError:
        return
    assert len(nonce) == 12


def test_the_fuzz_covers_every_decoder() -> None:
    for name, versions in APPLICABLE.items():
        assert versions, f"{name} applies to none of the fuzzed versions"
    # The mutation seeds really are valid: every seed datagram decodes under the key.
    for version in VERSIONS:
        codec = _lan_codec(profile_for(version), KEY)
        assert SEEDS[version]["datagram"], version
        for datagram in SEEDS[version]["datagram"]:
            codec.decode(datagram, SRC)
    for kind in ("station:0", "mesh:0", "mesh:1", "rtt:1", "keep-alive:0", "reliable:0"):
        assert SEEDS["5.18"].get(kind), kind
    assert len(PRUDP_SEEDS["quazal-v0"]) > 50


def _ldn_link_seeds() -> list[bytes]:
    """One frame of each kind of the simulated LDN link's discovery channel (protocols.ldn_link)."""
    from protocols.ldn_link import (
        AdvertFrame,
        Advertisement,
        ConnectReply,
        ConnectRequest,
        LdnParticipant,
        LeaveNotice,
        encode_frame,
    )

    host = LdnParticipant("169.254.7.1", bytes.fromhex("02007ffe0701"), "host")
    guest = LdnParticipant("169.254.7.2", bytes.fromhex("02007ffe0702"), "guest")
    adv = Advertisement(0x0100000000001000, bytes(range(16)), bytes(range(24)), participants=(host, guest))
    frames = (AdvertFrame(49152, 40000, adv), ConnectRequest(b"t" * 8, "guest"), ConnectReply(b"t" * 8, 0, guest.ip),
              LeaveNotice(guest.ip))  # fmt: skip
    return [encode_frame(f) for f in frames]


@FUZZ
@given(data=st.data())
def test_ldn_link_frames_give_value_or_decode_error(data: st.DataObject) -> None:
    """The LDN discovery channel is read from anyone on the link (adverts, connect requests and replies, leave
    notices): any bytes give a frame or a DecodeError, and a frame read encodes again (a name's undecodable bytes
    are read as replacement characters, so not always to the same bytes)."""
    from protocols.ldn_link import decode_frame, encode_frame

    raw = data.draw(_bytes_for(_ldn_link_seeds()), label="input")
    try:
        frame = decode_frame(raw)
    except DecodeError:
        return
    assert isinstance(decode_frame(encode_frame(frame)), type(frame))
