"""PRUDP against reflection: a datagram packing many copies of one captured packet, sent as if from the client.

Sans-IO over the deterministic link of prudp_harness; the attacker writes datagrams straight into the host's
``receive_datagram`` with the client's address (a spoofed source).
"""

from __future__ import annotations

import attrs
import pytest
from prudp_harness import CLIENT, HOST, Net, make_settings

from pianode.prudp import Connected, EndpointCore
from protocols.prudp import Flag, PacketType


def _captured(variant: str, kind: PacketType) -> tuple[Net, EndpointCore, bytes]:
    net = Net()
    host = net.add(HOST, EndpointCore(make_settings(variant, host=True, ping_interval=1.0)))
    client = net.add(CLIENT, EndpointCore(make_settings(variant, host=False, ping_interval=1.0)))
    host.listen()
    cid = client.connect(HOST, net.now)
    net.run_until(lambda: any(isinstance(e, Connected) for e in net.events[CLIENT]), max_time=30)
    client.send(cid, b"x" * 100, net.now)
    for _ in range(50):
        net.step()
    sent = [d for _, src, d in net.sent if src == CLIENT
            and any(p.type == kind and not p.flags & Flag.ACK for p in client.codec.decode(d))]  # fmt: skip
    return net, host, sent[0]


@pytest.mark.parametrize(("variant", "kind"), [("nintendo-v1", PacketType.PING), ("nintendo-v1", PacketType.DATA),
                                               ("nintendo-v0", PacketType.DATA), ("quazal-v0", PacketType.DATA)])
def test_copies_of_one_packet_in_a_datagram_are_acked_once(variant: str, kind: PacketType) -> None:
    """Several packets may share a datagram (spec §2.1, §2.3), and every NEED_ACK packet is acked, copies too
    (§6.1).  A datagram of 60 KB holding one captured packet again and again: before, the host acked each copy,
    one datagram per ack (a v1 PING: 2000 acks, twice the bytes on the wire, toward whoever the source names);
    now a copy of a packet already in the same datagram is dropped (``dropped_repeated_in_datagram``), so the
    datagram is acked once and the connection goes on."""
    net, host, packet = _captured(variant, kind)
    host.datagrams_to_send(net.now)
    copies = 60000 // len(packet)
    host.receive_datagram(packet * copies, CLIENT, net.now)
    out = host.datagrams_to_send(net.now)
    assert len(out) <= 1
    assert host.statistics()["dropped_repeated_in_datagram"] == copies - 1
    assert [c.state.value for c in host.connections.values()] == ["connected"]


@pytest.mark.parametrize("variant", ["nintendo-v1", "quazal-v0", "rendezvous"])
def test_a_datagram_of_many_different_syns_is_answered_once(variant: str) -> None:
    """A SYN needs no capture (it is signed with the access key alone, spec §2.5, §2.6) and is answered without
    state.  A spoofed datagram packing a thousand SYNs, each with another sequence id, was answered a thousand
    times (a thousand SYN+ACK datagrams toward the victim for one); a client sends one SYN per datagram, so now
    the first is answered and the rest are dropped (``dropped_repeated_in_datagram``)."""
    host = EndpointCore(make_settings(variant, host=True))
    client = EndpointCore(make_settings(variant, host=False))
    host.listen()
    client.connect(HOST, 0.0)
    (syn_datagram, _), = client.datagrams_to_send(0.0)
    (syn,) = client.codec.decode(syn_datagram)
    conn = next(iter(client.connections.values()))

    syns = [client.codec.encode(conn._sign(attrs.evolve(syn, sequence_id=n, flags=syn.flags | Flag.HAS_SIZE),
                                           peer=False)) for n in range(1000)]  # fmt: skip
    datagram = b"".join(syns)[:60000]
    host.receive_datagram(datagram, CLIENT, 0.0)
    out = host.datagrams_to_send(0.0)
    assert len(out) == 1
    assert host.statistics()["dropped_repeated_in_datagram"] == len(client.codec.decode(datagram)) - 1


def test_packets_sharing_a_header_but_not_their_payload_are_both_taken() -> None:
    """New-format aggregate acks all carry sequence id 0 on header substream 1 (spec §6.4): the substream they ack
    is in the payload.  Two of them in one datagram (one per substream) are not copies of each other; both count."""
    net = Net()
    kw = {"max_substream": 1, "minor_version": 2}
    host = net.add(HOST, EndpointCore(make_settings("nintendo-v1", host=True, **kw)))
    client = net.add(CLIENT, EndpointCore(make_settings("nintendo-v1", host=False, **kw)))
    host.listen()
    cid = client.connect(HOST, net.now)
    net.run_until(lambda: any(isinstance(e, Connected) for e in net.events[CLIENT]), max_time=30)
    net.link.down = True
    client.send(cid, b"zero", net.now, 0)
    client.send(cid, b"one", net.now, 1)
    client.datagrams_to_send(net.now)
    c = client.connections[cid]
    assert len(c._inflight) == 2
    h = next(iter(host.connections.values()))
    acks = []
    for sub in (0, 1):
        base = (c._next_seq[sub] - 1) & 0xFFFF  # everything sent on the substream
        p = h._packet(PacketType.DATA, Flag.MULTI_ACK | Flag.HAS_SIZE, substream_id=1, sequence_id=0, fragment_id=0,
                      payload=bytes([sub, 0]) + base.to_bytes(2, "little"))  # fmt: skip
        acks.append(h.codec.encode(h._sign(p)))
    client.receive_datagram(b"".join(acks), HOST, net.now)
    assert not c._inflight
