"""The Trio PRUDP endpoint: on Trio's fake network under MockClock (with loss and reordering), and on real loopback."""

from __future__ import annotations

import hashlib
from collections import Counter

import pytest
import trio
import trio.testing
from trio.testing._fake_net import FakeNet, UDPPacket  # private: used only behind this file's fixture

from pianode.prudp import Settings
from pianode.prudp.endpoint import PrudpEndpoint
from protocols.prudp.rendezvous import generate_key

from prudp_echo import serve_echo

CERT = generate_key()
VARIANTS = ["nintendo-v0", "nintendo-v0-friends", "nintendo-v1", "quazal-v0", "rendezvous"]


class LossyRoute:
    """FakeNet router: drop or delay each datagram by a keyed hash of (seed, route, per-route count)."""

    def __init__(self, net: FakeNet, nursery: trio.Nursery, *, loss: float, reorder: float, seed: int = 1) -> None:
        self.net, self.nursery, self.loss, self.reorder, self.seed = net, nursery, loss, reorder, seed
        self.count: Counter[str] = Counter()
        self.dropped = 0

    def _rand(self, key: str) -> float:
        return int.from_bytes(hashlib.sha256(f"{self.seed}|{key}".encode()).digest()[:8], "big") / 2**64

    def __call__(self, packet: UDPPacket) -> None:
        route = f"{packet.source}->{packet.destination}"
        key = f"{route}|{self.count[route]}"
        self.count[route] += 1
        if self._rand(key + "loss") < self.loss:
            self.dropped += 1
            return
        if self._rand(key + "reorder") < self.reorder:
            self.nursery.start_soon(self._later, packet, 0.001 + 0.05 * self._rand(key + "delay"))
        else:
            self.net.deliver_packet(packet)

    async def _later(self, packet: UDPPacket, delay: float) -> None:
        await trio.sleep(delay)
        self.net.deliver_packet(packet)


@pytest.fixture
async def fake_net() -> FakeNet:
    net = FakeNet()
    net.enable()  # only for this test's trio.run (a RunVar)
    return net


def _settings(variant: str, host: bool, **kw: object) -> Settings:
    return Settings(variant, access_key="12345678", certificate=CERT if host else CERT.public_key(), **kw)  # type: ignore[arg-type]


async def _start(nursery: trio.Nursery, variant: str, **kw: object) -> tuple[PrudpEndpoint, PrudpEndpoint, tuple[str, int]]:
    host = PrudpEndpoint(_settings(variant, True, **kw))
    client = PrudpEndpoint(_settings(variant, False, **kw))
    addr = await nursery.start(host.run, ("127.0.0.1", 7000))
    await nursery.start(client.run, ("127.0.0.2", 7000))
    host.listen()
    nursery.start_soon(serve_echo, host, nursery)
    return host, client, addr


@pytest.mark.parametrize("variant", VARIANTS)
async def test_echo_on_fake_net(
    variant: str, fake_net: FakeNet, autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    host, client, addr = await _start(nursery, variant)
    with trio.fail_after(60):
        conn = await client.connect(addr)
        for n in (1, 1000, 5000, 65536):
            msg = bytes(i % 251 for i in range(n))
            await conn.send(msg)
            assert await conn.receive() == msg
        await conn.close()
    assert conn.closed_reason == "closed"
    with pytest.raises(trio.EndOfChannel):
        await conn.receive()


async def test_rendezvous_one_mebibyte_with_loss_and_reordering(
    fake_net: FakeNet, autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    route = LossyRoute(fake_net, nursery, loss=0.1, reorder=0.2, seed=2)
    fake_net.route_packet = route  # type: ignore[assignment]
    host, client, addr = await _start(nursery, "rendezvous")
    message = bytes((i * 131 + (i >> 11)) & 0xFF for i in range(1 << 20))
    with trio.fail_after(3600):
        conn = await client.connect(addr)
        await conn.send(message)
        assert await conn.receive() == message
    assert route.dropped > 200
    assert client.statistics()["retransmissions"] > 100


async def test_wrong_certificate_refuses_with_clear_error(
    fake_net: FakeNet, autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    host = PrudpEndpoint(Settings("rendezvous", certificate=CERT))
    client = PrudpEndpoint(Settings("rendezvous", certificate=generate_key().public_key()))
    addr = await nursery.start(host.run, ("127.0.0.1", 7000))
    await nursery.start(client.run, ("127.0.0.2", 7000))
    host.listen()
    with trio.fail_after(30), pytest.raises(ConnectionRefusedError, match="host key signature does not verify"):
        await client.connect(addr)


async def test_no_host_times_out(fake_net: FakeNet, autojump_clock: trio.testing.MockClock, nursery: trio.Nursery) -> None:
    client = PrudpEndpoint(Settings("nintendo-v0"))
    await nursery.start(client.run, ("127.0.0.2", 7000))
    with trio.fail_after(30), pytest.raises(ConnectionRefusedError, match="no answer to SYN"):
        await client.connect(("127.0.0.1", 7000))
    assert trio.current_time() == pytest.approx(1.0 + 1.5 + 2.25)


@pytest.mark.parametrize("variant", ["nintendo-v0", "nintendo-v1", "rendezvous"])
async def test_real_loopback_sockets(variant: str, nursery: trio.Nursery) -> None:
    host = PrudpEndpoint(_settings(variant, True))
    client = PrudpEndpoint(_settings(variant, False))
    addr = await nursery.start(host.run, ("127.0.0.1", 0))
    await nursery.start(client.run, ("127.0.0.1", 0))
    host.listen()
    nursery.start_soon(serve_echo, host, nursery)
    with trio.fail_after(20):
        conn = await client.connect(addr)
        for n in (1, 3000, 65536):
            msg = bytes(range(256)) * (n // 256) + bytes(n % 256)
            await conn.send(msg)
            assert await conn.receive() == msg
        await conn.close()


@pytest.mark.parametrize("variant", ["nintendo-v0", "nintendo-v1"])
async def test_echo_answers_on_the_substream_and_with_the_reliability_it_was_sent(
    variant: str, nursery: trio.Nursery
) -> None:
    """A message on reliable substream 1 comes back on substream 1, an unreliable one unreliably: a peer
    reading each substream (or its unreliable messages) apart, as nintendoclients 5.0.0 does (recv(substream),
    recv_unreliable()), gets its echo where it waits for it.  Before, every echo went reliably on substream 0."""
    substreams = 1 if variant == "nintendo-v1" else 0
    host = PrudpEndpoint(Settings(variant, access_key="6f599f81", max_substream=substreams))
    client = PrudpEndpoint(Settings(variant, access_key="6f599f81", max_substream=substreams))
    addr = await nursery.start(host.run, ("127.0.0.1", 0))
    await nursery.start(client.run, ("127.0.0.1", 0))
    host.listen()
    nursery.start_soon(serve_echo, host, nursery)
    v1 = variant == "nintendo-v1"  # (v0 packets carry no substream id)
    with trio.fail_after(20):
        conn = await client.connect(addr)
        got = []
        for data, substream in ((b"one", int(v1)), (b"zero", 0), (b"B" * 3000, int(v1))):
            await conn.send(data, substream)
            got.append(await conn.receive_message())
        await conn.send_unreliable(b"fire and forget")
        got.append(await conn.receive_message())
        await conn.close()
    assert [(m.data, m.substream, m.reliable) for m in got] == [
        (b"one", int(v1), True), (b"zero", 0, True), (b"B" * 3000, int(v1), True), (b"fire and forget", 0, False)
    ]
