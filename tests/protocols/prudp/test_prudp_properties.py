"""Property tests: round trips for every variant; arbitrary or mutated bytes give a value or DecodeError."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from protocols.errors import DecodeError
from protocols.prudp import VARIANTS, Flag, PacketCodec, PacketType, PrudpPacket, decode_datagram
from protocols.prudp.payload import add_ratio, aes_cbc_open, aes_cbc_seal, strip_ratio
from protocols.prudp.rendezvous import HostHello
from protocols.prudp.variants import Framing, Variant

NAMES = sorted(VARIANTS)
BASIC = Flag.ACK | Flag.RELIABLE | Flag.NEED_ACK | Flag.HAS_SIZE


@st.composite
def packets(draw: st.DrawFn, v: Variant, last: bool = True) -> PrudpPacket:
    ptype = draw(st.sampled_from(list(PacketType)))
    flags = Flag(draw(st.integers(0, 15))) | (Flag.MULTI_ACK if draw(st.booleans()) else Flag.NONE)
    if not last and v.framing == Framing.V0:
        flags |= Flag.HAS_SIZE
    sig_len = 16 if v.framing == Framing.V1 else 4
    conn = draw(st.binary(min_size=v.connection_signature_bytes, max_size=v.connection_signature_bytes))
    frag_max = 255 if v.fragment_id_bytes == 1 else 0xFFFFFFFF
    fields: dict[str, object] = dict(
        source=draw(st.integers(0, 255)),
        destination=draw(st.integers(0, 255)),
        type=ptype,
        flags=flags,
        session_id=draw(st.integers(0, 255)),
        signature=draw(st.binary(min_size=sig_len, max_size=sig_len)),
        sequence_id=draw(st.integers(0, 0xFFFF)),
        payload=draw(st.binary(max_size=40)),
    )
    if v.framing == Framing.V1:
        fields["substream_id"] = draw(st.integers(0, 255))
        fields["connection_signature"] = draw(st.none() | st.just(conn))
        fields["fragment_id"] = draw(st.none() | st.integers(0, 255))
        fields["supported_functions"] = draw(st.none() | st.integers(0, 0xFFFFFFFF))
        fields["initial_unreliable_id"] = draw(st.none() | st.integers(0, 0xFFFF))
        fields["max_substream"] = draw(st.none() | st.integers(0, 255))
    else:
        if ptype in (PacketType.SYN, PacketType.CONNECT):
            fields["connection_signature"] = conn
        if ptype == PacketType.DATA:
            fields["fragment_id"] = draw(st.integers(0, frag_max))
    return PrudpPacket(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=60, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_round_trip(name: str, data: st.DataObject) -> None:
    codec = PacketCodec(name, "8dtRv2oj")
    ps = [data.draw(packets(codec.variant, last=False)) for _ in range(data.draw(st.integers(0, 2)))]
    ps.append(data.draw(packets(codec.variant)))
    wire = codec.encode_many(ps)
    back = codec.decode(wire)
    assert back == ps
    assert all(p.checksum_ok is not False for p in back)
    assert codec.encode_many(back) == wire


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=150)
@given(blob=st.binary(max_size=80))
def test_garbage_is_a_value_or_decode_error(name: str, blob: bytes) -> None:
    for data in (blob, b"\xea\xd0\x01" + blob):
        try:
            decode_datagram(data, name, "8dtRv2oj", aes_key=bytes(16))
        except DecodeError:
            pass


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=60)
@given(data=st.data())
def test_mutated_packets_are_a_value_or_decode_error(name: str, data: st.DataObject) -> None:
    codec = PacketCodec(name, "8dtRv2oj")
    wire = bytearray(codec.encode(data.draw(packets(codec.variant))))
    i = data.draw(st.integers(0, len(wire) - 1))
    wire[i] ^= data.draw(st.integers(1, 255))
    cut = data.draw(st.integers(0, len(wire)))
    for mutated in (bytes(wire), bytes(wire[:cut])):
        try:
            out = codec.decode(mutated)
        except DecodeError:
            continue
        assert isinstance(out, list)


@settings(max_examples=60)
@given(plain=st.binary(max_size=3000), compress=st.booleans())
def test_ratio_round_trip(plain: bytes, compress: bool) -> None:
    wire = add_ratio(plain, compress=compress)
    assert strip_ratio(wire) == plain
    if wire[0]:
        assert wire[0] == len(plain) // (len(wire) - 1) + 1


@settings(max_examples=100)
@given(blob=st.binary(max_size=200))
def test_payload_decoders_raise_only_decode_error(blob: bytes) -> None:
    for fn in (strip_ratio, lambda b: aes_cbc_open(bytes(16), b), HostHello.decode):
        try:
            fn(blob)
        except DecodeError:
            pass


@settings(max_examples=40)
@given(plain=st.binary(max_size=200), iv=st.binary(min_size=16, max_size=16))
def test_aes_round_trip(plain: bytes, iv: bytes) -> None:
    key = bytes(range(16))
    assert aes_cbc_open(key, aes_cbc_seal(key, plain, iv)) == plain


def test_one_byte_form_cannot_encode_unknown_flags() -> None:
    codec = PacketCodec("quazal-v0")
    p = PrudpPacket(source=0x3F, destination=0x31, type=PacketType.PING, flags=Flag(0x10))
    with pytest.raises(Exception, match="1-byte"):
        codec.encode(p)
    assert PacketCodec("nintendo-v0").decode(PacketCodec("nintendo-v0").encode(p)) == [p]


def test_only_last_packet_may_omit_has_size() -> None:
    codec = PacketCodec("nintendo-v0")
    p = PrudpPacket(source=0xAF, destination=0xA1, type=PacketType.PING, flags=Flag.NEED_ACK)
    with pytest.raises(Exception, match="HAS_SIZE"):
        codec.encode_many([p, p])
    sized = attrs.evolve(p, flags=p.flags | Flag.HAS_SIZE)
    assert codec.decode(codec.encode_many([sized, p])) == [sized, p]
