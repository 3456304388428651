"""The session's receive path for lone-message packets equals its general path.

``MeshSession.receive_datagram`` takes a packet of one message from a
connected peer through the codec's ``lone_decoder()`` and ``_receive_lone``, which build
no values.  The same lossy, duplicating, reordering sans-IO mesh is run twice
from the same seeds, once as it is and once with the lone decoder giving
``decode``'s Packets (so every datagram takes the general path); every event,
counter, drop and station row must come out the same.
"""

from __future__ import annotations

from typing import Any

import pytest
from mesh_harness import Link, MeshHarness

from protocols.pia.packet import PacketCodec


def run_mesh(version: str) -> dict[str, Any]:
    h = MeshHarness(4, version=version, link=Link(loss=0.1, duplicate=0.1, reorder=0.2, seed=11))
    assert h.form()
    for round_ in range(12):
        for i, s in enumerate(h.sessions):
            s.broadcast(b"frame %d from %d" % (round_, i), reliable=False, now=h.now)
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
            tuples += type(got) is tuple
            return got

        return count

    monkeypatch.setattr(PacketCodec, "lone_decoder", counting)
    fast = run_mesh(version)
    received = sum(c["packets_received"] for c in fast["counters"])
    assert tuples > received // 4, "packets of one message must take the lone path"

    monkeypatch.setattr(PacketCodec, "lone_decoder", lambda self: self.decode)
    general = run_mesh(version)

    assert fast == general
    delivered = sum(c["reliable_delivered"] for c in fast["counters"])
    assert delivered == 4 * 3 * 4  # every reliable broadcast, exactly once
    assert sum(c["unreliable_delivered"] for c in fast["counters"]) > 0
    assert sum(d.get("replayed", 0) for d in fast["drops"]) > 0  # duplicates went through the filter
