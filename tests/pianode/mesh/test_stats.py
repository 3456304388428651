"""The tally: counters, drops by reason, and what -v and -vv say about drops."""

from __future__ import annotations

import logging

import pytest

from pianode.mesh.stats import EXPLAINED, DropReason, Tally


def test_every_drop_reason_is_explained() -> None:
    assert set(EXPLAINED) == set(DropReason)


def test_at_v_authenticated_drops_are_logged_at_powers_of_ten(caplog: pytest.LogCaptureFixture) -> None:
    tally = Tally()
    with caplog.at_level(logging.INFO, logger="pianode.mesh"):
        for _ in range(150):
            tally.drop(DropReason.IDENTITY_MISMATCH)
        for _ in range(5):
            tally.drop(DropReason.BAD_TAG)  # noise anyone can send: not at -v
    lines = [r.getMessage() for r in caplog.records]
    assert tally.drops == {"identity_mismatch": 150, "bad_tag": 5}
    assert lines == [
        f"dropped an authenticated message (identity_mismatch, {n} so far): {EXPLAINED[DropReason.IDENTITY_MISMATCH]}"
        for n in (1, 10, 100)
    ]


@pytest.mark.parametrize("reason", [DropReason.MALFORMED, DropReason.NOT_MEMBER, DropReason.CLOSED, DropReason.OVERSIZED])
def test_at_v_a_drop_anyone_can_cause_is_not_called_authenticated(
    caplog: pytest.LogCaptureFixture, reason: DropReason
) -> None:
    # One byte from a stranger is malformed before any key is tried: the log must not say a key holder sent it.
    tally = Tally()
    with caplog.at_level(logging.INFO, logger="pianode.mesh"):
        for _ in range(10):
            tally.drop(reason)
    assert [r.getMessage() for r in caplog.records] == [
        f"dropped a datagram ({reason.value}, {n} so far): {EXPLAINED[reason]}" for n in (1, 10)
    ]


def test_at_vv_every_drop_is_logged_with_its_reason(caplog: pytest.LogCaptureFixture) -> None:
    tally = Tally()
    with caplog.at_level(logging.DEBUG, logger="pianode.mesh"):
        for _ in range(3):
            tally.drop(DropReason.BAD_TAG)
        tally.drop(DropReason.REPLAYED)
        tally.drop(DropReason.REPLAYED)
    assert [r.getMessage() for r in caplog.records] == [
        "dropped a datagram (bad_tag): it does not authenticate with the session key",
    ] * 3 + [
        "dropped an authenticated message (replayed, 1 so far): its nonce was seen before",
        "dropped a datagram (replayed): its nonce was seen before",
    ]

