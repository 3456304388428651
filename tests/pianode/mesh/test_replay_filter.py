"""NonceReplayFilter against a plain model: a nonce value is accepted once, never
again, and never when it is ``window`` or more below the highest value seen."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pianode.mesh.replay import NonceReplayFilter


def nonce(value: int) -> bytes:
    return b"\x7f\x00\x00\x01\x05" + value.to_bytes(7, "big")


class Model:
    def __init__(self, window: int) -> None:
        self.window = window
        self.seen: set[int] = set()
        self.top = -1

    def accept(self, value: int) -> bool:
        if value in self.seen or value <= self.top - self.window:
            return False
        self.seen.add(value)
        self.top = max(self.top, value)
        return True


def test_in_order_then_every_replay_refused() -> None:
    f = NonceReplayFilter()
    assert all(f.accept(nonce(v)) for v in range(0, 3000, 3))
    assert not any(f.accept(nonce(v)) for v in range(0, 3000, 3))


def test_reordered_within_window_accepted_once() -> None:
    f = NonceReplayFilter(window=64)
    assert f.accept(nonce(100))
    assert f.accept(nonce(90))  # late but inside the window
    assert not f.accept(nonce(90))
    assert f.accept(nonce(37))  # 63 below the top: the oldest value still tracked
    assert not f.accept(nonce(36))  # 64 below: too old to judge, refused


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
)
def test_matches_model(window: int, values: list[int]) -> None:
    f = NonceReplayFilter(window=window)
    model = Model(window)
    for v in values:
        assert f.accept(nonce(v)) == model.accept(v), v


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=1, max_value=40), min_size=1, max_size=600))
def test_long_runs_stay_bounded_and_exact(steps: list[int]) -> None:
    # Many small forward steps: the ring wraps many times and stays exact.
    window = 64
    f = NonceReplayFilter(window=window)
    model = Model(window)
    value = 0
    for step in steps:
        value += step
        assert f.accept(nonce(value)) == model.accept(value)
        back = max(0, value - step * 3)
        assert f.accept(nonce(back)) == model.accept(back)
        assert len(f._slots) == window


def test_window_is_a_power_of_two() -> None:
    import pytest

    with pytest.raises(ValueError, match="power of two"):
        NonceReplayFilter(window=1000)
