"""A 6.16-6.30 datagram replayed from another member's address, sans-IO.

The 6.x nonce names the sender by IP at most (LAN, LDN) and not at all on NPLN
(``network_id ‖ HN``, spec §3.2), and the header's source variable id is not under
the tag (§3.1).  A datagram B sealed for C, replayed to C from A's address with A's
variable id written into the header, authenticated there as A's: it was delivered
as A's data, and C's replay memory for A jumped to B's counter, so that A's own
packets were refused as replays until A was dropped.  A 6.16-6.30 node now names
itself in its header nonce (pianode.mesh.replay.sender_bound_nonce).
"""

from __future__ import annotations

import pytest
from mesh_harness import BatchHarness, all_connected, form

from pianode.mesh.config import NodeConfig
from pianode.mesh.events import DataReceived
from pianode.mesh.session import MeshSession

SOURCE_VID = (7, 2)  # H-F: the source variable id's offset and size (spec §1.1)


def _from(h: BatchHarness, i: int, index: int | None) -> list[bytes]:
    return [e.data for e in h.events[i] if isinstance(e, DataReceived) and e.source_index == index]


def _replay_as(h: BatchHarness, src: MeshSession, dst: MeshSession, posing: MeshSession) -> int:
    """Capture what *src* sends *dst* for 0.5 s, then replay it to *dst* from *posing*'s address
    with *posing*'s variable id in each header; returns how many were replayed."""
    captured: list[bytes] = []

    def hook(data: bytes, s: tuple[str, int], d: tuple[str, int]) -> bytes:
        if s == src.local_address and d == dst.local_address:
            captured.append(data)
        return data

    assert dst.index is not None
    src.send(dst.index, b"src to dst", reliable=False, now=h.now)
    src.send(dst.index, b"src to dst, reliable", reliable=True, now=h.now)
    h.hook = hook
    h.run_for(0.5)
    h.hook = None
    offset, size = SOURCE_VID
    for data in captured:
        forged = bytearray(data)
        forged[offset:offset + size] = posing.variable_id.to_bytes(size, "big")
        dst.receive_datagram(bytes(forged), posing.local_address, h.now)
    h._send_all()
    return len(captured)


@pytest.mark.parametrize(("version", "network"), [("6.20", "npln"), ("6.30", "npln"), ("6.16", "npln")])
def test_a_datagram_replayed_from_another_members_address_is_neither_theirs_nor_cuts_them_off(
    version: str, network: str
) -> None:
    for first in (0, 1):  # both ways: one of the two stations' counters is the higher
        h = BatchHarness(3, version=version, network=network)
        group = form(h)
        a, b = group[first], group[1 - first]
        c = group[2]
        before = c.drops.get("replayed", 0) + c.drops.get("identity_mismatch", 0)
        posed_before = list(_from(h, 2, a.index))
        replayed = _replay_as(h, b, c, a)
        assert replayed
        assert _from(h, 2, a.index) == posed_before  # nothing of B's delivered as A's
        assert c.drops.get("replayed", 0) + c.drops.get("identity_mismatch", 0) - before == replayed
        assert a.index is not None and c.index is not None
        a.send(c.index, b"genuine from A", reliable=False, now=h.now)
        a.send(c.index, b"genuine reliable from A", reliable=True, now=h.now)
        h.run_for(2.0)
        assert _from(h, 2, a.index)[-2:] == [b"genuine from A", b"genuine reliable from A"], first
        h.run_for(2 * c.config.station_timeout)
        assert all_connected(group), first
        assert all(sum(s._tally.departures.values()) == 0 for s in group), first


@pytest.mark.parametrize(("ours", "theirs"), [("6.25", "6.20"), ("6.20", "6.30"), ("6.41", "6.30")])
def test_a_6x_joiner_of_another_version_is_still_told_why(ours: str, theirs: str) -> None:
    """The denial a node seals in a 6.16-6.30 joiner's format names the node in its header nonce, as that
    joiner's replay checks now require."""
    network = "ldn" if ours == "6.41" else "lan"
    h = BatchHarness(2, version=ours, network=network)
    stranger = MeshSession(
        NodeConfig(version=theirs, network=network, session_key=bytes(range(16)), bind=("127.0.0.2", 49152), seed=9),
        ("127.0.0.2", 49152),
        now=0.0,
    )
    h.sessions[1] = stranger
    h.by_addr[stranger.local_address] = stranger
    host = h.sessions[0]
    host.create(0.0)
    stranger.join(host.local_address, 0.0, host_identity=(host.location.constant_id, host.variable_id))
    assert h.run_until(lambda: stranger.closed, 30.0)
    assert not stranger.joined and len(host.table) == 1
    assert stranger.failure is not None and "version" in stranger.failure, stranger.failure
