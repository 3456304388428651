"""Packet id counter and receive filter (spec §1.4), on real flows and across the 65535 → 1 wrap."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pianode.mesh.packet_ids import PacketIdCounter, PacketIdFilter, Verdict, packet_id_distance


def test_counter_starts_at_one_and_skips_zero() -> None:
    c = PacketIdCounter()
    assert [c.next() for _ in range(3)] == [1, 2, 3]
    c = PacketIdCounter(0xFFFE)
    assert [c.next() for _ in range(4)] == [0xFFFE, 0xFFFF, 1, 2]
    assert c.peek() == 3
    c.reset()
    assert c.next() == 1
    with pytest.raises(ValueError):
        PacketIdCounter(0)


def test_counter_full_cycle_never_yields_zero() -> None:
    c = PacketIdCounter()
    ids = [c.next() for _ in range(65535 * 2)]
    assert 0 not in ids
    assert sorted(set(ids)) == list(range(1, 65536))
    assert ids[65535] == 1


def test_distance_on_cycle_without_zero() -> None:
    assert packet_id_distance(1, 0xFFFF) == 1  # 65535 → 1 is one step
    assert packet_id_distance(0xFFFF, 1) == -1
    assert packet_id_distance(10, 3) == 7
    assert packet_id_distance(3, 3) == 0


def test_in_order_across_wrap() -> None:
    f = PacketIdFilter(expected=0xFFF0)
    c = PacketIdCounter(0xFFF0)
    for _ in range(100):
        assert f.accept(c.next()) is Verdict.ACCEPTED
    assert f.highest == 84  # 16 ids 0xFFF0..0xFFFF, then 1..84
    assert f.statistics().accepted == 100


def test_duplicates_old_and_far_ahead() -> None:
    f = PacketIdFilter(window=8, max_ahead=20)
    assert f.accept(1) is Verdict.ACCEPTED
    assert f.accept(1) is Verdict.DUPLICATE
    assert f.accept(5) is Verdict.ACCEPTED  # 2..4 lost or late
    assert f.accept(3) is Verdict.ACCEPTED  # late but inside the window
    assert f.accept(3) is Verdict.DUPLICATE
    assert f.accept(26) is Verdict.TOO_FAR_AHEAD  # 21 past the highest (5)
    assert f.accept(25) is Verdict.ACCEPTED
    assert f.accept(17) is Verdict.TOO_OLD  # 8 behind 25 = outside the window
    assert f.accept(18) is Verdict.ACCEPTED
    assert f.accept(0) is Verdict.ZERO
    s = f.statistics()
    assert (s.accepted, s.duplicate, s.too_old, s.too_far_ahead, s.zero) == (5, 2, 1, 1, 1)


def test_fresh_filter_expects_one() -> None:
    f = PacketIdFilter()
    assert f.check(0xFFFF) is Verdict.TOO_OLD  # "before" the first id of a new connection
    assert f.check(2000) is Verdict.TOO_FAR_AHEAD
    assert f.accept(3) is Verdict.ACCEPTED
    any_first = PacketIdFilter(expected=None)
    assert any_first.accept(40000) is Verdict.ACCEPTED
    assert any_first.accept(40000) is Verdict.DUPLICATE


def test_survives_more_than_16_losses() -> None:
    # The old rule (drop ids > 16 ahead of the expected one, spec §1.4) would refuse
    # every packet after 17 consecutive losses; ours survives up to max_ahead.
    f = PacketIdFilter()
    f.accept(1)
    assert f.accept(1 + 500) is Verdict.ACCEPTED
    assert f.accept(502) is Verdict.ACCEPTED


def _flows(captures):
    doc = json.loads((captures / "nDPI-nintendo.expected.json").read_text())
    cols = doc["packets_columns"]
    flows: dict[tuple[int, int], list[int]] = {}
    for row in doc["packets"]:
        r = dict(zip(cols, row, strict=True))
        if r["connection_id"] not in (0, 1):  # 1 = pre-join id of the initiator (packet id 0)
            flows.setdefault((r["flow"], r["connection_id"]), []).append(r["packet_id"])
    return flows


def test_real_flows_accepted_then_replays_refused(captures) -> None:
    flows = _flows(captures)
    assert len(flows) == 12
    for (flow, _cid), ids in flows.items():
        f = PacketIdFilter(expected=None if ids[0] != 1 else 1)
        verdicts = [f.accept(i) for i in ids]
        assert verdicts == [Verdict.ACCEPTED] * len(ids), flow
        # Replaying the whole flow: nothing is accepted a second time.
        assert Verdict.ACCEPTED not in [f.accept(i) for i in ids]
    # The flow that lost packet id 199 (captures README) is one of them, unharmed.
    assert any(199 not in ids and 198 in ids and 200 in ids for ids in flows.values())


def _deliver(seed: int, count: int, start: int, dup: float, reorder: int) -> list[int]:
    rng = random.Random(seed)
    c = PacketIdCounter(start)
    sent = [c.next() for _ in range(count)]
    # Local reordering: each packet may be delayed by up to `reorder` positions.
    keyed = sorted(((i + rng.uniform(0, reorder), pid) for i, pid in enumerate(sent)), key=lambda t: t[0])
    out: list[int] = []
    for _k, pid in keyed:
        out.append(pid)
        if rng.random() < dup:
            out.append(pid)
    return out


@settings(max_examples=60, deadline=None)
@given(
    st.integers(0, 2**32),
    st.integers(1, 0xFFFF),
    st.floats(0, 0.5),
    st.integers(0, 30),
)
def test_reordered_duplicated_stream_each_id_once(seed: int, start: int, dup: float, reorder: int) -> None:
    arrivals = _deliver(seed, 600, start, dup, reorder)
    f = PacketIdFilter(window=64, expected=start)
    accepted = [pid for pid in arrivals if f.accept(pid) is Verdict.ACCEPTED]
    # Never twice, and with reordering far smaller than the window nothing is lost.
    assert len(accepted) == len(set(accepted)) == 600


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 0xFFFF), max_size=300), st.integers(1, 0xFFFF))
def test_arbitrary_ids_never_accepted_twice(ids: list[int], start: int) -> None:
    # With max_ahead=100 and at most 300 packets the highest id moves < 30000 steps,
    # less than half the 65535-id cycle, so no id may ever be accepted twice.
    f = PacketIdFilter(window=32, max_ahead=100, expected=start)
    accepted = [pid for pid in ids if f.accept(pid) is Verdict.ACCEPTED]
    assert len(accepted) == len(set(accepted))
    s = f.statistics()
    assert s.accepted + s.duplicate + s.too_old + s.too_far_ahead + s.zero == len(ids)
