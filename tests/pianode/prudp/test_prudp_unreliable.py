"""Unreliable PRUDP DATA against replays and malformed packets (spec ../shared/spec/prudp.md §6.2).

Sans-IO over the deterministic link of prudp_harness: the attacker (or a duplicating network) writes datagrams
straight into the host's ``receive_datagram`` with the client's address.
"""

from __future__ import annotations

import attrs
import pytest
from prudp_harness import CLIENT, HOST, VARIANTS, Net, make_settings

from pianode.prudp import Connected, EndpointCore, MessageReceived


def _pair(variant: str, **kw: object) -> tuple[Net, EndpointCore, EndpointCore, object]:
    net = Net()
    host = net.add(HOST, EndpointCore(make_settings(variant, host=True, **kw)))
    client = net.add(CLIENT, EndpointCore(make_settings(variant, host=False, **kw)))
    host.listen()
    cid = client.connect(HOST, net.now)
    net.run_until(lambda: any(isinstance(e, Connected) for e in net.events[HOST]), max_time=30)
    net.run_until(lambda: any(isinstance(e, Connected) for e in net.events[CLIENT]), max_time=30)
    return net, host, client, cid


def _unreliable(client: EndpointCore, cid: object, data: bytes, now: float) -> bytes:
    client.send_unreliable(cid, data, now)  # type: ignore[arg-type]
    out = [d for d, _ in client.datagrams_to_send(now)]
    assert len(out) == 1
    return out[0]


def _received(host: EndpointCore) -> list[bytes]:
    out = []
    while (e := host.next_event()) is not None:
        if isinstance(e, MessageReceived):
            out.append(e.data)
    return out


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_replayed_unreliable_packet_is_delivered_once(variant: str) -> None:
    """A captured unreliable DATA packet sent again (and again) verifies like the original: before, each copy was
    delivered to the application as a new message.  Now an id seen is dropped (``dropped_replayed``); reordered
    new ids are still delivered."""
    net, host, client, cid = _pair(variant)
    host.datagrams_to_send(net.now)
    _received(host)
    first = _unreliable(client, cid, b"one", net.now)
    second = _unreliable(client, cid, b"two", net.now)
    third = _unreliable(client, cid, b"three", net.now)
    for d in (second, first, third, first, second, third, first):  # reordered, then replayed
        host.receive_datagram(d, CLIENT, net.now)
    assert sorted(_received(host)) == [b"one", b"three", b"two"]
    assert host.statistics()["dropped_replayed"] == 4
    assert [c.state.value for c in host.connections.values()] == ["connected"]


@pytest.mark.parametrize("variant", ["nintendo-v0", "nintendo-v1", "quazal-v0"])
def test_an_unreliable_packet_far_older_than_the_newest_is_dropped(variant: str) -> None:
    """Beyond the replay window an old id cannot be told from a replay: it is dropped and counted, never delivered."""
    net, host, client, cid = _pair(variant)
    old = _unreliable(client, cid, b"old", net.now)
    for n in range(300):
        host.receive_datagram(_unreliable(client, cid, b"new %d" % n, net.now), CLIENT, net.now)
    _received(host)
    host.receive_datagram(old, CLIENT, net.now)
    assert _received(host) == []
    assert host.statistics()["dropped_replayed"] == 1


def _tamper(host: EndpointCore, client: EndpointCore, data: bytes, **fields: object) -> bytes:
    """*data* with some header fields changed and signed again as the client would (an insider's packet)."""
    (p,) = client.codec.decode(data)
    conn = next(iter(client.connections.values()))
    return client.codec.encode(conn._sign(attrs.evolve(p, **fields)))


@pytest.mark.parametrize("variant", ["nintendo-v0", "nintendo-v1", "quazal-v0"])
def test_a_fragmented_unreliable_packet_is_not_delivered(variant: str) -> None:
    """Unreliable DATA is one whole message: fragment id 0 (spec §6.2, NG refuses others).  A fragment 1 was
    delivered as if it were a message; now it is dropped and counted (``dropped_fragmented_unreliable``)."""
    net, host, client, cid = _pair(variant)
    bad = _tamper(host, client, _unreliable(client, cid, b"piece", net.now), fragment_id=1)
    host.receive_datagram(bad, CLIENT, net.now)
    assert _received(host) == []
    assert host.statistics()["dropped_fragmented_unreliable"] == 1


def test_an_unreliable_packet_on_a_substream_not_negotiated_is_dropped() -> None:
    """v1 negotiates how many substreams a connection has (spec §2.3): unreliable DATA on another one was
    delivered as that substream's message; now it is dropped as ``dropped_bad_substream``, as reliable DATA is."""
    net, host, client, cid = _pair("nintendo-v1")
    bad = _tamper(host, client, _unreliable(client, cid, b"elsewhere", net.now), substream_id=7)
    host.receive_datagram(bad, CLIENT, net.now)
    assert _received(host) == []
    assert host.statistics()["dropped_bad_substream"] == 1
