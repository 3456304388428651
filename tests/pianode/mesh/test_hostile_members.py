"""A malicious member of a 5.7-5.45 or 6.32+ mesh, sans-IO: it holds the session key and sends from its
own address messages meant to change what the others believe about the mesh or about other links.

Each test forms a mesh in the in-memory harness, has the member send what it forges through its own
link (its own session and key), and asserts what the others keep: their RTT estimates, a joiner's join.
"""

from __future__ import annotations

import pytest
from mesh_harness import BatchHarness, all_connected, form

from pianode.mesh import legacy, wire
from pianode.mesh.session import MeshSession
from protocols.pia.versions import Proto

VERSIONS = [("5.18", "lan"), ("5.29", "lan"), ("5.45", "lan"), ("6.32", "ldn"), ("6.41", "ldn")]


def _send_rtt(rogue: MeshSession, to: MeshSession, *, response: bool, ticks: int) -> None:
    link = rogue.links.peers[to.local_address]
    rogue.enqueue(link, Proto.RTT, legacy.rtt_port(rogue.profile), wire.encode_rtt(rogue.profile, response, ticks))


@pytest.mark.parametrize(("version", "network"), VERSIONS)
def test_rtt_answers_to_no_request_do_not_skew_the_rtt(version: str, network: str) -> None:
    """A member answers RTT requests the host never sent (spec §5.6: a response echoes the requester's
    time): one claiming the host asked at its start (a round trip of the whole session), one claiming it
    asked this instant (no round trip at all).  The host's estimate of the member stays what real probes
    gave, and each forged answer is counted as a drop."""
    h = BatchHarness(3, version=version, network=network)
    host, rogue, _ = form(h)
    h.run_for(20.0)  # real probes give real samples
    estimate = host.links.peers[rogue.local_address].rtt
    samples, smoothed, minimum = estimate.samples, estimate.smoothed, estimate.minimum
    assert samples and smoothed is not None and smoothed < 0.1 and minimum is not None
    before = host.drops["unexpected"]
    for i in range(8):
        _send_rtt(rogue, host, response=True, ticks=i)  # "asked" 0-7 us after the host started
        _send_rtt(rogue, host, response=True, ticks=host.rtt_ticks(h.now) - i)  # "asked" just now
    h._send_all()
    h.run_for(0.05)
    assert estimate.smoothed is not None and estimate.smoothed < 0.1 and estimate.minimum == minimum
    assert host.drops["unexpected"] - before == 16
    h.run_for(20.0)  # and the real probes go on
    assert estimate.samples > samples and estimate.smoothed is not None and estimate.smoothed < 0.1


@pytest.mark.parametrize(("version", "network"), VERSIONS)
def test_a_real_rtt_answer_counts_once(version: str, network: str) -> None:
    """A member that answers the host's request twice (the second a copy with the request's time)
    gives one sample: the request is answered, the copy is dropped."""
    h = BatchHarness(2, version=version, network=network)
    host, member = form(h)
    asked: list[int] = []
    real = member.links.on_rtt

    def on_rtt(peer, payload, now):  # type: ignore[no-untyped-def]
        response, ticks = wire.decode_rtt(member.profile, payload)
        if not response and peer.address == host.local_address:
            asked.append(ticks)
        real(peer, payload, now)

    member.links.on_rtt = on_rtt  # type: ignore[method-assign]
    assert h.run_until(lambda: bool(asked), 20.0)
    member.links.on_rtt = real  # type: ignore[method-assign]
    h.run_for(0.5)
    before = host.drops["unexpected"]
    _send_rtt(member, host, response=True, ticks=asked[0])
    h._send_all()
    h.run_for(0.05)
    assert host.drops["unexpected"] - before == 1


@pytest.mark.parametrize(("version", "network"), VERSIONS)
def test_a_join_denial_from_a_member_does_not_end_a_join(version: str, network: str) -> None:
    """A member connects to a station that is joining through the host and tells it the join is denied
    (the mesh protocol's join denial, spec §5.4): only the host the station asked answers its join, so
    the station joins all the same and the denial is counted as not the host's."""
    h = BatchHarness(3, version=version, network=network)
    host, rogue, joiner = h.sessions
    form(h, [0, 1])
    blocked = {"on": True}

    def hook(data: bytes, s: tuple[str, int], d: tuple[str, int]) -> bytes | None:
        # The joiner's first requests to the host are lost, so the member's denial comes first.
        return None if blocked["on"] and s == joiner.local_address and d == host.local_address else data

    h.hook = hook
    joiner.join(host.local_address, h.now)
    rogue.handshake.connect(joiner.local_address, h.now)
    assert h.run_until(lambda: rogue.links.peers.get(joiner.local_address) is not None
                       and rogue.links.peers[joiner.local_address].connected, 5.0)
    rogue.enqueue(rogue.links.peers[joiner.local_address], Proto.MESH, 0, wire.encode_join_deny(rogue.membership.profile, wire.DENY_MESH_FULL))
    h._send_all()
    h.run_for(0.1)
    blocked["on"] = False
    h.hook = None
    assert h.run_until(lambda: all_connected([host, rogue, joiner]), 30.0), joiner.failure
    assert joiner.failure is None and joiner.drops["not_host"] >= 1
