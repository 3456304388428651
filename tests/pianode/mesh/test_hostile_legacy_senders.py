"""A 3.x-5.4 datagram replayed from another member's address, sans-IO.

Up to 5.6 the header names its sender only by the connection id the sender drew for the
receiver (2..255, spec §1.3), which another member's id for the same receiver equals once in
254 pairs; and M-A messages (<= 5.4) carry source constant id 0 in local play (the real 3DS
frames).  With the two ids equal, a datagram B sent C, replayed to C from A's address, passed
as A's: its data was delivered as A's, and C's packet ids for A jumped to B's, so that A's own
packets were refused as replays until C dropped A.  The M-A source station index, which the
HMAC covers, names B: such a datagram is now refused (identity_mismatch).
"""

from __future__ import annotations

import types

import pytest
from mesh_harness import BatchHarness, all_connected, form, recorder

from pianode.mesh.events import DataReceived


@pytest.mark.parametrize(("version", "network"), [("4.10", "ldn"), ("5.2", "ldn"), ("3.10", "nex")])
def test_a_datagram_replayed_from_a_member_with_the_same_connection_id_is_not_theirs(version: str, network: str) -> None:
    h = BatchHarness(3, version=version, network=network)
    for s in h.sessions:  # every connection draws 77: A's and B's ids for C are equal (forced)
        s.links._rng = types.SimpleNamespace(randrange=lambda low, high: 77)  # type: ignore[assignment]
    a, b, c = form(h)
    assert a.index is not None and b.index is not None and c.index is not None
    for i in range(700):  # B's packet ids for C run well ahead of A's
        b.send(c.index, b"frame %d" % i, reliable=False, now=h.now)
        h.run_for(0.01)
    captured: list[bytes] = []

    h.hook = recorder(captured, b.local_address, c.local_address)
    b.send(c.index, b"for C", reliable=False, now=h.now)
    h.run_for(0.5)
    h.hook = None
    assert captured
    before = c.drops.get("identity_mismatch", 0)
    for data in captured:
        c.receive_datagram(data, a.local_address, h.now)
    h._send_all()
    from_a = [e.data for e in h.events[2] if isinstance(e, DataReceived) and e.source_index == a.index]
    assert from_a == []
    assert c.drops.get("identity_mismatch", 0) - before == len(captured)
    a.send(c.index, b"genuine from A", reliable=False, now=h.now)
    h.run_for(2.0)
    from_a = [e.data for e in h.events[2] if isinstance(e, DataReceived) and e.source_index == a.index]
    assert from_a == [b"genuine from A"]
    h.run_for(2 * c.config.station_timeout)
    assert all_connected([a, b, c])
    assert all(sum(s._tally.departures.values()) == 0 for s in (a, b, c))
