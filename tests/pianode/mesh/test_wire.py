"""pianode.mesh.wire: the shared decode of group packets and the shared codecs."""

from __future__ import annotations

import pytest

from pianode.mesh import wire as mw
from pianode.mesh.config import NodeConfig
from protocols.errors import AuthenticationError
from protocols.pia.header import PacketHeader
from protocols.pia.message import Message
from protocols.pia.packet import Packet, PacketCodec
from protocols.pia.versions import Proto, profile_for

PROFILE = profile_for("5.29")
KEY = bytes(range(16))
SOURCE = "127.0.0.5"
UNRELIABLE = PROFILE.protocol_id(Proto.UNRELIABLE)
RTT = PROFILE.protocol_id(Proto.RTT)


class CountingCodec(PacketCodec):
    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.decodes = 0

    def decode(self, data: bytes, source: str, verify: bool = True) -> Packet:  # type: ignore[override]
        self.decodes += 1
        return super().decode(data, source, verify=verify)


def codec() -> tuple[CountingCodec, object]:
    plain, builder = mw.packet_codec(NodeConfig(version="5.29", session_key=KEY), PROFILE, KEY, 0)
    del plain
    return CountingCodec(PROFILE, KEY, builder), builder


def group_datagram(counter: int, messages: tuple[Message, ...], footer: tuple[int, ...] = (1, 2, 3)) -> bytes:
    c, _ = codec()
    header = PacketHeader(
        True, counter, version=PROFILE.header_version, destination_variable_id=0, source_variable_id=9,
        nonce=counter.to_bytes(8, "big"),
    )  # fmt: skip
    return c.encode(Packet(header, messages, footer), SOURCE)


def frame(payload: bytes) -> Message:
    return Message(UNRELIABLE, 0, payload, PROFILE.bitmap_flag, 0b1110)


def test_one_decode_for_every_station_it_reaches() -> None:
    c, builder = codec()
    key = mw.codec_key("test-shared", 1)
    data = group_datagram(1, (frame(b"f1"),))
    got = [mw.shared_decode(c, key, data, SOURCE, builder, UNRELIABLE) for _ in range(3)]  # type: ignore[arg-type]
    assert c.decodes == 1 and got[0] is got[1] is got[2]
    assert got[0].receivers == frozenset({1, 2, 3}) and got[0].unreliable == (b"f1",)
    # Equal bytes in another object (each station's own socket, unicast fan-out): the dict serves them.
    copies = [bytes(bytearray(data)) for _ in range(2)]
    assert all(mw.shared_decode(c, key, d, SOURCE, builder, UNRELIABLE) is got[0] for d in copies)  # type: ignore[arg-type]
    assert c.decodes == 1
    # Another codec setting or another source never shares a decode.
    other = mw.codec_key("test-shared", 2)
    assert mw.shared_decode(c, other, data, SOURCE, builder, UNRELIABLE) is not got[0]  # type: ignore[arg-type]
    with pytest.raises(AuthenticationError):
        mw.shared_decode(c, key, data, "127.0.0.6", builder, UNRELIABLE)  # type: ignore[arg-type]
    assert c.decodes == 3


def test_unreliable_payloads_and_the_other_messages_apart() -> None:
    c, builder = codec()
    key = mw.codec_key("test-unreliable")
    two = group_datagram(2, (frame(b"a"), frame(b"b")))
    mixed = group_datagram(3, (frame(b"a"), Message(RTT, 1, bytes(9), PROFILE.bitmap_flag, 0b1110)))
    assert mw.shared_decode(c, key, two, SOURCE, builder, UNRELIABLE).unreliable == (b"a", b"b")  # type: ignore[arg-type]
    got = mw.shared_decode(c, key, mixed, SOURCE, builder, UNRELIABLE)  # type: ignore[arg-type]
    assert got.unreliable == (b"a",) and [m.protocol_type for m in got.others] == [RTT]
    # The stations every unreliable message is for: the common bits of their destinations (0 = everyone).
    assert got.common_destination == 0b1110
    narrow = group_datagram(4, (frame(b"a"), Message(UNRELIABLE, 0, b"b", PROFILE.bitmap_flag, 0b0100)))
    assert mw.shared_decode(c, key, narrow, SOURCE, builder, UNRELIABLE).common_destination == 0b0100  # type: ignore[arg-type]
    everyone = group_datagram(5, (Message(UNRELIABLE, 0, b"c", PROFILE.bitmap_flag, 0),))
    assert mw.shared_decode(c, key, everyone, SOURCE, builder, UNRELIABLE).common_destination == -1  # type: ignore[arg-type]


def test_sessions_with_the_same_settings_share_one_codec() -> None:
    """One codec (AEAD context, nonce-builder cache) per setting in a thread: 32
    stations of one mesh keep it warm; other keys, networks or threads get their own."""
    import threading

    cfg = NodeConfig(version="5.29", session_key=KEY)
    a = mw.packet_codec(cfg, PROFILE, KEY, 7)
    assert mw.packet_codec(cfg, PROFILE, KEY, 7) is a
    assert mw.packet_codec(cfg, PROFILE, bytes(16), 7)[0] is not a[0]
    assert mw.packet_codec(cfg, PROFILE, KEY, 8)[0] is not a[0]
    assert mw.packet_codec(NodeConfig(version="5.29", session_key=KEY, network="ldn"), PROFILE, KEY, 7)[0] is not a[0]
    other: list[object] = []
    thread = threading.Thread(target=lambda: other.append(mw.packet_codec(cfg, PROFILE, KEY, 7)[0]))
    thread.start()
    thread.join()
    assert other[0] is not a[0]
    # Bounded: many settings do not pile up codecs.
    for network_id in range(100):
        mw.packet_codec(cfg, PROFILE, KEY, 1000 + network_id)
    assert len(mw._CODECS.by_settings) <= mw._CODECS_LIMIT


def test_locations_are_local_ones_and_a_private_only_location_is_read() -> None:
    """Our StationLocations carry NAT location 0, as the real 3DS frames do; a location that lists only
    its private address (NintendoClients', real frames') is read at that address, not 0.0.0.0:0."""
    from protocols.pia.types import InetAddress, StationLocation
    from protocols.pia.versions import profile_for

    loc = mw.Location(("127.0.0.5", 49152), 0x1122, 0x33, 0x44)
    for version in ("5.8", "5.18", "5.29"):
        assert mw._station_location(profile_for(version), loc).nat_location == 0
    private_only = StationLocation(private=InetAddress.from_ip("192.168.1.20", 49152), constant_id=7, variable_id=8)
    assert mw._from_station_location(private_only).address == ("192.168.1.20", 49152)
    both = StationLocation(
        public=InetAddress.from_ip("127.0.0.5", 1), private=InetAddress.from_ip("10.0.0.1", 2), constant_id=7
    )
    assert mw._from_station_location(both).address == ("127.0.0.5", 1)
