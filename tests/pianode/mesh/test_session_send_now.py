"""MeshSession.send_unreliable_now: an unreliable message sealed at once must be
the very datagram that send() + datagrams_to_send() would have produced, and it
must never overtake output already queued."""

from __future__ import annotations

import pytest
from mesh_harness import MeshHarness

from pianode.mesh.events import DataReceived

VERSIONS = ["5.8", "5.11", "5.18", "5.26", "5.29", "5.45"]


def _formed(version: str) -> MeshHarness:
    h = MeshHarness(3, version=version)
    assert h.form()
    h.run_for(0.5)
    return h


def _state(h: MeshHarness) -> tuple[object, ...]:
    b = h.sessions[1]
    return (dict(b.counters), [(s.index, s.packets_sent) for s in b.stations()], b.get_timer(), b.has_output())


@pytest.mark.parametrize("version", VERSIONS)
def test_sealed_at_once_equals_the_queued_path(version: str) -> None:
    queued, direct = _formed(version), _formed(version)
    now = queued.now
    assert direct.now == now
    for k in range(20):
        payload = bytes([k]) * (1 + 37 * k % 300)
        target = 0 if k % 3 else 2
        queued.sessions[1].send(target, payload, reliable=False, now=now)
        expected = queued.sessions[1].datagrams_to_send(now)
        got = direct.sessions[1].send_unreliable_now(target, payload, now)
        assert got is not None
        assert [got] == expected
        assert _state(direct) == _state(queued)
        direct._route(got[0], direct.sessions[1].local_address, got[1])
        now += 0.001
        queued.now = direct.now = now
    # The receivers take the datagrams as ordinary data.
    direct.run_for(0.2)
    data = [e for e in direct.events[0] if isinstance(e, DataReceived) and not e.reliable]
    assert [len(e.data) for e in data] == [1 + 37 * k % 300 for k in range(20) if k % 3]


@pytest.mark.parametrize("version", ["5.18", "5.29"])
def test_queued_output_goes_first(version: str) -> None:
    queued, direct = _formed(version), _formed(version)
    now = queued.now
    for h in (queued, direct):
        h.sessions[1].send(0, b"reliable first", reliable=True, now=now)
    queued.sessions[1].send(0, b"then this", reliable=False, now=now)
    assert direct.sessions[1].send_unreliable_now(0, b"then this", now) is None
    assert direct.sessions[1].datagrams_to_send(now) == queued.sessions[1].datagrams_to_send(now)
    assert _state(direct) == _state(queued)


def test_output_queued_for_another_station_also_goes_first() -> None:
    h = _formed("5.18")
    b = h.sessions[1]
    b.send(2, b"to station 2", reliable=False, now=h.now)
    assert b.send_unreliable_now(0, b"to station 0", h.now) is None
    out = b.datagrams_to_send(h.now)
    assert [addr for _, addr in out] == [h.sessions[2].local_address, h.sessions[0].local_address]


def test_unknown_station() -> None:
    h = _formed("5.18")
    with pytest.raises(KeyError):
        h.sessions[1].send_unreliable_now(7, b"x", h.now)


@pytest.mark.parametrize("version", ["5.18", "5.29"])
def test_a_changed_identity_is_not_sealed_with_the_old_one(version: str) -> None:
    """The sealer kept for a station serves only while what it packs still holds:
    after the station's index, ids or the codec change, packets carry the new values."""
    queued, direct = _formed(version), _formed(version)
    now = queued.now

    def both(change: object = None) -> None:
        for h in (queued, direct):
            b = h.sessions[1]
            peer = b.links.by_index(0)
            assert peer is not None
            if change == "ids":
                peer.variable_id ^= 0x55
                peer.own_conn_id ^= 0x5
            elif change == "own":
                b.outbox.variable_id ^= 0x33  # the outbox's: it seals our ids into every packet
                if b.outbox.message_source_id is not None:  # (M-F messages carry none)
                    b.outbox.message_source_id ^= 0x77
            elif change == "codec":
                b._setup_crypto(bytes(range(16, 32)), 0)
        expected = (queued.sessions[1].send(0, b"frame", reliable=False, now=now), queued.sessions[1].datagrams_to_send(now))[1]
        assert [direct.sessions[1].send_unreliable_now(0, b"frame", now)] == expected

    both()
    for change in ("ids", "own", "codec"):
        both(change)
        both()


@pytest.mark.parametrize(("version", "stations"), [("5.8", 4), ("5.18", 4), ("5.26", 4), ("5.29", 2)])
def test_broadcast_sealed_at_once_equals_the_queued_path(version: str, stations: int) -> None:
    """A broadcast that is a packet per station (no footer, or one station)
    gives the datagrams broadcast() + datagrams_to_send() give, in order."""
    queued, direct = MeshHarness(stations, version=version), MeshHarness(stations, version=version)
    for h in (queued, direct):
        assert h.form()
        h.run_for(0.5)
    now = queued.now
    for k in range(10):
        payload = bytes([k]) * (1 + 29 * k)
        n = queued.sessions[1].broadcast(payload, reliable=False, now=now)
        expected = queued.sessions[1].datagrams_to_send(now)
        got = direct.sessions[1].broadcast_unreliable_now(payload, now)
        assert got is not None and got == (n, expected) and n == stations - 1
        assert _state(direct) == _state(queued)
        now += 0.001


def test_broadcast_with_a_group_packet_or_queued_output_is_left_to_broadcast() -> None:
    h = _formed("5.29")  # three stations: one group packet for both others
    b = h.sessions[1]
    before = _state(h)
    assert b.broadcast_unreliable_now(b"frame", h.now) is None
    assert _state(h) == before  # nothing done, nothing counted
    h4 = _formed("5.18")
    b4 = h4.sessions[1]
    b4.send(0, b"queued", reliable=True, now=h4.now)
    before = _state(h4)
    assert b4.broadcast_unreliable_now(b"frame", h4.now) is None
    assert _state(h4) == before
