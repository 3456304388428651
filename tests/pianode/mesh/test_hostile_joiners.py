"""Replays aimed at stations that have no place yet, and at the memories that refuse replays.

A joiner has no station index, so what a member sends it carries destination 0 (spec §2.5): a
datagram the member sealed for another joiner reads the same to it.  The tests here replay such
datagrams (no key needed) to a station joining through the member, and churn the first-contact and
departed-station memories that stand between a captured datagram and a new connection.
"""

from __future__ import annotations

import types

import pytest
from mesh_harness import BatchHarness, MeshHarness, all_connected
from test_hostile_peers import _capture_join, _copy_from_now, _first_request

from pianode.mesh import wire
from pianode.mesh.config import NodeConfig
from pianode.mesh.session import MeshSession
from protocols.pia import session6
from protocols.pia.versions import Proto


def _connected_to(joiner: MeshSession, member: MeshSession) -> bool:
    peer = joiner.links.peers.get(member.local_address)
    return peer is not None and peer.connected


def _same_connection_ids(s: MeshSession, conn_id: int = 77) -> None:
    """Every connection *s* opens from now on draws *conn_id* (a 1-in-254 chance, forced)."""
    s.links._rng = types.SimpleNamespace(randrange=lambda low, high: conn_id)  # type: ignore[assignment]


@pytest.mark.parametrize(
    ("version", "network"),
    [("5.29", "lan"), ("5.45", "lan"), ("6.20", "lan"), ("5.18", "lan"), ("5.6", "lan")],
)
def test_a_join_response_meant_for_another_joiner_does_not_end_a_join(version: str, network: str) -> None:
    """The host's join response to X (destination 0: X has no index), replayed to J from the host's
    address while J waits for its own: J's join goes on and completes, the replay is counted.  Up to
    5.26 the header's connection id must match too: the host's id for X equal to its id for J, once in
    254 joins, is forced."""
    h = BatchHarness(3, version=version, network=network)
    host, x, j = h.sessions
    host.create(h.now)
    _same_connection_ids(host)
    captured = _copy_from_now(h, host, x)
    x.join(host.local_address, h.now)
    assert h.run_until(lambda: all_connected([host, x]), 30.0)
    h.hook = None
    assert captured
    j.join(host.local_address, h.now)
    assert h.run_until(lambda: _connected_to(j, host), 10.0) and not j.joined
    before = sum(j.drops.values())
    for data in captured:
        j.receive_datagram(data, host.local_address, h.now)
    assert h.run_until(lambda: j.closed or all_connected([host, x, j]), 30.0)
    assert not j.closed and j.failure is None and all_connected([host, x, j])
    assert sum(j.drops.values()) > before


@pytest.mark.parametrize(
    ("version", "network"), [("5.6", "lan"), ("4.10", "ldn"), ("5.18", "lan"), ("5.29", "lan"), ("5.45", "lan")]
)
def test_a_connection_denial_meant_for_another_station_does_not_refuse_a_join(version: str, network: str) -> None:
    """The host denied X's connection (destination 0: X has no index); the denial, replayed to J from the
    host's address while J's own connection request is on its way, neither refuses J's connection nor
    ends its join, and is counted.  From 5.7 a denial names the station it refuses (spec §5.3, as
    NintendoClients fills it); up to 5.6 it names no one, and its destination timer (which the HMAC
    covers, §1.5) estimates X's clock: no answer to a request J sent a moment ago."""
    h = BatchHarness(3, version=version, network=network)
    host, x, j = h.sessions
    host.create(h.now)
    captured = _capture_join(h, host, x, deny=True)
    assert captured
    h.run_for(3.0)
    j.join(host.local_address, h.now)
    h.run_for(0.0005)  # J's request is on its way
    assert not _connected_to(j, host)
    before = sum(j.drops.values())
    for data in captured:
        j.receive_datagram(data, host.local_address, h.now)
    assert h.run_until(lambda: j.closed or all_connected([host, j]), 30.0)
    assert not j.closed and j.failure is None
    assert sum(j.drops.values()) > before


def _first_contacts_from(h: MeshHarness, target: MeshSession, ip: str, count: int) -> None:
    """A key holder's churn: *count* fresh connection requests to *target*, each from another port of
    *ip* and each ended at once by a disconnection request (so the provisional peers never pile up)."""
    cfg = NodeConfig(version=target.config.profile.name, network=target.config.network.value,
                     session_key=target.config.session_key, bind=(ip, 40000), seed=40000)
    m = MeshSession(cfg, (ip, 40000), now=h.now)
    m.join(target.local_address, h.now)
    for port in range(40000, 40000 + count):
        if port > 40000:
            m.links.peers.pop(target.local_address)
            m.handshake.connect(target.local_address, h.now)
        for data, _ in m.datagrams_to_send(h.now):
            target.receive_datagram(data, (ip, port), h.now)
        assert (ip, port) in target.peers
        peer = m.links.peers[target.local_address]
        m.outbox.enqueue(peer, Proto.STATION, 0, wire.encode_disconnect(session6.session_profile(m.profile), False))
        for data, _ in m.datagrams_to_send(h.now):
            target.receive_datagram(data, (ip, port), h.now)
        assert (ip, port) not in target.peers
        target.datagrams_to_send(h.now)  # (what it answers goes nowhere)


@pytest.mark.parametrize("version", ["5.6", "5.18", "5.29"])
def test_one_ips_first_contacts_do_not_push_out_anothers(version: str) -> None:
    """V's connection request reached the host once.  A key holder then makes more first contacts from
    its own IP than the host remembers; V's request, replayed from another port of V's IP (the nonce
    binds the IP, not the port), is still refused: it opens no provisional peer."""
    h = BatchHarness(3, version=version)
    host, victim, churner = h.sessions
    request = _first_request(h, host, victim)
    host.receive_datagram(request, victim.local_address, h.now)
    victim_ip = victim.local_address[0]
    _first_contacts_from(h, host, churner.local_address[0], 4200)
    before = host.drops["replayed"]
    host.receive_datagram(request, (victim_ip, 20001), h.now)
    assert (victim_ip, 20001) not in host.peers
    assert host.drops["replayed"] == before + 1
