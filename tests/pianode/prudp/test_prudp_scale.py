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
