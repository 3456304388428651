"""Abuse resistance (issue 6): a node under a flood of garbage and forged datagrams.

A three-station mesh runs on the simulated network (pianode.sim.netsim) under
``MockClock``.  While two members stream reliable messages to the host, 1,000
spoofed loopback sources (127.1.x.y) send it 100,000 hostile datagrams:

* garbage, and datagrams cut inside the Pia header → ``malformed``;
* well-formed headers with random tag and ciphertext, and genuine datagrams of a
  member replayed from another address (the LAN nonce holds the source
  address, so they no longer authenticate) → ``bad_tag``;
* packets sealed with the real session key by a non-member, claiming a
  member's connection and constant ids → ``not_member``;
* well-formed plaintext packets → ``unencrypted``.

The host must stay up, deliver every reliable message exactly once and in
order, count every hostile datagram under the reason it was built for, and
keep its Python heap bounded (tracemalloc).  Replays from a member's own
address (duplicates injected on its link) are refused as ``replayed``, and
connection requests from many unknown sources cannot grow the peer table past
its provisional limit.
"""

from __future__ import annotations

import gc
import random
import struct
import tracemalloc
from collections.abc import AsyncIterator

import attrs
import pytest
import trio
import trio.testing

from pianode.bench.codec import bench_header, bench_message
from pianode.mesh.config import NodeConfig
from pianode.mesh.events import DataReceived
from pianode.sim.faults import LinkFaults
from pianode.sim.netsim import SimulatedNetwork
from pianode.mesh.node import Node, open_node
from pianode.mesh.session import MAX_PROVISIONAL_PEERS, MeshSession
from protocols.pia.header import PacketHeader
from protocols.pia.message import Message
from protocols.pia.nonce import nonce_builder
from protocols.pia.packet import Packet, PacketCodec
from protocols.pia.versions import Proto, profile_for

VERSION = "5.18"
KEY = bytes.fromhex("0f1e2d3c4b5a69788796a5b4c3d2e1f0")
PORT = 49152
SOURCES = 1000
PER_SOURCE = 100  # 100,000 hostile datagrams in all
BURST = 250  # hostile datagrams between two checkpoints (well inside the host's socket buffer)
RELIABLE = 60  # reliable messages from each member during the flood
_SEQ = struct.Struct(">cI")


def _config(i: int) -> NodeConfig:
    return NodeConfig(version=VERSION, session_key=KEY, bind=(f"127.0.0.{i + 1}", PORT), seed=100 + i)


def _attacker_ip(i: int) -> str:
    return f"127.1.{i // 250}.{i % 250 + 1}"


@attrs.define
class Mesh:
    net: SimulatedNetwork
    host: Node
    members: list[Node]
    sent_by_b: list[bytes]


# pytest-trio hands a clock to trio.run only when the test itself names the
# fixture, so every test below takes autojump_clock as well as mesh.
@pytest.fixture
async def mesh(autojump_clock: trio.testing.MockClock) -> AsyncIterator[Mesh]:
    sent_by_b: list[bytes] = []

    def tap(data: bytes, src: tuple[str, int], dst: tuple[str, int], now: float) -> None:
        if dst == ("127.0.0.1", PORT) and len(sent_by_b) < 200:
            sent_by_b.append(data)

    async with SimulatedNetwork() as net:
        net.install()
        async with open_node(_config(0)) as a, open_node(_config(1), tap=tap) as b, open_node(_config(2)) as c:
            await a.create_mesh()
            with trio.fail_after(30):
                await b.join(a.address)
                await c.join(a.address)
                for node in (a, b, c):
                    assert await node.wait_connected(2, 20)
            yield Mesh(net, a, [b, c], sent_by_b)


def _hostile(mesh: Mesh, rng: random.Random) -> tuple[list[tuple[str, bytes]], dict[str, int]]:
    """(source IP, datagram) pairs, interleaved by source, and how many of each drop reason they should cause."""
    profile = profile_for(VERSION)
    sealing = PacketCodec(profile, KEY, nonce_builder(profile, "lan"))
    plain = PacketCodec(profile)
    victim = mesh.members[1].session
    assert victim is not None and mesh.host.station_index is not None
    claimed = mesh.host.session.peers[mesh.members[1].address]  # type: ignore[union-attr]
    data_type = profile.protocol_id(Proto.UNRELIABLE)
    expected = {"malformed": 0, "bad_tag": 0, "not_member": 0, "unencrypted": 0}
    per_source: list[list[tuple[str, bytes]]] = []
    for i in range(SOURCES):
        ip = _attacker_ip(i)
        out: list[bytes] = []
        for _ in range(40):  # garbage that does not start with the Pia magic
            out.append(bytes([rng.randrange(0x33, 256)]) + rng.randbytes(rng.randrange(0, 300)))
        for _ in range(10):  # cut inside the 32-byte H-C header
            out.append(bytes.fromhex("32ab9864") + rng.randbytes(rng.randrange(0, 28)))
        expected["malformed"] += 50
        for _ in range(20):  # forged tag and ciphertext
            header = PacketHeader(True, rng.randrange(1, 65536), rng.randrange(256), 4, nonce=rng.randbytes(8))
            out.append(_forged(profile, header, rng))
        for _ in range(10):  # a member's genuine datagram, replayed from elsewhere
            out.append(rng.choice(mesh.sent_by_b))
        expected["bad_tag"] += 30
        for k in range(10):  # sealed with the real key, claiming station C's identity
            message = Message(
                data_type, 0, b"claim" + bytes(20), profile.bitmap_flag, 1 << mesh.host.station_index,
                victim.constant_id,
            )  # fmt: skip
            header = PacketHeader(True, k + 1, claimed.peer_conn_id, nonce=rng.randbytes(8))
            out.append(sealing.encode(Packet(header, (message,)), ip))
        expected["not_member"] += 10
        for _ in range(10):  # well-formed but not encrypted
            message = bench_message(profile, rng.randbytes(16))
            out.append(plain.encode(Packet(attrs.evolve(bench_header(profile, bytes(8)), encrypted=False), (message,)), ip))
        expected["unencrypted"] += 10
        rng.shuffle(out)
        per_source.append([(ip, d) for d in out])
    interleaved = [per_source[i][k] for k in range(PER_SOURCE) for i in range(SOURCES)]
    assert len(interleaved) == SOURCES * PER_SOURCE == sum(expected.values())
    return interleaved, expected


def _forged(profile: object, header: PacketHeader, rng: random.Random) -> bytes:
    """A 5.18 (H-C) header with a random tag, then random whole blocks of 'ciphertext'."""
    from protocols.pia.header import encode_header

    tag = rng.randbytes(16)
    return encode_header(header, profile, tag=tag) + rng.randbytes(16 * rng.randrange(1, 20))  # type: ignore[arg-type]


async def _collect(node: Node, got: dict[int, list[int]]) -> None:
    async for event in node.events():
        if isinstance(event, DataReceived) and event.reliable and event.data[:1] == b"R":
            _, seq = _SEQ.unpack(event.data)
            got.setdefault(event.source_index, []).append(seq)


async def _stream(node: Node, target: int) -> None:
    for k in range(RELIABLE):
        await node.send(target, _SEQ.pack(b"R", k), reliable=True)
        await trio.sleep(0.02)


async def test_flood_of_garbage_and_forgeries_is_counted_and_harmless(mesh: Mesh, autojump_clock: trio.testing.MockClock) -> None:
    host = mesh.host
    assert host.station_index is not None
    hostile, expected = _hostile(mesh, random.Random(6))
    sockets = []
    for i in range(SOURCES):
        s = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
        await s.bind((_attacker_ip(i), 40000))
        sockets.append(s)
    by_ip = {_attacker_ip(i): s for i, s in enumerate(sockets)}
    before = dict(host.statistics()["drops"])  # type: ignore[call-overload]
    got: dict[int, list[int]] = {}

    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        with trio.fail_after(120):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_collect, host, got)
                async with trio.open_nursery() as traffic:
                    for member in mesh.members:
                        traffic.start_soon(_stream, member, host.station_index)
                    for start in range(0, len(hostile), BURST):
                        for ip, data in hostile[start : start + BURST]:
                            by_ip[ip].sendto_nowait(data, host.address)  # type: ignore[attr-defined]
                        await trio.sleep(0.003)
                with trio.move_on_after(10):
                    while sum(len(v) for v in got.values()) < RELIABLE * len(mesh.members):
                        await trio.sleep(0.05)
                gc.collect()
                current, peak = tracemalloc.get_traced_memory()
                nursery.cancel_scope.cancel()
    finally:
        tracemalloc.stop()
        for s in sockets:
            s.close()

    # The mesh's own reliable traffic arrived, exactly once and in order.
    member_indexes = sorted(m.station_index for m in mesh.members)  # type: ignore[type-var]
    assert sorted(got) == member_indexes
    for seqs in got.values():
        assert seqs == list(range(RELIABLE))
    assert all(s.state in ("self", "connected") for s in host.stations())
    # Every hostile datagram is counted once, under the reason it was built for.
    stats = host.statistics()
    after = stats["drops"]
    delta = {k: after.get(k, 0) - before.get(k, 0) for k in set(after) | set(before)}  # type: ignore[union-attr]
    assert {k: v for k, v in delta.items() if v} == expected
    assert len(host.session.peers) == 2  # type: ignore[union-attr]
    # Memory: the heap did not keep what the flood brought (per-source nonce caches are bounded).
    assert current - base < 1 << 20, f"heap grew by {(current - base) / 1024:.0f} KiB"
    assert peak - base < 4 << 20, f"heap peaked {(peak - base) / 1024:.0f} KiB above the start"


async def test_replays_from_a_member_address_are_refused(mesh: Mesh, autojump_clock: trio.testing.MockClock) -> None:
    host, b = mesh.host, mesh.members[0]
    assert host.station_index is not None
    # Duplicate half of B's datagrams on the B -> host link: same bytes from B's own address.
    mesh.net.set_link_faults("127.0.0.2", "127.0.0.1", LinkFaults(duplicate=0.5, seed=3))
    before = host.statistics()["drops"].get("replayed", 0)  # type: ignore[union-attr]
    got: dict[int, list[int]] = {}
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_collect, host, got)
            await _stream(b, host.station_index)
            with trio.move_on_after(10):
                while len(got.get(b.station_index, [])) < RELIABLE:  # type: ignore[arg-type]
                    await trio.sleep(0.05)
            nursery.cancel_scope.cancel()
    assert got[b.station_index] == list(range(RELIABLE))  # type: ignore[index]
    duplicated = mesh.net.statistics().duplicated
    replayed = host.statistics()["drops"].get("replayed", 0) - before  # type: ignore[union-attr]
    assert duplicated > 10
    assert replayed == duplicated


async def test_connection_requests_from_many_sources_stay_bounded(mesh: Mesh, autojump_clock: trio.testing.MockClock) -> None:
    host = mesh.host
    sources = 3 * MAX_PROVISIONAL_PEERS
    requests = []
    for i in range(sources):
        ip = _attacker_ip(i)
        joiner = MeshSession(NodeConfig(version=VERSION, session_key=KEY, bind=(ip, 40000)), (ip, 40000), now=trio.current_time())
        joiner.join(host.address, trio.current_time())
        (datagram, dst), *_ = joiner.datagrams_to_send(trio.current_time())
        assert dst == host.address
        requests.append((ip, datagram))
    before = host.statistics()["drops"].get("queue_full", 0)  # type: ignore[union-attr]
    sockets = []
    for ip, datagram in requests:
        s = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
        await s.bind((ip, 40000))
        sockets.append(s)
        s.sendto_nowait(datagram, host.address)  # type: ignore[attr-defined]
    await trio.sleep(0.1)
    peers = host.session.peers  # type: ignore[union-attr]
    assert len(peers) <= 2 + MAX_PROVISIONAL_PEERS
    assert host.statistics()["drops"].get("queue_full", 0) - before >= sources - MAX_PROVISIONAL_PEERS  # type: ignore[union-attr]
    # The provisional peers never finish the handshake and expire; the members stay.
    await trio.sleep(host.config.station_timeout + 5)
    assert len(host.session.peers) == 2  # type: ignore[union-attr]
    assert all(s.state in ("self", "connected") for s in host.stations())
    for s in sockets:
        s.close()
