"""PRUDP against forged and replayed packets: none takes over, splits or stops a connection, memory stays bounded.

Sans-IO over the deterministic link of prudp_harness.  The attacker writes datagrams straight into an
endpoint's ``receive_datagram`` with the source address it claims (what a spoofed or replayed datagram does).
"""

from __future__ import annotations

import struct

import attrs
import pytest
from prudp_harness import CLIENT, HOST, VARIANTS, Net, make_settings as _settings

from pianode.prudp import (
    Connected,
    Disconnected,
    EndpointCore,
    MessageReceived,
)
from pianode.prudp.connection import State
from protocols.prudp import Flag, PacketType



def _echo_pair(variant: str, **kw: object) -> tuple[Net, EndpointCore, EndpointCore]:
    net = Net()
    host = net.add(HOST, EndpointCore(_settings(variant, host=True, **kw)))
    client = net.add(CLIENT, EndpointCore(_settings(variant, host=False, **kw)))
    host.listen()

    def on_event(addr: tuple[str, int], e: object) -> None:
        live = host.connections.get(e.connection) if isinstance(e, MessageReceived) else None
        if addr == HOST and live is not None and live.state == State.CONNECTED:
            host.send(e.connection, e.data, net.now, e.substream)  # type: ignore[union-attr]

    net.on_event = on_event
    return net, host, client


def _connect(net: Net, client: EndpointCore, at: tuple[str, int] = CLIENT) -> object:
    before = sum(isinstance(e, Connected) for e in net.events[at])
    cid = client.connect(HOST, net.now)
    net.run_until(lambda: sum(isinstance(e, Connected) for e in net.events[at]) > before, max_time=net.now + 30)
    return cid


def _echoed(net: Net, client: EndpointCore, cid: object, data: bytes) -> None:
    client.send(cid, data, net.now)  # type: ignore[arg-type]
    net.run_until(lambda: data in [e.data for e in net.events[CLIENT] if isinstance(e, MessageReceived)],
                  max_time=net.now + 30)  # fmt: skip


def _connects_sent(net: Net, client: EndpointCore, since: int = 0) -> list[bytes]:
    return [d for _, src, d in net.sent[since:] if src == CLIENT
            and any(p.type == PacketType.CONNECT and not p.flags & Flag.ACK for p in client.codec.decode(d))]  # fmt: skip


def _host_events(net: Net, kind: type) -> list[object]:
    return [e for e in net.events[HOST] if isinstance(e, kind)]


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_forged_connect_from_the_clients_address_leaves_its_connection_alone(variant: str) -> None:
    """A CONNECT naming another client signature and session, from the client's own address and port, whose
    signature does not verify: before, the host ended the live connection first and then refused the CONNECT."""
    net, host, client = _echo_pair(variant)
    cid = _connect(net, client)
    (connect,) = [p for p in client.codec.decode(_connects_sent(net, client)[0])]
    size = len(connect.connection_signature or b"")
    forged = attrs.evolve(connect, signature=bytes(len(connect.signature)), connection_signature=b"\x5a" * size,
                          session_id=connect.session_id ^ 0xFF)  # fmt: skip
    live = next(iter(host.connections.values()))
    host.receive_datagram(client.codec.encode(forged), CLIENT, net.now)
    net.step()
    assert _host_events(net, Disconnected) == [] and list(host.connections.values()) == [live]
    assert live.state == State.CONNECTED
    assert host.statistics().get("refused_connect", 0) == 1
    _echoed(net, client, cid, b"still here")


@pytest.mark.parametrize("variant", VARIANTS)
def test_a_connect_replayed_from_an_earlier_connection_neither_takes_over_nor_comes_back(variant: str) -> None:
    """The CONNECT of a client's first connection, captured and replayed from its address: while the client's
    next connection (a restart on the same port) is live, it must not supersede it; once that one is closed, it must
    not open a connection nobody asked for.  Before, the host's signature depended only on the address and ports, so
    the old CONNECT verified again and took the port over."""
    net, host, client = _echo_pair(variant)
    _connect(net, client)
    first_connect = _connects_sent(net, client)[0]
    mark = len(net.sent)
    net.nodes[CLIENT] = client2 = EndpointCore(_settings(variant, host=False))  # the client restarts on its port
    cid2 = _connect(net, client2)
    assert len(_host_events(net, Disconnected)) == 1  # the restart superseded the first connection
    live = dict(host.connections)
    host.receive_datagram(first_connect, CLIENT, net.now)
    net.step()
    assert len(_host_events(net, Disconnected)) == 1 and host.connections.keys() == live.keys()
    assert next(iter(host.connections.values())) is next(iter(live.values()))
    _echoed(net, client2, cid2, b"mine")
    # the restart's own CONNECT, replayed later, is the live connection's: answered, nothing else
    host.receive_datagram(_connects_sent(net, client2, mark)[0], CLIENT, net.now)
    net.step()
    assert len(_host_events(net, Connected)) == 2
    client2.close(cid2, net.now)  # type: ignore[arg-type]
    net.run_until(lambda: len(_host_events(net, Disconnected)) == 2)
    for _ in range(20):
        net.step()
    for replay in (first_connect, _connects_sent(net, client2, mark)[0]):
        host.receive_datagram(replay, CLIENT, net.now)
        net.step()
    assert len(_host_events(net, Connected)) == 2 and not host.connections
    assert host.statistics().get("refused_connect", 0) >= 2


@pytest.mark.parametrize("variant", ["nintendo-v0", "nintendo-v1", "quazal-v0"])
def test_a_connect_replayed_long_after_its_connection_ended_opens_nothing(variant: str) -> None:
    """Even once the host has forgotten the connection, a CONNECT from minutes ago does not verify any more."""
    net, host, client = _echo_pair(variant)
    cid = _connect(net, client)
    first_connect = _connects_sent(net, client)[0]
    client.close(cid, net.now)  # type: ignore[arg-type]
    net.run_until(lambda: len(_host_events(net, Disconnected)) == 1)
    net.now += 600.0
    host.receive_datagram(first_connect, CLIENT, net.now)
    net.step()
    assert len(_host_events(net, Connected)) == 1 and not host.connections
    # and a fresh connection from the same port still works
    _connect(net, client)
    _echoed(net, client, next(iter(client.connections)), b"again")


def test_an_aggregate_ack_beyond_what_was_sent_clears_nothing() -> None:
    """An aggregate ack naming a base the client never sent: before, every reliable packet in flight counted as
    acked (serial "seq <= base"), so the message was never retransmitted and never arrived."""
    net, host, client = _echo_pair("nintendo-v1", max_transmissions=10)
    cid = _connect(net, client)
    net.link.down = True
    client.send(cid, b"x" * 3000, net.now)  # type: ignore[arg-type]
    net.step()
    c = client.connections[cid]  # type: ignore[index]
    in_flight = len(c._inflight)
    assert in_flight >= 3
    h = next(iter(host.connections.values()))
    base = (c._next_seq[0] + 200) & 0xFFFF
    ack = h._packet(PacketType.DATA, Flag.MULTI_ACK | Flag.HAS_SIZE, substream_id=0, sequence_id=base, fragment_id=0)
    client.receive_datagram(h.codec.encode(h._sign(ack)), HOST, net.now)
    new = h._packet(PacketType.DATA, Flag.MULTI_ACK | Flag.HAS_SIZE, substream_id=1, sequence_id=0, fragment_id=0,
                    payload=struct.pack("<BBH", 0, 0, base))  # fmt: skip
    client.receive_datagram(h.codec.encode(h._sign(new)), HOST, net.now)
    assert len(c._inflight) == in_flight
    assert client.statistics().get("dropped_bad_aggregate_ack", 0) == 2
    net.link.down = False
    net.run_until(lambda: [e.data for e in net.events[CLIENT] if isinstance(e, MessageReceived)] == [b"x" * 3000])


@pytest.mark.parametrize("variant", ["nintendo-v0", "nintendo-v1", "quazal-v0"])
def test_a_window_of_large_early_packets_is_held_within_a_byte_bound(variant: str) -> None:
    """255 early DATA packets of 60 000 bytes each (the whole receive window, ~15 MB): before, the host held them
    all; now it holds at most max_held_bytes, drops the rest unacked (counted) and the connection goes on."""
    net, host, client = _echo_pair(variant, max_held_bytes=1 << 20)
    cid = _connect(net, client)
    c = client.connections[cid]  # type: ignore[index]
    h = next(iter(host.connections.values()))
    start = c._next_seq[0]
    for k in range(1, 256):
        p = c._packet(PacketType.DATA, Flag.RELIABLE | Flag.NEED_ACK | Flag.HAS_SIZE,
                      sequence_id=(start + k) & 0xFFFF, substream_id=0, fragment_id=1, payload=bytes(60000))  # fmt: skip
        host.receive_datagram(c.codec.encode(c._sign(p)), CLIENT, net.now)
    held = sum(len(q.payload) for sub in h._held for q in sub.values())
    assert held <= (1 << 20)
    assert host.statistics().get("dropped_hold_full", 0) >= 200
    assert h.state == State.CONNECTED


def test_connections_from_many_addresses_are_capped_in_all() -> None:
    """Handshakes from 12 source IPs against a host that keeps 5 connections: 5 connect, the rest are refused."""
    net = Net()
    host = net.add(HOST, EndpointCore(_settings("nintendo-v1", host=True, max_connections=5)))
    host.listen()
    for i in range(12):
        addr = (f"127.0.1.{i + 1}", 6000)
        c = net.add(addr, EndpointCore(_settings("nintendo-v1", host=False)))
        c.connect(HOST, net.now)
    for _ in range(2000):
        if not net.step() or net.now > 20:
            break
    assert len(host.connections) == 5
    assert host.statistics()["refused: the host holds max_connections connections"] >= 7


def _disconnects(net: Net, core: EndpointCore, src: tuple[str, int]) -> list[bytes]:
    return [d for _, s, d in net.sent if s == src
            and any(p.type == PacketType.DISCONNECT and not p.flags & Flag.ACK for p in core.codec.decode(d))]  # fmt: skip


@pytest.mark.parametrize("variant", ["nintendo-v0", "nintendo-v0-friends", "nintendo-v1"])
@pytest.mark.parametrize("closer", ["client", "host"])
def test_a_disconnect_replayed_after_a_reconnect_does_not_end_the_new_connection(variant: str, closer: str) -> None:
    """The DISCONNECT that ended a connection, replayed into the next connection on the same ports.  v0 signs a
    DISCONNECT without anything of its connection (spec §2.5), so only the session id tells them apart: before,
    an endpoint could draw the same session id again (here its random source repeats itself, as 1 in 256 draws
    do), and the old DISCONNECT ended the new connection.  Now each side takes another session id than its last
    connection's on those ports, and the replay is dropped as another session's."""

    def same(n: int) -> bytes:  # a random source that repeats itself
        return bytes([0x42]) * n

    net = Net()
    host = net.add(HOST, EndpointCore(_settings(variant, host=True), random_bytes=same))
    client = net.add(CLIENT, EndpointCore(_settings(variant, host=False), random_bytes=same))
    host.listen()
    cid = _connect(net, client)
    if closer == "client":
        client.close(cid, net.now)  # type: ignore[arg-type]
    else:
        host.close(next(iter(host.connections)), net.now)
    net.run_until(lambda: not host.connections and not client.connections)
    old = _disconnects(net, client if closer == "client" else host, CLIENT if closer == "client" else HOST)[0]
    cid2 = _connect(net, client)
    target, source = (host, CLIENT) if closer == "client" else (client, HOST)
    target.receive_datagram(old, source, net.now)
    for _ in range(20):
        net.step()
    assert len(host.connections) == 1 and client.connections[cid2].state == State.CONNECTED  # type: ignore[index]
    stats = target.statistics()
    assert stats.get("dropped_bad_session", 0) + stats.get("dropped_bad_signature", 0) >= 1
    client.send(cid2, b"after the replay", net.now)  # type: ignore[arg-type]
    net.run_until(lambda: b"after the replay" in [e.data for e in net.events[HOST] if isinstance(e, MessageReceived)])


def test_packets_from_another_port_of_the_clients_ip_touch_nothing() -> None:
    """Every packet of a connection (its DISCONNECT too), sent again from another port of the client's IP: none
    reaches the connection (its id holds the port), each is counted, and the SYN leaves no state behind."""
    net, host, client = _echo_pair("nintendo-v0")
    cid = _connect(net, client)
    _echoed(net, client, cid, b"data")
    live = next(iter(host.connections.values()))
    net.link.down = True  # the client's DISCONNECT goes nowhere but into the capture
    client.close(cid, net.now)  # type: ignore[arg-type]
    net.step()
    sent = [d for _, src, d in net.sent if src == CLIENT]
    before = host.statistics()
    for data in sent:
        host.receive_datagram(data, ("127.0.0.2", 6001), net.now)
    assert list(host.connections.values()) == [live] and live.state == State.CONNECTED
    after = host.statistics()
    counted = sum(after.get(k, 0) - before.get(k, 0) for k in ("dropped_no_connection", "refused_connect", "syn_answered"))
    assert counted == len(sent)


def test_a_flood_of_refused_connects_keeps_the_statistics_small() -> None:
    """CONNECTs that verify but carry key exchanges of every length: each is refused and counted, and the
    statistics name the reason once, not once per length (before: one counter per length, without bound)."""
    net = Net()
    host = net.add(HOST, EndpointCore(_settings("rendezvous", host=True)))
    host.listen()
    attacker = ("127.0.0.9", 7000)
    client = EndpointCore(_settings("rendezvous", host=False))
    cid = client.connect(HOST, 0.0)
    (syn_data,) = [d for d, _ in client.datagrams_to_send(0.0)]
    host.receive_datagram(syn_data, attacker, 0.0)
    ((syn_ack, _),) = host.datagrams_to_send(0.0)
    client.receive_datagram(syn_ack, HOST, 0.0)
    ((connect_data, _),) = client.datagrams_to_send(0.0)
    (connect,) = client.codec.decode(connect_data)
    conn = client.connections[cid]
    for n in range(0, 300, 3):
        forged = conn._sign(attrs.evolve(connect, payload=bytes(n)))
        host.receive_datagram(client.codec.encode(forged), attacker, 0.0)
    stats = host.statistics()
    assert stats["refused_connect"] == 100 and not host.connections
    assert len([k for k in stats if k.startswith("refused: ")]) <= 3, sorted(stats)


@pytest.mark.parametrize("variant", ["nintendo-v0", "nintendo-v1", "quazal-v0"])
def test_replayed_packets_do_not_keep_a_vanished_peers_connection_alive(variant: str) -> None:
    """The client vanishes; someone replays what it sent (data, acks, pings) to the host, one packet every 0.3 s.
    Before, any packet that verified counted as a sign of life, so the connection never ended; now only new ones
    do (a new sequence id, an ack of something in flight or of our last ping), and keep-alive ends it."""
    net, host, client = _echo_pair(variant, ping_interval=1.0)
    cid = _connect(net, client)
    for n in range(3):
        _echoed(net, client, cid, bytes([n]) * 10)
    for _ in range(40):  # pings both ways
        net.step()
    captured = [d for _, src, d in net.sent if src == CLIENT][3:]
    del net.nodes[CLIENT]  # the client is gone: nothing reaches it, it sends nothing
    start = net.now
    k = 0
    while net.now < start + 30 and host.connections:
        host.receive_datagram(captured[k % len(captured)], CLIENT, net.now)
        k += 1
        net.now += 0.3
        host.handle_timer(net.now)
        host.datagrams_to_send(net.now)
        net._flush()
    reasons = [e.reason for e in net.events[HOST] if isinstance(e, Disconnected)]
    assert reasons and ("keep-alive" in reasons[0] or "timeout" in reasons[0]), (reasons, net.now - start)


@pytest.mark.parametrize("variant", ["nintendo-v1", "rendezvous"])
def test_a_replayed_connect_is_answered_a_few_times_not_once_per_copy(variant: str) -> None:
    """The client's own CONNECT replayed 100 times (as if from the client): the host answers a lost CONNECT+ACK
    again, as many times as a client retransmits, not once per copy (a CONNECT+ACK is larger than the CONNECT:
    before, the replays reflected twice their bytes toward the client)."""
    net, host, client = _echo_pair(variant)
    _connect(net, client)
    connect = _connects_sent(net, client)[0]
    answers = 0
    for _ in range(100):
        host.receive_datagram(connect, CLIENT, net.now)
        answers += len(host.datagrams_to_send(net.now))
    assert answers <= host.settings.transmissions + 1
    assert host.statistics()["connect_ack_not_repeated"] >= 100 - answers


def test_a_client_restarting_while_its_old_connection_is_being_removed_still_connects() -> None:
    """The old connection has just closed (not yet removed from the table) when the restarted client's SYN comes:
    the cookie it gets must still verify once the old connection is gone."""
    net, host, client = _echo_pair("nintendo-v1")
    _connect(net, client)
    live = next(iter(host.connections.values()))
    host.abort(live.id, net.now)  # closed, still in the table until the host next sends
    client2 = EndpointCore(_settings("nintendo-v1", host=False))
    cid2 = client2.connect(HOST, net.now)
    (syn,) = [d for d, _ in client2.datagrams_to_send(net.now)]
    host.receive_datagram(syn, CLIENT, net.now)
    answers = [d for d, to in host.datagrams_to_send(net.now) if to == CLIENT]
    assert not host.connections
    for d in answers:
        client2.receive_datagram(d, HOST, net.now)
    for d, _ in client2.datagrams_to_send(net.now):
        host.receive_datagram(d, CLIENT, net.now)
    for d, _ in host.datagrams_to_send(net.now):
        client2.receive_datagram(d, HOST, net.now)
    assert client2.connections[cid2].state == State.CONNECTED and len(host.connections) == 1


@pytest.mark.parametrize("variant", ["nintendo-v0", "nintendo-v1", "quazal-v0"])
def test_handshake_packets_replayed_into_a_connection_are_dropped_and_counted(variant: str) -> None:
    """The host's SYN+ACK and CONNECT+ACK replayed, three times each, to a connected client: before, they
    vanished without a trace; now each counts as dropped_unexpected_handshake and the connection goes on."""
    net, host, client = _echo_pair(variant)
    cid = _connect(net, client)
    from_host = [d for _, src, d in net.sent if src == HOST
                 and any(p.type in (PacketType.SYN, PacketType.CONNECT) for p in host.codec.decode(d))]  # fmt: skip
    assert len(from_host) >= 2
    for d in from_host * 3:
        client.receive_datagram(d, HOST, net.now)
    assert client.statistics().get("dropped_unexpected_handshake", 0) == 3 * len(from_host)
    _echoed(net, client, cid, b"unmoved")


def test_a_connect_retransmitted_for_as_long_as_the_quazal_profile_retries_still_connects() -> None:
    """Quazal retransmits a CONNECT for about 130 s (20 sends): one that arrives only near the end still
    verifies (the cookie lives as long as the retransmission), while the same CONNECT far later does not."""
    net, host, client = _echo_pair("quazal-v0")
    client.connect(HOST, net.now)
    lost: list[bytes] = []

    def drop_connects(d: bytes, s: object, t: object) -> bytes | None:
        if s == CLIENT and any(p.type == PacketType.CONNECT for p in client.codec.decode(d)):
            lost.append(d)
            return None
        return d

    net.hook = drop_connects
    net.run_until(lambda: len(lost) >= 1, max_time=10)
    net.hook = None
    net.now += 120.0
    host.receive_datagram(lost[0], CLIENT, net.now)
    net.step()
    assert len(host.connections) == 1
