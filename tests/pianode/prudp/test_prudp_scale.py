"""The PRUDP endpoint's work per datagram does not grow with the connections it holds.

A host with many connections (from many sources) gets a flood of junk from anyone: before, every datagram made the
driver look at every connection three times (their timers twice, their output once), so a few hundred junk
datagrams a second took a whole core once a thousand clients were connected.  Now the endpoint looks only at the
connections something happened to, and keeps their timers in a heap.
"""

from __future__ import annotations

import pytest
from prudp_harness import HOST, Net, make_settings

from pianode.prudp import EndpointCore, MessageReceived
from pianode.prudp.connection import Connection


def _host_with_connections(n_sources: int, per_source: int) -> tuple[Net, EndpointCore, list[EndpointCore]]:
    net = Net()
    host = net.add(HOST, EndpointCore(make_settings("nintendo-v1", host=True)))
    host.listen()
    clients = []
    for i in range(n_sources):
        c = net.add((f"127.0.1.{i + 2}", 6000), EndpointCore(make_settings("nintendo-v1", host=False)))
        for _ in range(per_source):
            c.connect(HOST, net.now)
        clients.append(c)
    net.run_until(lambda: len(host.connections) == n_sources * per_source, max_time=30)
    return net, host, clients


def test_a_junk_datagram_costs_the_same_whatever_the_connections_held(monkeypatch: pytest.MonkeyPatch) -> None:
    net, host, _ = _host_with_connections(20, 10)
    host.datagrams_to_send(net.now)
    calls = {"get_timer": 0, "datagrams_to_send": 0, "handle_timer": 0}
    for name in calls:
        original = getattr(Connection, name)

        def counted(self: Connection, *a: object, _name: str = name, _original: object = original) -> object:
            calls[_name] += 1
            return _original(self, *a)  # type: ignore[operator]

        monkeypatch.setattr(Connection, name, counted)
    for k in range(100):  # what the Trio driver does per datagram (pianode.prudp.endpoint.PrudpEndpoint._loop)
        host.datagrams_to_send(net.now)
        host.get_timer()
        host.receive_datagram(b"junk %d" % k, ("127.0.9.9", 4000 + k), net.now)
        host.get_timer()
    assert calls == {"get_timer": 0, "datagrams_to_send": 0, "handle_timer": 0}


def test_timers_and_output_of_many_connections_still_run() -> None:
    """The heap of timers drives every connection as the full scan did: pings keep 200 idle connections alive for a
    minute, data on one of them is echoed back, and connections whose peer vanished end by keep-alive."""
    net, host, clients = _host_with_connections(20, 10)
    net.run_until(lambda: False if net.now < 60 else True, max_time=61)
    assert len(host.connections) == 200 and all(c.state.value == "connected" for c in host.connections.values())
    assert host.statistics().get("pings_sent", 0) >= 200
    cid = next(iter(clients[3].connections))
    clients[3].send(cid, b"hello", net.now)
    net.run_until(lambda: any(isinstance(e, MessageReceived) and e.data == b"hello" for e in net.events[HOST]),
                  max_time=net.now + 5)  # fmt: skip
    for c in clients[:5]:
        del net.nodes[next(a for a, core in net.nodes.items() if core is c)]
    net.run_until(lambda: len(host.connections) == 150, max_time=net.now + 60)


def _insider_packets(client: EndpointCore, start_offset: int, count: int, size: int) -> list[bytes]:
    """Reliable DATA fragments (id 1, never a last one) of *size* bytes, *start_offset* ids past the next expected."""
    from protocols.prudp import Flag, PacketType

    out = []
    for conn in client.connections.values():
        start = conn._next_seq[0]
        for k in range(count):
            p = conn._packet(PacketType.DATA, Flag.RELIABLE | Flag.NEED_ACK | Flag.HAS_SIZE,
                             sequence_id=(start + start_offset + k) & 0xFFFF, substream_id=0, fragment_id=1,
                             payload=bytes(size))  # fmt: skip
            out.append(conn.codec.encode(conn._sign(p)))
    return out


def _buffered(host: EndpointCore) -> int:
    held = sum(len(q.payload) for c in host.connections.values() for sub in c._held for q in sub.values())
    return held + sum(len(f) for c in host.connections.values() for f in c._fragments)


@pytest.mark.parametrize("offset", [1, 0])
def test_what_every_connection_buffers_is_bounded_in_all(offset: int) -> None:
    """Each connection may hold max_held_bytes of early packets and a partial message of up to max_message_size;
    a thousand connections (from 64 addresses) could so make a host hold gigabytes.  Now the endpoint bounds what
    all its connections buffer together (``max_buffered_bytes``): an early packet past it is dropped unacked
    (``dropped_hold_full``, sent again later), a partial message past it ends its connection; the bytes held stay
    within the bound and a connection that buffers nothing still delivers."""
    limit = 256 << 10
    net = Net()
    host = net.add(HOST, EndpointCore(make_settings("nintendo-v1", host=True, max_buffered_bytes=limit)))
    host.listen()
    clients = []
    for i in range(8):
        c = net.add((f"127.0.1.{i + 2}", 6000), EndpointCore(make_settings("nintendo-v1", host=False)))
        c.connect(HOST, net.now)
        clients.append(c)
    net.run_until(lambda: len(host.connections) == 8, max_time=30)
    for c in clients[:7]:
        addr = next(a for a, core in net.nodes.items() if core is c)
        for d in _insider_packets(c, offset, 10, 30000):  # 300 KB each, 2.1 MB in all
            host.receive_datagram(d, addr, net.now)
            assert _buffered(host) <= limit
    stats = host.statistics()
    assert stats.get("dropped_hold_full", 0) if offset else stats.get("aborted: buffer bound", 0)
    last = clients[7]
    cid = next(iter(last.connections))
    last.send(cid, b"still here", net.now)
    net.run_until(lambda: any(isinstance(e, MessageReceived) and e.data == b"still here" for e in net.events[HOST]),
                  max_time=net.now + 10)  # fmt: skip
