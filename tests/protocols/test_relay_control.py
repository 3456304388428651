"""The relay's control frames and datagram envelopes: exact bytes, round trips, reassembly, the error family."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocols.errors import BadValue, DecodeError, ShortData
from protocols.relay_control import (
    BulkData, FrameDecoder, Hello, Member, MemberJoined, MemberLeft, Ping, Pong, Refused, Welcome, decode_body,
    decode_envelope, encode_body, encode_envelope, encode_frame,
)  # fmt: skip

MESSAGES = [
    Hello("lan-1", "site-a"),
    Hello("lan-1", "site-a", "10.77.0.2"),
    Welcome("lan-1", 3, "10.77.0.2", 16, (Member("10.77.0.3", "site-b"),)),
    Refused("client certificate is not from this relay's CA"),
    MemberJoined(Member("10.77.0.9", "x")),
    MemberLeft("10.77.0.9"),
    Ping(1 << 40),
    Pong(0),
    BulkData("0.0.0.0", "capture", b"\x00" * 70000),
]


def test_hello_bytes_are_compact() -> None:
    # type 1, version 1, "r" (count 1), "n", address 10.0.0.2 as a compact u32 (FF + u32 LE)
    assert encode_body(Hello("r", "n", "10.0.0.2")).hex() == "01" "01" "0172" "016e" "ff0200000a"
    assert encode_body(Hello("r", "n")).hex() == "0101" "0172" "016e" "00"


@pytest.mark.parametrize("msg", MESSAGES, ids=lambda m: type(m).__name__)
def test_messages_round_trip(msg: object) -> None:
    assert decode_body(encode_body(msg)) == msg  # type: ignore[arg-type]


def test_frames_reassemble_across_any_cut() -> None:
    stream = b"".join(encode_frame(m) for m in MESSAGES)
    for step in (1, 2, 7, 1000, len(stream)):
        dec = FrameDecoder(max_frame=1 << 20)
        got = []
        for i in range(0, len(stream), step):
            got.extend(dec.feed(stream[i : i + step]))
        assert got == MESSAGES
        assert dec.pending == 0


def test_an_oversized_frame_is_refused_before_it_is_buffered() -> None:
    with pytest.raises(BadValue):
        FrameDecoder(max_frame=100).feed(bytes.fromhex("fd6500"))  # announces 101 bytes


@pytest.mark.parametrize("hexed", ["63", "0101", "0202", "02017201", "0401", "0801", "06ff"])
def test_bad_bodies_raise_the_decode_error_family(hexed: str) -> None:
    with pytest.raises(DecodeError):
        decode_body(bytes.fromhex(hexed))


@given(st.binary(max_size=40))
def test_any_body_is_a_message_or_a_decode_error(blob: bytes) -> None:
    try:
        msg = decode_body(blob)
    except DecodeError:
        return
    assert decode_body(encode_body(msg)) == msg


def test_envelope_layout() -> None:
    data = encode_envelope(("10.77.0.2", 49152), ("10.77.255.255", 30000), b"pia")
    assert data.hex() == "0a4d0002" "c000" "0a4dffff" "7530" + b"pia".hex()
    env = decode_envelope(data)
    assert (env.source, env.destination, env.payload) == (("10.77.0.2", 49152), ("10.77.255.255", 30000), b"pia")
    with pytest.raises(ShortData):
        decode_envelope(data[:11])
