"""The session's receive path for lone-message packets equals its general path.

``MeshSession.receive_datagram`` takes a packet of one message from a
connected peer through the codec's ``lone_decoder()`` and ``_receive_lone``, which build
no values, and a station's unreliable data through its ``lone_opener``, which reads
no fields.  The same lossy, duplicating, reordering sans-IO mesh is run twice
from the same seeds, once as it is and once with the lone decoder giving
``decode``'s Packets and no openers (so every datagram takes the general path); every event,
counter, drop and station row must come out the same.
"""

from __future__ import annotations

from typing import Any

import pytest
from mesh_harness import Link, MeshHarness

from pianode.mesh.events import DataReceived
from protocols.pia.packet import PacketCodec
from protocols.pia.packet_values import LoneMessage


def run_mesh(version: str) -> dict[str, Any]:
    h = MeshHarness(4, version=version, link=Link(loss=0.1, duplicate=0.1, reorder=0.2, seed=11))
    assert h.form()
    for round_ in range(12):
        for i, s in enumerate(h.sessions):
            s.broadcast(b"frame %d from %d" % (round_, i), reliable=False, now=h.now)
            # (Unicast too: from 5.27 on a broadcast to several stations is a group packet.)
            s.send(h.sessions[(i + 1) % 4].index, b"to the next, %d from %d" % (round_, i), reliable=False, now=h.now)
            if round_ % 3 == 0:
                s.broadcast(b"reliable %d from %d" % (round_, i), reliable=True, now=h.now)
        h.run_for(0.02)
    h.run_for(3.0)  # retransmissions, acks, RTT probes, keep-alives
    return {
        "events": {i: [repr(e) for e in evs] for i, evs in h.events.items()},
        "counters": [dict(s.counters) for s in h.sessions],
        "drops": [dict(s.drops) for s in h.sessions],
        "stations": [[repr(row) for row in s.stations()] for s in h.sessions],
        "now": h.now,
    }


@pytest.mark.parametrize("version", ["5.18", "5.26", "5.29", "5.45"])
def test_lone_path_equals_the_general_path(version: str, monkeypatch: pytest.MonkeyPatch) -> None:
    lone_decoder = PacketCodec.lone_decoder
    tuples = 0

    def counting(self: PacketCodec) -> Any:
        decode = lone_decoder(self)

        def count(data: bytes, source: str) -> Any:
            nonlocal tuples
            got = decode(data, source)
            tuples += type(got) is LoneMessage
            return got

        return count

    lone_opener = PacketCodec.lone_opener
    opened = 0

    def counting_opener(self: PacketCodec, lone: Any, source: str) -> Any:
        open_ = lone_opener(self, lone, source)
        assert open_ is not None, "every profile here has an opener"

        def count(data: bytes) -> Any:
            nonlocal opened
            got = open_(data)
            opened += type(got) is bytes
            return got

        return count

    monkeypatch.setattr(PacketCodec, "lone_decoder", counting)
    monkeypatch.setattr(PacketCodec, "lone_opener", counting_opener)
    fast = run_mesh(version)
    received = sum(c["packets_received"] for c in fast["counters"])
    assert tuples > received // 8, "packets of one message must take the lone path"
    assert opened >= 12, "a station's unreliable data must take the opener (48 unicasts were sent)"

    monkeypatch.setattr(PacketCodec, "lone_decoder", lambda self: self.decode)
    monkeypatch.setattr(PacketCodec, "lone_opener", lambda self, lone, source: None)
    general = run_mesh(version)

    assert fast == general
    delivered = sum(c["reliable_delivered"] for c in fast["counters"])
    assert delivered == 4 * 3 * 4  # every reliable broadcast, exactly once
    assert sum(c["unreliable_delivered"] for c in fast["counters"]) > 0
    assert sum(d.get("replayed", 0) for d in fast["drops"]) > 0  # duplicates went through the filter


@pytest.mark.parametrize(
    ("version", "field"),
    [("5.18", "constant_id"), ("5.18", "peer_conn_id"), ("5.29", "variable_id")],  # what each version's packets name
)
def test_an_opener_serves_only_the_identity_it_was_made_for(version: str, field: str) -> None:
    """A's opener for B's stream is used while B is who it was; once A knows B by another
    id, B's packets under the old one are refused as the general path refuses them."""
    h = MeshHarness(2, version=version)
    assert h.form()
    h.run_for(0.5)
    a, b = h.sessions

    def frames(*payloads: bytes) -> list[bytes]:
        out = []
        for p in payloads:
            b.send(a.index, p, reliable=False, now=h.now)  # type: ignore[arg-type]
            out += [d for d, dst in b.datagrams_to_send(h.now) if dst == a.local_address]
        return out

    def delivered() -> list[bytes]:
        return [e.data for e in a.take_events() if isinstance(e, DataReceived)]

    a.take_events()
    for d in frames(b"first", b"second"):
        a.receive_datagram(d, b.local_address, h.now)
    assert delivered() == [b"first", b"second"]
    peer = a.peers[b.local_address]
    assert peer.opener is not None and peer.opener[1] is not None, "the first frame made B's opener"

    later = frames(b"third")
    setattr(peer, field, getattr(peer, field) ^ 1)  # A now knows B by another id (the frame carries the old one)
    mismatches = a.drops["identity_mismatch"]
    a.receive_datagram(later[0], b.local_address, h.now)
    assert delivered() == []
    assert a.drops["identity_mismatch"] == mismatches + 1
