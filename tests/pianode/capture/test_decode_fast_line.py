"""``Decoder.json_line``: the JSON Lines text of ``pianode decode``, written straight from the codec's values for
the common datagram, must be exactly ``json.dumps`` of :meth:`Decoder.decode`'s result for every datagram.

The datagrams come from real recordings of ``pianode mesh`` (5.18 one packet per station, 5.29 group packets
with a footer, LAN discovery included) and from those datagrams damaged at random, which the fast path must
hand to the general one.
"""

from __future__ import annotations

import json
from decimal import Decimal
import subprocess
import sys
from pathlib import Path
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pianode.capture.decode import DECODED_PROTOCOLS, Decoder
from pianode.capture.json_text import _header_text, header_fields_json
from pianode.capture.pcap import Datagram, open_capture
from pianode.capture.session_file import load_session
from protocols.pia.packet_values import LoneMessage
from protocols.pia.subprotocols import decode_payload
from protocols.pia.versions import Proto, profile_for


def _record(tmp: Path, version: str, *extra: str) -> tuple[list[Datagram], dict[str, Any]]:
    pcap = tmp / f"mesh-{version}.pcap"
    subprocess.run(
        [sys.executable, "-m", "pianode", "mesh", "-n", "3", "--rate", "30", "--duration", "0.5",
         "--version", version, "--seed", "7", "--record", str(pcap), "-q", *extra],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    session = json.loads(pcap.with_suffix(".session.json").read_text())
    with open_capture(pcap) as cap:
        return list(cap), session


@pytest.fixture(scope="module")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[list[Datagram], dict[str, Any]]]:
    tmp = tmp_path_factory.mktemp("recordings")
    return {"5.18": _record(tmp, "5.18"), "5.29": _record(tmp, "5.29"), "5.29-unicast": _record(tmp, "5.29", "--fanout", "unicast")}


def _lines(datagrams: list[Datagram], session: dict[str, Any]) -> tuple[list[str], list[str], Decoder, Decoder]:
    """The fast text and json.dumps of decode(), each from its own decoder (both learn as they go)."""
    fast, general = Decoder(load_session(None, session)), Decoder(load_session(None, session))
    got = [fast.json_line(d) for d in datagrams]
    want = [json.dumps(general.decode(d).to_json()) for d in datagrams]
    return got, want, fast, general


@pytest.mark.parametrize("name", ["5.18", "5.29", "5.29-unicast"])
@pytest.mark.parametrize("version_given", [True, False])
def test_every_recorded_datagram_gives_the_general_text(
    recordings: dict[str, tuple[list[Datagram], dict[str, Any]]], name: str, version_given: bool
) -> None:
    datagrams, session = recordings[name]
    if not version_given:
        session = {k: v for k, v in session.items() if k != "version"}
    got, want, fast, general = _lines(datagrams, session)
    assert got == want
    # The fast path carried the data packets (else this test would compare the general path with itself) ...
    kinds = [json.loads(line)["kind"] for line in want]
    assert kinds.count("pia") > 50
    assert [line for line in want if json.loads(line)["authenticated"] is not True] == []  # (the line says why)
    # ... and the summary counts agree.
    assert (fast.kinds, fast.auth, fast.errors) == (general.kinds, general.auth, general.errors)


def test_the_fast_path_takes_the_data_packets(recordings: dict[str, tuple[list[Datagram], dict[str, Any]]]) -> None:
    datagrams, session = recordings["5.18"]
    dec = Decoder(load_session(None, session))
    taken = sum(dec._pia_fast_line(d) is not None for d in datagrams if d.data[:4] == bytes.fromhex("32ab9864"))
    assert taken > 0.9 * sum(d.data[:4] == bytes.fromhex("32ab9864") for d in datagrams)


def _exact_seconds(ns: int) -> str:
    """Nanoseconds as the decimal seconds they are (the shortest such text; ``.0`` for whole seconds)."""
    text = format((abs(Decimal(ns)) / 10**9).quantize(Decimal("1e-9")), "f")
    text = text.rstrip("0").rstrip(".") if "." in text else text
    text = text if "." in text else f"{text}.0"
    return f"-{text}" if ns < 0 else text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_damaged_datagrams_give_the_general_text(
    recordings: dict[str, tuple[list[Datagram], dict[str, Any]]], data: st.DataObject
) -> None:
    name = data.draw(st.sampled_from(sorted(recordings)))
    datagrams, session = recordings[name]
    d = data.draw(st.sampled_from(datagrams))
    raw = bytearray(d.data)
    how = data.draw(st.sampled_from(["flip", "cut", "grow", "time", "time_ns", "name"]))
    changes: dict[str, Any] = {}
    if how == "flip" and raw:
        at = data.draw(st.integers(0, len(raw) - 1))
        raw[at] ^= data.draw(st.integers(1, 255))
    elif how == "cut":
        del raw[data.draw(st.integers(0, len(raw))) :]
    elif how == "grow":
        raw += data.draw(st.binary(min_size=1, max_size=20))
    elif how == "time":  # a float time alone, as text input gives it
        changes["time"] = data.draw(st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True)))
        changes["time_ns"] = None
    elif how == "time_ns":  # a capture's exact time, and its float
        changes["time_ns"] = data.draw(st.integers(-(2**70), 2**70))
        changes["time"] = changes["time_ns"] / 10**9
    else:
        changes["name"] = data.draw(st.text(max_size=8))
        changes["frame"] = data.draw(st.one_of(st.none(), st.integers(0, 10**6)))
    damaged = attrs.evolve(d, data=bytes(raw), **changes)
    fast, general = Decoder(load_session(None, session)), Decoder(load_session(None, session))
    want = json.dumps(general.decode(damaged).to_json())
    if damaged.time_ns is not None:  # json_line writes the exact time where json.dumps writes its float
        head = f'{{"index": {damaged.index}, "time": '
        assert want.startswith(head)
        rest = want[want.index(', "src": ') :]
        want = f"{head}{_exact_seconds(damaged.time_ns)}{rest}"
    assert fast.json_line(damaged) == want
    assert (fast.kinds, fast.auth, fast.errors) == (general.kinds, general.auth, general.errors)


@settings(max_examples=200, deadline=None)
@given(
    proto=st.sampled_from(sorted(set(Proto) - DECODED_PROTOCOLS, key=lambda p: p.value)),
    port=st.integers(0, 3),
    payload=st.binary(max_size=64),
    version=st.sampled_from(["5.3", "5.18", "5.29", "5.43"]),
)
def test_protocols_without_a_decoded_form_have_none(proto: Proto, port: int, payload: bytes, version: str) -> None:
    """The decoder skips the sub-protocol decoders for these (DECODED_PROTOCOLS): they would give nothing."""
    assert decode_payload(proto, port, payload, profile_for(version)) is None
    assert proto is not Proto.LAN


def test_the_recordings_hold_lone_rtt_messages_with_their_decoded_form(
    recordings: dict[str, tuple[list[Datagram], dict[str, Any]]],
) -> None:
    """The recordings carry what the fast text writes a decoded form for (so the tests above compare it)."""
    for name in ("5.18", "5.29"):
        datagrams, session = recordings[name]
        dec = Decoder(load_session(None, session))
        lines = [json.loads(dec.json_line(d)) for d in datagrams]
        rtt = [m for line in lines for m in (line["messages"] or []) if len(line["messages"]) == 1 and m["protocol"] == "rtt"]
        assert rtt and all(m["decoded"]["type"] == "RttMessage" for m in rtt), name


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    payload=st.one_of(
        # RTT messages as they come (request or response, any time), with other padding, of another kind, cut
        st.builds(lambda kind, pad, time: kind.to_bytes(4, "big") + pad + time.to_bytes(8, "big"),
                  st.sampled_from([0, 1, 2, 0xFFFFFFFF]), st.sampled_from([bytes(4), b"\x00\x00\x00\x01", b"\xff" * 4]),
                  st.integers(0, 2**64 - 1)),  # fmt: skip
        st.binary(max_size=24),
    ),
    port=st.integers(0, 2),
    name=st.sampled_from(["5.18", "5.29"]),
)
def test_a_lone_rtt_message_gives_the_general_text(
    recordings: dict[str, tuple[list[Datagram], dict[str, Any]]], payload: bytes, port: int, name: str
) -> None:
    """The fast text of a lone RTT message (its decoded form written directly) is the general builder's."""
    datagrams, session = recordings[name]
    dec = Decoder(load_session(None, session))
    profile = profile_for(name)
    for d in datagrams:  # (the decoder learns the protocol ids as it reads)
        dec.json_line(d)
    rtt = profile.protocol_ids[Proto.RTT]
    lone = LoneMessage((), rtt, port, payload, 1, 2, None, 0, 0, (), 1, 0, None)
    fast, fast_error = dec._lone_message_text(profile, lone)
    msg, error = dec._message_json(profile, 1, rtt, port, 2, None, None, payload)
    assert fast == json.dumps(msg) and fast_error == error


_OPTIONAL_INT = st.one_of(st.none(), st.integers(0, 2**32 - 1))


@settings(max_examples=400, deadline=None)
@given(
    version=st.sampled_from(["5.3", "5.9", "5.18", "5.23", "5.29", "5.45", "6.16", "6.32"]),
    fields=st.tuples(
        st.booleans(), st.integers(0, 0xFFFF), st.integers(0, 255), st.one_of(st.none(), st.integers(0, 255)),
        _OPTIONAL_INT, _OPTIONAL_INT, _OPTIONAL_INT, _OPTIONAL_INT, st.integers(0, 255), st.integers(0, 255),
        st.integers(0, 255), st.binary(max_size=8), st.binary(max_size=16),
    ),
    footer=st.lists(st.integers(0, 0xFFFF), max_size=32).map(tuple),
)
def test_the_header_text_is_json_of_the_header_fields(version: str, fields: tuple[Any, ...], footer: tuple[int, ...]) -> None:
    """The fast path's header text (every header format, with and without version byte and nonce) is
    ``json.dumps`` of the general path's header object."""
    profile = profile_for(version)
    assert _header_text(profile, fields, footer) == json.dumps(header_fields_json(profile, fields, footer))
