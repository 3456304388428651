"""RTT (spec §5.6) and Keep Alive (spec §5.5) payloads, with the real 3DS RTT exchange."""

from __future__ import annotations

import json
import pathlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from protocols.errors import BadValue, DecodeError, ShortData, TrailingData
from protocols.pia.keepalive import KeepAlive, decode_keep_alive
from protocols.pia.rtt import RttMessage, decode_rtt
from protocols.pia.versions import profile_for
from protocols.wire import Reader


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**64 - 1), st.booleans())
def test_rtt_round_trip(time: int, is_response: bool) -> None:
    msg = RttMessage(time, is_response)
    raw = msg.encode(profile_for("5.29"))
    assert len(raw) == 16
    assert raw[:4] == (1 if is_response else 0).to_bytes(4, "big") and raw[4:8] == bytes(4)
    assert raw[8:] == time.to_bytes(8, "big")
    assert decode_rtt(raw) == msg


def test_rtt_response_echoes_the_time() -> None:
    assert RttMessage(123).response() == RttMessage(123, True)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=24))
def test_rtt_garbage(blob: bytes) -> None:
    try:
        value = decode_rtt(blob)
    except DecodeError:
        return
    assert value.encode() == blob


def test_rtt_errors() -> None:
    with pytest.raises(BadValue):
        decode_rtt(bytes.fromhex("00000002") + bytes(12))
    padded = bytes.fromhex("0000000000000001") + bytes(8)  # "Padding (always 0)" (KW RTT-Protocol.md): kept
    assert decode_rtt(padded) == RttMessage(0, reserved=b"\0\0\0\1") and decode_rtt(padded).encode() == padded
    with pytest.raises(ShortData):
        decode_rtt(bytes(15))
    with pytest.raises(TrailingData):
        decode_rtt(bytes(17))


def test_keep_alive_is_empty() -> None:
    assert KeepAlive().encode() == b""
    assert decode_keep_alive(b"") == KeepAlive()
    assert decode_keep_alive(Reader(b"\x01")) == KeepAlive()
    with pytest.raises(TrailingData):
        decode_keep_alive(b"\x00")


def test_real_3ds_rtt_exchange(captures: pathlib.Path) -> None:
    doc = json.loads((captures / "mgba-uds-frames.expected.json").read_text())
    rtt = [
        (frame["from_host"], m["protocol_port"], bytes.fromhex(m["payload_hex"]))
        for frame in doc["frames"]
        for m in (frame["pia"] or {}).get("messages", [])
        if m["protocol_type"] == 0x0600
    ]
    assert len(rtt) == 4
    decoded = []
    for from_host, port, raw in rtt:
        assert port == 0  # the wiki says port 1; this real traffic uses 0
        msg = decode_rtt(raw, profile_for("4.10"))
        assert msg.encode() == raw
        decoded.append((from_host, msg))
    requests = [(h, m) for h, m in decoded if not m.is_response]
    responses = [(h, m) for h, m in decoded if m.is_response]
    assert len(requests) == len(responses) == 2
    # Every response comes from the other side and echoes a request's time unchanged.
    for host_sent, resp in responses:
        assert any(req.time == resp.time and req_host != host_sent for req_host, req in requests)
