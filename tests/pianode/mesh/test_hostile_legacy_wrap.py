"""Up to 5.6, a datagram replayed after its sender's packet ids came round again, sans-IO.

H-A packets carry no nonce: the HMAC covers a 16-bit packet id and the two 16-bit
timers (spec §1.1, §1.4, §1.5).  After 32,768 more packets a recorded id is ahead of
the newest one again, modulo 2**16.  Such a datagram, replayed once, was taken as new:
it was delivered a second time, and it moved the receiver's window so far ahead that the
sender's real packets all fell behind it and were refused as replays, until the receiver
dropped the sender as silent: one replayed datagram split the mesh.

The sender's packets in between cross a link that delivers one in :data:`KEPT`: the
receiver's replay filter follows the ids as it would with all of them, at a fraction of
the cost (the ids advance by KEPT at a time, well within what the filter takes).
"""

from __future__ import annotations

import pytest
from mesh_harness import BatchHarness, all_connected, form

from pianode.mesh.events import DataReceived

pytestmark = pytest.mark.slow  # (about 10 s in all: 40,000 to 65,000 packets each)

KEPT = 200  # one of the sender's packets in KEPT reaches the receiver between recording and replay


def _received(h: BatchHarness, at: int, source: int) -> list[bytes]:
    return [e.data for e in h.events[at] if isinstance(e, DataReceived) and e.source_index == source]


def _advance(h: BatchHarness, seconds: float) -> None:
    """Handle everything due within *seconds*, then set the clock to their end (``run_for`` runs on
    to the next timer, a second later at most, which would space a game's frames apart)."""
    end = h.now + seconds
    while True:
        h._send_all()
        due = [t for s in h.sessions if (t := s.get_timer()) is not None]
        if h.queue:
            due.append(h.queue[0][0])
        if not due or min(due) > end:
            break
        h.step()
    h.now = end


def _replay_after(
    version: str, network: str, later: int, frame_gap: float, replay_at: float | None = None
) -> tuple[BatchHarness, int, int]:
    """Record what B sends A with one frame, let B send frames *frame_gap* apart until *later* more
    datagrams went to A, and replay the recording to A from B's address (*replay_at* seconds after
    it, when given); returns the harness, A's replay drops before and after."""
    h = BatchHarness(2, version=version, network=network)
    a, b = form(h)
    assert a.index is not None and b.index is not None
    h.run_for(1.0)  # what formation left to send is sent
    captured: list[bytes] = []
    h.hook = lambda data, s, d: captured.append(data) or data if s == b.local_address else data
    b.send(a.index, b"recorded", reliable=False, now=h.now)
    _advance(h, 0.001)
    assert captured
    sent = 0

    def thin(data: bytes, s: tuple[str, int], d: tuple[str, int]) -> bytes | None:
        nonlocal sent
        if s != b.local_address:
            return data
        sent += 1
        return data if sent % KEPT == 0 else None

    h.hook = thin
    recorded_at = h.now
    while sent < later:
        b.send(a.index, b"frame", reliable=False, now=h.now)
        _advance(h, frame_gap)
    if replay_at is not None:
        assert h.now - recorded_at < replay_at
        _advance(h, replay_at - (h.now - recorded_at))
    h.hook = None
    h.elapsed = h.now - recorded_at  # type: ignore[attr-defined]
    assert all_connected([a, b])
    assert later <= sent <= later + 2  # (a frame, and an RTT probe or answer with it)
    before = a.drops.get("replayed", 0)
    for data in captured:
        a.receive_datagram(data, b.local_address, h.now)
    h._send_all()
    return h, before, a.drops.get("replayed", 0)


def _mesh_holds(h: BatchHarness) -> None:
    a, b = h.sessions
    assert a.index is not None and b.index is not None
    assert _received(h, 0, b.index).count(b"recorded") == 1
    b.send(a.index, b"after the replay", reliable=False, now=h.now)
    h.run_for(2 * a.config.station_timeout)
    assert _received(h, 0, b.index)[-1:] == [b"after the replay"]
    assert all_connected([a, b])
    assert sum(a._tally.departures.values()) == 0


@pytest.mark.parametrize(("version", "network"), [("5.2", "ldn"), ("4.10", "nex")])
def test_a_replay_whose_packet_id_came_round_far_ahead_is_refused_though_its_timers_match(version: str, network: str) -> None:
    """40,000 packets later the recorded id is 25,536 ahead of the newest; the replay comes exactly
    65.536 s after the recording, so its timers (ms, mod 2**16) read as fresh: only the id can tell."""
    h, before, after = _replay_after(version, network, 40_000, 0.99 * 65.536 / 40_000, replay_at=65.536)
    assert after >= before + 1
    _mesh_holds(h)


@pytest.mark.parametrize(("version", "network"), [("5.2", "ldn"), ("4.10", "nex")])
def test_a_replay_whose_packet_id_came_round_just_ahead_is_refused_by_its_timers(version: str, network: str) -> None:
    """65,036 datagrams later (a game's frames at 50 Hz, 21 minutes) the recorded id is just 500 ahead of
    the newest, as a real next packet's would be; its source timer, 21 minutes old, is not."""
    h, before, after = _replay_after(version, network, 65_036, 1 / 50)
    off = h.elapsed % 65.536  # type: ignore[attr-defined]
    assert 3 < off < 65.536 - 3  # (the premise: the timers, mod 65.536 s, do not read as fresh)
    assert after >= before + 1
    _mesh_holds(h)
