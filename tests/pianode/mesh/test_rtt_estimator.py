"""RTT estimator, RTT-protocol probe (spec §5.6) and H-A/H-B header timers (spec §1.5)."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pianode.mesh.rtt import (
    RTT_REQUEST,
    RTT_RESPONSE,
    SWITCH_TICK_HZ,
    HeaderTimers,
    RttEstimator,
    RttProbe,
    estimate_peer_timer,
    rtt_from_timers,
    session_timer,
    ticks,
)

# -- estimator ------------------------------------------------------------------


def test_rfc6298_first_and_second_sample() -> None:
    e = RttEstimator(initial_rto=1.0, min_rto=0.01, max_rto=60.0)
    assert e.rto == 1.0
    assert e.statistics().samples == 0
    e.on_sample(0.100, now=5.0)
    # SRTT = R, RTTVAR = R/2, RTO = SRTT + 4·RTTVAR
    assert e.smoothed == pytest.approx(0.100)
    assert e.variance == pytest.approx(0.050)
    assert e.rto == pytest.approx(0.300)
    e.on_sample(0.200, now=6.0)
    # RTTVAR = 3/4·0.05 + 1/4·|0.1 − 0.2| = 0.0625; SRTT = 7/8·0.1 + 1/8·0.2 = 0.1125
    assert e.variance == pytest.approx(0.0625)
    assert e.smoothed == pytest.approx(0.1125)
    assert e.rto == pytest.approx(0.3625)
    s = e.statistics()
    assert (s.samples, s.minimum, s.latest) == (2, pytest.approx(0.1), pytest.approx(0.2))
    assert e.last_sample_time == 6.0


def test_rto_floor_ceiling_and_granularity() -> None:
    e = RttEstimator(initial_rto=1.0, min_rto=0.2, max_rto=3.0)
    for _ in range(50):
        e.on_sample(0.001)
    assert e.rto == 0.2  # floor
    e = RttEstimator(initial_rto=1.0, min_rto=0.0001, max_rto=3.0, granularity=0.01)
    for _ in range(200):
        e.on_sample(0.05)
    # variance decays to ~0, so the clock granularity term dominates
    assert e.rto == pytest.approx(0.06, abs=1e-6)
    e = RttEstimator(initial_rto=1.0, min_rto=0.2, max_rto=3.0)
    e.on_sample(10.0)
    assert e.rto == 3.0  # ceiling


def test_bad_samples_and_bounds_rejected() -> None:
    e = RttEstimator()
    for bad in (-0.1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            e.on_sample(bad)
    with pytest.raises(ValueError):
        RttEstimator(initial_rto=0.1, min_rto=0.2)


@settings(max_examples=100)
@given(st.lists(st.floats(0, 5), min_size=1, max_size=50))
def test_estimator_stays_within_sample_range(samples: list[float]) -> None:
    e = RttEstimator(min_rto=0.001, max_rto=100, initial_rto=1)
    for s in samples:
        e.on_sample(s)
    assert e.smoothed is not None
    assert min(samples) - 1e-9 <= e.smoothed <= max(samples) + 1e-9
    assert e.minimum == min(samples)
    assert e.latest == samples[-1]
    assert e.min_rto <= e.rto <= e.max_rto


# -- RTT protocol probe -------------------------------------------------------------


def test_probe_matches_echo_once() -> None:
    a, b = RttProbe(), RttProbe()
    stamp = a.request(now=100.0)
    assert stamp == ticks(100.0) == 100 * SWITCH_TICK_HZ
    echoed = b.respond(stamp)
    assert a.on_response(echoed, now=100.042) == pytest.approx(0.042)
    assert a.estimator.samples == 1
    # The same response again, a forged value, and nothing pending: no sample.
    assert a.on_response(echoed, now=100.05) is None
    assert a.on_response(12345, now=100.05) is None
    assert a.unmatched == 2
    assert a.estimator.samples == 1


def test_probe_bounds_outstanding_and_expires() -> None:
    p = RttProbe(max_outstanding=3, timeout=5.0)
    stamps = [p.request(now=float(i)) for i in range(5)]
    assert p.outstanding == 3
    assert p.on_response(stamps[0], now=5.5) is None  # evicted (oldest)
    assert p.on_response(stamps[4], now=4.25) == pytest.approx(0.25)
    assert p.on_response(stamps[2], now=20.0) is None  # older than the timeout
    assert p.outstanding == 0


def test_capture_rtt_messages_follow_the_echo_rule(captures) -> None:
    """In the 3DS join (shared/captures mgba frames) every RTT response echoes a request of the other side."""
    doc = json.loads((captures / "mgba-uds-frames.expected.json").read_text())
    requests: dict[bool, set[int]] = {True: set(), False: set()}
    responses: list[tuple[bool, int]] = []
    for frame in doc["frames"]:
        if frame["pia"] is None:
            continue
        for m in frame["pia"]["messages"]:
            if m["protocol_type"] != 0x0600:
                continue
            kind, zero, time = struct.unpack(">IIQ", bytes.fromhex(m["payload_hex"]))
            assert zero == 0
            if kind == RTT_REQUEST:
                requests[frame["from_host"]].add(time)
            else:
                assert kind == RTT_RESPONSE
                responses.append((frame["from_host"], time))
    assert len(responses) == 2
    for from_host, echoed in responses:
        assert RttProbe.respond(echoed) in requests[not from_host]


# -- header timers (spec §1.5) ---------------------------------------------------------


def test_worked_example_234_244_248() -> None:
    # A's clock reads 234 when it sends; B receives 2 ms later and answers 10 ms
    # after that with destination timer 244; A receives at 248 ⇒ RTT 4 ms.
    a = HeaderTimers(session_start=0.0)
    b = HeaderTimers(session_start=-7.5)  # B's clock is independent
    assert a.source_timer(0.234) == 234
    assert b.on_receive(source_timer=234, destination_timer=0, now=0.236) is None
    assert b.destination_timer(0.246) == 244
    assert a.on_receive(source_timer=b.source_timer(0.246), destination_timer=244, now=0.248) == pytest.approx(0.004)
    assert rtt_from_timers(248, 244) == 4


def test_destination_timer_zero_rules() -> None:
    t = HeaderTimers(session_start=0.0)
    assert t.destination_timer(1.0) == 0  # nothing received yet
    t.on_receive(source_timer=0xFFF0, destination_timer=0, now=1.0)
    assert t.destination_timer(1.016) == 0xFFFF  # 0xFFF0 + 16 = 0 mod 2^16 → sent as 0xFFFF
    assert t.destination_timer(1.017) == 1
    assert estimate_peer_timer(0xFFFF, 1) == 0xFFFF
    assert estimate_peer_timer(0xFFFE, 1) == 0xFFFF
    assert estimate_peer_timer(0xFFFF, 2) == 1


def test_timers_wrap_and_bogus_samples() -> None:
    assert session_timer(65.536, 0.0) == 0
    assert session_timer(65.537, 0.0) == 1
    assert rtt_from_timers(3, 0xFFFE) == 5
    t = HeaderTimers(session_start=0.0, max_rtt=2.0)
    assert t.on_receive(100, 0xFFFE, now=0.003) == pytest.approx(0.005)
    assert t.on_receive(100, 30, now=5.0) is None  # 4970 ms: above max_rtt


def _pcap_times(path) -> dict[int, float]:
    data = path.read_bytes()
    pos, frame, times = 24, 0, {}
    while pos < len(data):
        sec, usec, incl, _orig = struct.unpack_from("<IIII", data, pos)
        frame += 1
        times[frame] = sec + usec / 1e6
        pos += 16 + incl
    return times


def test_header_timer_rule_on_real_traffic(captures) -> None:
    """nDPI capture (Pia <= 5.6): peers' destination timers estimate the console's clock."""
    doc = json.loads((captures / "nDPI-nintendo.expected.json").read_text())
    times = _pcap_times(captures / "nDPI-nintendo.pcap")
    flows = {f["flow"]: f for f in doc["flows"]}
    rows = [dict(zip(doc["packets_columns"], r)) for r in doc["packets"]]
    samples = []
    for port in ("52119", "55915"):
        out = [r for r in rows if flows[r["flow"]]["src"].endswith(":" + port)]
        # The console's session clock: its source timers are stamped just before capture,
        # so the largest (timer − capture ms) offset is the closest to its true start.
        offset = max((r["source_timer"] - times[r["frame"]] * 1000) % 65536 for r in out)
        console = HeaderTimers(session_start=-offset / 1000, max_rtt=1.0)
        for r in rows:
            if flows[r["flow"]]["dst"].endswith(":" + port) and r["destination_timer"]:
                rtt = console.on_receive(r["source_timer"], r["destination_timer"], times[r["frame"]])
                samples.append(rtt)
    assert len(samples) > 300
    assert None not in samples
    assert all(0.04 < s < 0.25 for s in samples)  # Internet peers 2017: 60-200 ms
    assert any(r["destination_timer"] < 1000 for r in rows if r["flow"] == 13)  # crosses the 16-bit wrap
