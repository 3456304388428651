"""NonceReplayFilter against a plain model: a nonce value is accepted once, never
again, and never when it is ``window`` or more below the highest value seen or
(with ``floor``) below the first value accepted."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pianode.mesh.replay import NonceReplayFilter


def nonce(value: int) -> bytes:
    return b"\x7f\x00\x00\x01\x05" + value.to_bytes(7, "big")


class Model:
    def __init__(self, window: int, floor: bool = False) -> None:
        self.window = window
        self.floor = floor
        self.seen: set[int] = set()
        self.top = -1
        self.first: int | None = None

    def accept(self, value: int) -> bool:
        if value in self.seen or value <= self.top - self.window:
            return False
        if self.first is None:
            self.first = value
        elif value < self.first and self.floor:
            return False
        self.seen.add(value)
        self.top = max(self.top, value)
        return True


def test_in_order_then_every_replay_refused() -> None:
    f = NonceReplayFilter()
    assert all(f.accept(nonce(v)) for v in range(0, 3000, 3))
    assert not any(f.accept(nonce(v)) for v in range(0, 3000, 3))


def test_reordered_within_window_accepted_once() -> None:
    f = NonceReplayFilter(window=64, floor=True)
    assert f.accept(nonce(30))
    assert f.accept(nonce(100))
    assert f.accept(nonce(90))  # late but inside the window
    assert not f.accept(nonce(90))
    assert f.accept(nonce(37))  # 63 below the top: the oldest value still tracked
    assert not f.accept(nonce(36))  # 64 below: too old to judge, refused


def test_nothing_below_the_first_value_is_new() -> None:
    """What the sender sent before its first packet to us went to other stations (one counter for
    all its receivers, spec §3.2), or to the station at our address before us: refused, even within
    the window."""
    f = NonceReplayFilter(window=64, floor=True)
    assert f.accept(nonce(1000))
    assert not f.accept(nonce(999)) and not f.accept(nonce(990))
    assert f.accept(nonce(1010)) and f.accept(nonce(1005))
    assert not f.accept(nonce(999))
    assert f.span() == (1000, 1010)
    g = NonceReplayFilter(window=64)  # per-connection packet ids (pianode.mesh.legacy): no floor
    assert g.accept(nonce(1000)) and g.accept(nonce(999)) and g.span() == (999, 1000)


def test_only_a_value_beyond_the_highest_advances() -> None:
    """With floor, ``advanced`` says whether the value accepted last was the highest yet (only such a one
    shows the sender is still there); without, it stays True (per-connection packet ids, <= 5.6)."""
    f = NonceReplayFilter(window=64, floor=True)
    assert f.accept(nonce(100)) and f.advanced
    assert f.accept(nonce(105)) and f.advanced
    assert f.accept(nonce(103)) and not f.advanced
    assert not f.accept(nonce(103))
    assert f.accept(nonce(106)) and f.advanced
    g = NonceReplayFilter(window=64)
    assert g.accept(nonce(100)) and g.accept(nonce(99)) and g.advanced


def test_only_the_last_seven_bytes_count() -> None:
    # The byte before them is the connection id in LAN 5.x nonces (see module docstring).
    f = NonceReplayFilter()
    assert f.accept(b"\x00" * 5 + (5).to_bytes(7, "big"))
    assert not f.accept(b"\x01" * 5 + (5).to_bytes(7, "big"))


def test_jump_beyond_window_forgets_the_past() -> None:
    f = NonceReplayFilter(window=32)
    assert f.accept(nonce(1))
    assert f.accept(nonce(1000))
    assert not f.accept(nonce(1))
    assert f.accept(nonce(999))


@settings(max_examples=300, deadline=None)
@given(
    st.sampled_from([8, 64, 1024]),
    st.lists(st.integers(min_value=0, max_value=20_000), min_size=1, max_size=400),
    st.booleans(),
)
def test_matches_model(window: int, values: list[int], floor: bool) -> None:
    f = NonceReplayFilter(window=window, floor=floor)
    model = Model(window, floor)
    for v in values:
        assert f.accept(nonce(v)) == model.accept(v), v


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=600), st.booleans())
def test_long_runs_stay_bounded_and_exact(steps: list[int], floor: bool) -> None:
    # Many small forward steps: the ring wraps many times and stays exact.
    window = 64
    f = NonceReplayFilter(window=window, floor=floor)
    model = Model(window, floor)
    value = 0
    for step in steps:
        value += step
        assert f.accept(nonce(value)) == model.accept(value)
        back = max(0, value - step * 3)
        assert f.accept(nonce(back)) == model.accept(back)
        assert f._recent.bit_length() <= window  # one bit per value of the window, however far it moved


def test_window_is_a_power_of_two() -> None:
    import pytest

    with pytest.raises(ValueError, match="power of two"):
        NonceReplayFilter(window=1000)


def test_a_fence_refuses_an_earlier_incarnations_values_and_nothing_else() -> None:
    f = NonceReplayFilter(8)
    f.fences = ((100, 200),)
    assert not f.accept_value(150) and not f.accept_value(100) and not f.accept_value(200)
    assert f.accept_value(50) and f.accept_value(201) and f.span() == (50, 201)


def test_a_6_32_nonce_for_another_receiver_is_refused_whatever_its_counter() -> None:
    from pianode.mesh.replay import ReceiverBoundReplayFilter, receiver_bound_nonce

    f = ReceiverBoundReplayFilter(0x1234, 8)
    ours, other, group = (receiver_bound_nonce(v, 1000) for v in (0x1234, 0x9999, 0))
    assert f.accept(b"\x7f\x00\x00\x01" + ours) and not f.accept(b"\x7f\x00\x00\x01" + ours)
    assert f.accept(b"\x7f\x00\x00\x01" + group)  # a group packet's counter, judged apart
    for counter in (999, 1001, 1 << 30):
        assert not f.accept(b"\x7f\x00\x00\x01" + receiver_bound_nonce(0x9999, counter))
        assert not f.accept(b"\x7f\x00\x00\x01" + receiver_bound_nonce(0x0012, counter))
    assert not f.accept(b"\x7f\x00\x00\x01" + other)
    f.fences = ((0, 5000),)
    assert not f.accept(b"\x7f\x00\x00\x01" + receiver_bound_nonce(0, 2000))
    assert not f.accept(b"\x7f\x00\x00\x01" + receiver_bound_nonce(0x1234, 2000))
