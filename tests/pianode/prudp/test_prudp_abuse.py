"""PRUDP under abuse: compressed data that inflates, a peer that never reads, many connections from one source."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from trio.testing._fake_net import FakeNet  # private: used only behind this file's fixture

from pianode.prudp import Settings
from pianode.prudp.endpoint import PrudpEndpoint
from protocols.prudp.codec import PacketCodec
from protocols.prudp.packet import Flag, PacketType

from prudp_echo import serve_echo

MIB = 1 << 20


@pytest.fixture
async def fake_net() -> FakeNet:
    net = FakeNet()
    net.enable()
    return net


def _held(host: PrudpEndpoint) -> int:
    """What the host holds for its connections: queued to send, and received but not read."""
    queued = sum(len(item.plain) for conn in host.core.connections.values() for q in conn._queues for item in q)
    unread = sum(handle.unread_bytes for handle in host._handles.values())
    return queued + unread


async def test_compressed_messages_echoed_to_a_peer_that_never_reads_stay_bounded(
    fake_net: FakeNet, autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    """64 messages of 1 MiB of zeros, about 2 KB each on the wire, sent to an echo host by a peer that never
    takes the echo (it acks the host's acks, never its data): the host holds a few MiB at most, not 64."""
    codec = PacketCodec("nintendo-v1", "12345678")

    def route(packet) -> None:  # type: ignore[no-untyped-def]
        if packet.source.port == 7000 and str(packet.source.ip) == "127.0.0.1":
            packets = codec.decode(packet.payload, verify=False)
            if any(p.type == PacketType.DATA and not p.flags & Flag.ACK for p in packets):
                return  # the echo never reaches the attacker, so it is never acked
        fake_net.deliver_packet(packet)

    fake_net.route_packet = route  # type: ignore[assignment]
    host = PrudpEndpoint(Settings("nintendo-v1", access_key="12345678", compression=True))
    attacker = PrudpEndpoint(Settings("nintendo-v1", access_key="12345678", compression=True, fragment_size=60000))
    addr = await nursery.start(host.run, ("127.0.0.1", 7000))
    await nursery.start(attacker.run, ("127.0.0.2", 7000))
    host.listen()
    nursery.start_soon(serve_echo, host, nursery)
    peak = 0
    with trio.move_on_after(120):
        conn = await attacker.connect(addr)
        for _ in range(64):
            try:
                await conn.send(bytes(MIB))
            except trio.ClosedResourceError:
                break
            await trio.sleep(0.05)
            peak = max(peak, _held(host))
        for _ in range(200):
            await trio.sleep(0.05)
            peak = max(peak, _held(host))
    assert peak <= 10 * MIB, f"host held {peak / MIB:.0f} MiB"


async def test_a_message_over_the_bound_ends_the_connection(
    fake_net: FakeNet, autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    host = PrudpEndpoint(Settings("nintendo-v1", access_key="12345678", compression=True, max_message_size=MIB))
    attacker = PrudpEndpoint(Settings("nintendo-v1", access_key="12345678", compression=True, fragment_size=60000, max_message_size=4 * MIB))
    addr = await nursery.start(host.run, ("127.0.0.1", 7000))
    await nursery.start(attacker.run, ("127.0.0.2", 7000))
    host.listen()
    accepted: list[object] = []

    async def accept() -> None:
        accepted.append(await host.accept())

    nursery.start_soon(accept)
    with trio.fail_after(60):
        conn = await attacker.connect(addr)
        await conn.send(bytes(2 * MIB))
        reason = await conn.wait_closed()
    assert host.core.connections == {} or all(c.state.value == "closed" for c in host.core.connections.values())
    assert reason


async def test_connections_from_one_source_are_capped(
    fake_net: FakeNet, autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    host = PrudpEndpoint(Settings("nintendo-v1", access_key="12345678", max_connections_per_source=4))
    addr = await nursery.start(host.run, ("127.0.0.1", 7000))
    host.listen()
    clients = []
    for port in range(7001, 7011):
        c = PrudpEndpoint(Settings("nintendo-v1", access_key="12345678"))
        await nursery.start(c.run, ("127.0.0.2", port))
        clients.append(c)
    connected = 0
    for c in clients:
        try:
            with trio.fail_after(30):
                await c.connect(addr)
            connected += 1
        except ConnectionRefusedError as exc:
            assert "no answer" in str(exc)
    assert connected == 4
    assert len(host.core.connections) == 4


async def test_a_bound_is_said_once_on_the_prudp_logger(
    fake_net: FakeNet, autojump_clock: trio.testing.MockClock, nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    caplog.set_level(logging.INFO, logger="pianode.prudp")
    host = PrudpEndpoint(Settings("nintendo-v1", access_key="12345678", compression=True, max_message_size=MIB))
    addr = await nursery.start(host.run, ("127.0.0.1", 7000))
    host.listen()
    nursery.start_soon(serve_echo, host, nursery)
    for port in (7002, 7003):
        attacker = PrudpEndpoint(
            Settings("nintendo-v1", access_key="12345678", compression=True, fragment_size=60000, max_message_size=4 * MIB)
        )
        await nursery.start(attacker.run, ("127.0.0.2", port))
        with trio.fail_after(60):
            conn = await attacker.connect(addr)
            await conn.send(bytes(2 * MIB))
            await conn.wait_closed()
    said = [r for r in caplog.records if r.name == "pianode.prudp" and "memory bounds" in r.getMessage()]
    assert len(said) == 1 and "max_message_size" in said[0].getMessage()
