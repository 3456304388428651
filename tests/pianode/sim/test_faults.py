"""Seeded per-packet faults: the pure decision, faults on the simulated network
(under the autojump MockClock) and the wrapper around real loopback sockets.

Determinism is asserted the way STYLE.md B4 asks: on outcomes (the multiset of
deliveries with their virtual times), never on the order of same-tick events.
"""

from __future__ import annotations

import collections
import errno

import attrs
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st
from trio import socket as tsocket

from pianode.sim.faults import (
    FaultInjectingSocketFactory,
    FaultInjector,
    FaultySocket,
    LinkFaults,
    decide_fate,
)
from pianode.sim.netsim import SimulatedNetwork

from udp_sockets import bound_udp, drain_datagrams, udp

PORT = 41000


async def bound(ip: str, port: int = PORT) -> tsocket.SocketType:
    return await bound_udp(ip, port)


def packets(n: int, tag: bytes = b"pkt") -> list[bytes]:
    return [tag + b"-%05d-" % i + bytes(range(i % 7, i % 7 + 24)) for i in range(n)]


def drain(sock: tsocket.SocketType) -> list[bytes]:
    return [data for data, _source in drain_datagrams(sock)]


# ---------------------------------------------------------------- the pure decision


def test_settings_are_validated() -> None:
    for bad in ({"loss": 1.5}, {"duplicate": -0.1}, {"delay": -1.0}, {"jitter": float("inf")}):
        with pytest.raises(ValueError):
            LinkFaults(**bad)  # type: ignore[arg-type]
    assert LinkFaults().is_clean
    assert not LinkFaults(delay=0.1).is_clean


def test_clean_link_passes_bytes_untouched() -> None:
    fate = decide_fate(LinkFaults(), "127.0.0.1", "127.0.0.2", PORT, b"abc")
    assert not fate.lost and not fate.duplicated
    assert [(c.data, c.delay, c.reordered) for c in fate.copies] == [(b"abc", 0.0, False)]


def test_decision_is_a_function_of_its_inputs() -> None:
    faults = LinkFaults(loss=0.3, duplicate=0.3, reorder=0.3, jitter=0.02, truncate=0.2, corrupt=0.2, seed=11)
    data = packets(300)
    first = [decide_fate(faults, "127.0.0.1", "127.0.0.2", PORT, d) for d in data]
    assert first == [decide_fate(faults, "127.0.0.1", "127.0.0.2", PORT, d) for d in reversed(data)][::-1]
    # Each key component matters.
    for other in (
        [decide_fate(attrs.evolve(faults, seed=12), "127.0.0.1", "127.0.0.2", PORT, d) for d in data],
        [decide_fate(faults, "127.0.0.3", "127.0.0.2", PORT, d) for d in data],
        [decide_fate(faults, "127.0.0.1", "127.0.0.4", PORT, d) for d in data],
        [decide_fate(faults, "127.0.0.1", "127.0.0.2", PORT + 1, d) for d in data],
        [decide_fate(faults, "127.0.0.1", "127.0.0.2", PORT, d, occurrence=1) for d in data],
    ):
        assert other != first
        assert sum(a == b for a, b in zip(first, other, strict=True)) < len(data) // 2


@pytest.mark.parametrize("loss", [0.05, 0.2, 0.5])
def test_loss_rate_within_tolerance(loss: float) -> None:
    n = 4000
    faults = LinkFaults(loss=loss, seed=3)
    lost = sum(decide_fate(faults, "10.0.0.1", "10.0.0.2", PORT, d).lost for d in packets(n))
    # Five binomial standard deviations.
    tolerance = 5 * (loss * (1 - loss) / n) ** 0.5
    assert abs(lost / n - loss) < tolerance


def test_each_fault_happens_at_its_rate() -> None:
    n = 4000
    faults = LinkFaults(duplicate=0.1, reorder=0.25, truncate=0.15, corrupt=0.3, seed=5)
    fates = [decide_fate(faults, "10.0.0.1", "10.0.0.2", PORT, d) for d in packets(n)]
    rates = {
        "duplicate": sum(f.duplicated for f in fates) / n,
        "reorder": sum(f.copies[0].reordered for f in fates) / n,
        "truncate": sum(f.truncated for f in fates) / n,
        "corrupt": sum(f.corrupted for f in fates) / n,
    }
    for name, rate in rates.items():
        expected = getattr(faults, name)
        assert abs(rate - expected) < 5 * (expected * (1 - expected) / n) ** 0.5, name


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary(max_size=200),
    loss=st.floats(0, 1),
    dup=st.floats(0, 1),
    reorder=st.floats(0, 1),
    trunc=st.floats(0, 1),
    corrupt=st.floats(0, 1),
    delay=st.floats(0, 2),
    jitter=st.floats(0, 2),
    seed=st.integers(-(2**70), 2**70),
)
def test_fate_invariants(
    data: bytes,
    loss: float,
    dup: float,
    reorder: float,
    trunc: float,
    corrupt: float,
    delay: float,
    jitter: float,
    seed: int,
) -> None:
    faults = LinkFaults(
        loss=loss,
        duplicate=dup,
        reorder=reorder,
        truncate=trunc,
        corrupt=corrupt,
        delay=delay,
        jitter=jitter,
        seed=seed,
    )
    fate = decide_fate(faults, "127.0.0.1", "127.0.0.2", PORT, data)
    assert len(fate.copies) <= 2
    if loss == 1.0:
        assert fate.lost
    if loss == 0.0:
        assert not fate.lost
    for c in fate.copies:
        low = delay + (faults.reorder_delay if c.reordered else 0.0)
        assert low <= c.delay <= low + jitter
        if not fate.truncated and not fate.corrupted:
            assert c.data == data
        if fate.truncated:
            assert len(c.data) < len(data)
        elif fate.corrupted:
            assert len(c.data) == len(data)
            flipped = sum(bin(x ^ y).count("1") for x, y in zip(c.data, data, strict=True))
            assert flipped == 1
    assert len({c.data for c in fate.copies}) <= 1  # duplicates carry the same bytes


# ---------------------------------------------------------------- on the simulated network


async def test_loss_on_the_network_matches_the_decision(autojump_clock: trio.testing.MockClock) -> None:
    faults = LinkFaults(loss=0.2, seed=9)
    async with SimulatedNetwork(faults) as net:
        net.install()
        a, b = await bound("127.0.0.1"), await bound("127.0.0.2")
        data = packets(200)
        for d in data:
            await a.sendto(d, ("127.0.0.2", PORT))
        got = drain(b)
    expected = [d for d in data if not decide_fate(faults, "127.0.0.1", "127.0.0.2", PORT, d).lost]
    assert got == expected
    stats = net.statistics()
    assert (stats.sent, stats.lost, stats.delivered) == (200, 200 - len(got), len(got))
    assert 0.1 < stats.lost / 200 < 0.3


async def _scenario(seed: int) -> collections.Counter[tuple[float, str, str, bytes]]:
    """Four stations all sending to each other concurrently over a nasty network;
    returns the multiset of (virtual arrival time, source, destination, bytes)."""
    faults = LinkFaults(
        loss=0.15, duplicate=0.1, reorder=0.2, delay=0.01, jitter=0.03, truncate=0.05, corrupt=0.05, seed=seed
    )
    ips = [f"127.0.0.{i}" for i in range(1, 5)]
    seen: collections.Counter[tuple[float, str, str, bytes]] = collections.Counter()
    async with SimulatedNetwork(faults) as net:
        net.install()
        start = trio.current_time()
        socks = {ip: await bound(ip) for ip in ips}
        go = trio.Event()

        async def station(ip: str) -> None:
            await go.wait()
            for n in range(25):
                for peer in ips:
                    if peer != ip:
                        await socks[ip].sendto(b"%s>%s#%d" % (ip.encode(), peer.encode(), n), (peer, PORT))
                await trio.sleep(0.02)

        async def listen(ip: str) -> None:
            while True:
                data, (src, _port) = await socks[ip].recvfrom(2048)
                seen[(round(trio.current_time() - start, 9), src, ip, data)] += 1

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                for ip in ips:
                    nursery.start_soon(listen, ip)
                async with trio.open_nursery() as senders:
                    for ip in ips:
                        senders.start_soon(station, ip)
                    go.set()
                await trio.sleep(1)  # longer than any delay: everything has landed
                nursery.cancel_scope.cancel()
    return seen


async def test_same_seed_same_deliveries_different_seed_different(autojump_clock: trio.testing.MockClock) -> None:
    runs = [await _scenario(seed=21) for _ in range(3)]
    assert runs[0] == runs[1] == runs[2]
    assert sum(runs[0].values()) > 0
    assert await _scenario(seed=22) != runs[0]


async def test_duplication_delivers_twice(autojump_clock: trio.testing.MockClock) -> None:
    async with SimulatedNetwork(LinkFaults(duplicate=1.0, seed=1)) as net:
        net.install()
        a, b = await bound("127.0.0.1"), await bound("127.0.0.2")
        for d in packets(30):
            await a.sendto(d, ("127.0.0.2", PORT))
        got = drain(b)
    assert collections.Counter(got) == collections.Counter({d: 2 for d in packets(30)})
    assert net.statistics().duplicated == 30
    assert net.statistics().delivered == 60


async def test_reordering_lets_later_packets_overtake(autojump_clock: trio.testing.MockClock) -> None:
    faults = LinkFaults(reorder=0.3, reorder_delay=0.05, seed=4)
    async with SimulatedNetwork(faults) as net:
        net.install()
        a, b = await bound("127.0.0.1"), await bound("127.0.0.2")
        sent = [b"%04d" % i for i in range(100)]
        got: list[bytes] = []
        with trio.fail_after(10):
            for d in sent:
                await a.sendto(d, ("127.0.0.2", PORT))
                await trio.sleep(0.01)  # reorder_delay spans five later packets
                got.extend(drain(b))
            await trio.sleep(0.1)
            got.extend(drain(b))
    assert sorted(got) == sent  # nothing lost or doubled
    assert got != sent  # but not in order
    overtaken = sum(1 for i in range(len(got) - 1) if got[i] > got[i + 1])
    assert overtaken > 10
    assert 15 <= net.statistics().reordered <= 45


async def test_truncation_cuts_and_corruption_flips_one_bit(autojump_clock: trio.testing.MockClock) -> None:
    data = packets(50)
    async with SimulatedNetwork(LinkFaults(truncate=1.0, seed=2)) as net:
        net.install()
        a, b = await bound("127.0.0.1"), await bound("127.0.0.2")
        for d in data:
            await a.sendto(d, ("127.0.0.2", PORT))
        cut = drain(b)
    assert len(cut) == 50
    for original, received in zip(data, cut, strict=True):
        assert len(received) < len(original) and original.startswith(received)
    assert net.statistics().truncated == 50

    async with SimulatedNetwork(LinkFaults(corrupt=1.0, seed=2)) as net:
        net.install()
        a, b = await bound("127.0.0.1"), await bound("127.0.0.2")
        for d in data:
            await a.sendto(d, ("127.0.0.2", PORT))
        mangled = drain(b)
    for original, received in zip(data, mangled, strict=True):
        assert len(received) == len(original)
        assert sum(bin(x ^ y).count("1") for x, y in zip(original, received, strict=True)) == 1
    assert net.statistics().corrupted == 50


async def test_delay_and_jitter_in_virtual_time(autojump_clock: trio.testing.MockClock) -> None:
    async with SimulatedNetwork(LinkFaults(delay=0.25, jitter=0.1, seed=8)) as net:
        net.install()
        a, b = await bound("127.0.0.1"), await bound("127.0.0.2")
        latencies = []
        with trio.fail_after(10):
            for d in packets(20):
                sent_at = trio.current_time()
                await a.sendto(d, ("127.0.0.2", PORT))
                assert await b.recvfrom(2048) == (d, ("127.0.0.1", PORT))
                latencies.append(trio.current_time() - sent_at)
    assert all(0.25 <= t < 0.35 for t in latencies)
    assert len(set(latencies)) > 10  # jitter varies per packet
    assert net.statistics().delayed == 20


async def test_delay_without_the_delay_task_is_a_clear_error(autojump_clock: trio.testing.MockClock) -> None:
    net = SimulatedNetwork(LinkFaults(delay=0.1))
    net.install()
    a = await bound("127.0.0.1")
    await bound("127.0.0.2")
    with pytest.raises(RuntimeError, match="async with"):
        await a.sendto(b"x", ("127.0.0.2", PORT))


async def test_in_flight_copies_reach_sockets_bound_meanwhile(autojump_clock: trio.testing.MockClock) -> None:
    async with SimulatedNetwork(LinkFaults(delay=1.0)) as net:
        net.install()
        a = await bound("127.0.0.1")
        await a.sendto(b"early", ("127.0.0.2", PORT))
        b = await bound("127.0.0.2")
        with trio.fail_after(5):
            assert await b.recvfrom(100) == (b"early", ("127.0.0.1", PORT))
        b.close()
        await a.sendto(b"to a closed socket", ("127.0.0.2", PORT))
        await trio.sleep(2)
    assert net.statistics().no_listener == 1


# ---------------------------------------------------------------- per-link overrides


async def test_partition_heal_and_isolate(autojump_clock: trio.testing.MockClock) -> None:
    async with SimulatedNetwork() as net:
        net.install()
        ips = ["127.0.0.1", "127.0.0.2", "127.0.0.3"]
        socks = {ip: await bound(ip) for ip in ips}

        async def exchange() -> set[tuple[str, str]]:
            for src in ips:
                for dst in ips:
                    if src != dst:
                        await socks[src].sendto(b"%s>%s" % (src.encode(), dst.encode()), (dst, PORT))
            return {(src, dst) for dst in ips for _d, (src, _p) in drain_datagrams(socks[dst])}

        everything = {(s, d) for s in ips for d in ips if s != d}
        assert await exchange() == everything
        net.partition("127.0.0.1", "127.0.0.2")
        assert await exchange() == everything - {("127.0.0.1", "127.0.0.2"), ("127.0.0.2", "127.0.0.1")}
        net.heal("127.0.0.1", "127.0.0.2")
        assert await exchange() == everything
        net.isolate("127.0.0.3")  # a killed node: nothing in or out
        assert await exchange() == {("127.0.0.1", "127.0.0.2"), ("127.0.0.2", "127.0.0.1")}
        net.restore("127.0.0.3")
        net.set_link_faults("127.0.0.2", "127.0.0.3", LinkFaults(loss=1.0))  # one direction only
        assert await exchange() == everything - {("127.0.0.2", "127.0.0.3")}


async def test_isolated_node_misses_broadcasts_on_its_own_address(autojump_clock: trio.testing.MockClock) -> None:
    net = SimulatedNetwork(broadcast_to_subnet_binds=True)
    net.install()
    listeners = {ip: await bound(ip) for ip in ("127.0.0.2", "127.0.0.3")}
    sender = await bound("127.0.0.1", PORT + 1)
    sender.setsockopt(tsocket.SOL_SOCKET, tsocket.SO_BROADCAST, 1)
    net.isolate("127.0.0.3")
    await sender.sendto(b"hello", ("127.255.255.255", PORT))
    assert drain(listeners["127.0.0.2"]) == [b"hello"]
    assert drain(listeners["127.0.0.3"]) == []


async def test_identical_retransmissions_get_fresh_decisions(autojump_clock: trio.testing.MockClock) -> None:
    """A byte-identical resend is not doomed to share the first copy's fate."""
    async with SimulatedNetwork(LinkFaults(loss=0.5, seed=17)) as net:
        net.install()
        a, b = await bound("127.0.0.1"), await bound("127.0.0.2")
        for _ in range(40):
            await a.sendto(b"same bytes every time", ("127.0.0.2", PORT))
            await trio.sleep(0.1)
        got = drain(b)
    assert 5 < len(got) < 35


async def test_32_station_keepalive_mesh_is_fast_and_reproducible(autojump_clock: trio.testing.MockClock) -> None:
    async def mesh() -> tuple[dict[str, int], float]:
        ips = [f"127.0.1.{i}" for i in range(1, 33)]
        received = dict.fromkeys(ips, 0)
        async with SimulatedNetwork(LinkFaults(loss=0.1, jitter=0.005, seed=32)) as net:
            net.install()
            socks = {ip: await bound(ip) for ip in ips}
            start = trio.current_time()

            async def node(ip: str) -> None:
                for tick in range(10):
                    for peer in ips:
                        if peer != ip:
                            await socks[ip].sendto(b"ka %s %d" % (ip.encode(), tick), (peer, PORT))
                    await trio.sleep(1)

            async def listen(ip: str) -> None:
                while True:
                    await socks[ip].wait_readable()  # type: ignore[attr-defined]
                    received[ip] += len(drain(socks[ip]))

            with trio.fail_after(60):
                async with trio.open_nursery() as nursery:
                    for ip in ips:
                        nursery.start_soon(listen, ip)
                    async with trio.open_nursery() as nodes:
                        for ip in ips:
                            nodes.start_soon(node, ip)
                    await trio.sleep(1)
                    nursery.cancel_scope.cancel()
            return received, trio.current_time() - start

    first, elapsed = await mesh()
    second, _ = await mesh()
    assert first == second
    total = sum(first.values())
    assert 0.85 * 32 * 31 * 10 < total < 0.95 * 32 * 31 * 10
    assert 10.0 <= elapsed < 11.1


# ---------------------------------------------------------------- real sockets on loopback


async def test_real_socket_wrapper_applies_loss_on_loopback() -> None:
    faults = LinkFaults(loss=0.3, seed=6)
    async with FaultInjectingSocketFactory(faults) as factory:
        factory.install()
        with udp() as rx, udp() as tx:
            assert isinstance(rx, FaultySocket)
            await rx.bind(("127.0.0.1", 0))
            await tx.bind(("127.0.0.1", 0))
            port = rx.getsockname()[1]
            data = packets(150, b"real")
            expected = [d for d in data if not decide_fate(faults, "127.0.0.1", "127.0.0.1", port, d).lost]
            for d in data:
                assert await tx.sendto(d, ("127.0.0.1", port)) == len(d)
            got: list[bytes] = []
            with trio.fail_after(5):
                while len(got) < len(expected):
                    await rx.wait_readable()  # type: ignore[attr-defined]
                    while True:
                        try:
                            payload, source = rx.recv_nowait()  # type: ignore[attr-defined]
                        except trio.WouldBlock:
                            break
                        assert source == tx.getsockname()
                        got.append(payload)
            with pytest.raises(trio.WouldBlock):
                rx.recv_nowait()  # type: ignore[attr-defined]
    assert got == expected
    # The receiver's port is random, so the sample is too: five standard deviations.
    assert abs(1 - len(got) / len(data) - 0.3) < 5 * (0.3 * 0.7 / len(data)) ** 0.5
    stats = factory.statistics()
    assert (stats.sent, stats.lost, stats.delivered) == (150, 150 - len(expected), len(expected))


async def test_real_socket_wrapper_delays_and_duplicates() -> None:
    async with FaultInjectingSocketFactory(LinkFaults(duplicate=1.0, delay=0.05, seed=1)) as factory:
        factory.install()
        with udp() as rx, udp() as tx:
            await rx.bind(("127.0.0.1", 0))
            start = trio.current_time()
            await tx.sendto(b"twice", rx.getsockname())
            with trio.fail_after(5):
                first = await rx.recvfrom(100)
                second = await rx.recvfrom(100)
            assert first[0] == second[0] == b"twice"
            assert trio.current_time() - start >= 0.05
    assert factory.statistics().duplicated == 1
    assert factory.statistics().delivered == 2


async def test_real_socket_wrapper_counts_sends_the_kernel_refuses() -> None:
    async with FaultInjectingSocketFactory(LinkFaults(delay=0.01)) as factory:
        factory.install()
        tx = udp()
        await tx.bind(("127.0.0.1", 0))
        await tx.sendto(b"x", ("127.0.0.1", 9))
        tx.close()  # before the delayed copy goes out
        await trio.sleep(0.05)
    assert factory.statistics().send_failed == 1


async def test_real_socket_wrapper_leaves_other_sockets_alone() -> None:
    factory = FaultInjectingSocketFactory(LinkFaults(loss=1.0))
    factory.install()
    with tsocket.socket(tsocket.AF_INET, tsocket.SOCK_STREAM) as tcp:
        assert not isinstance(tcp, FaultySocket)
        assert isinstance(tcp, tsocket.SocketType)
    with udp() as sock:
        # Options and names pass straight through to the real socket.
        sock.setsockopt(tsocket.SOL_SOCKET, tsocket.SO_REUSEADDR, 1)
        assert sock.getsockopt(tsocket.SOL_SOCKET, tsocket.SO_REUSEADDR) == 1
        await sock.bind(("127.0.0.1", 0))
        assert sock.getsockname()[0] == "127.0.0.1"
        assert sock.fileno() >= 0
    with pytest.raises(OSError) as info:
        sock.recv_nowait()  # type: ignore[attr-defined]
    assert info.value.errno == errno.EBADF


async def test_real_socket_wrapper_drain_contract_on_close(nursery: trio.Nursery) -> None:
    FaultInjectingSocketFactory().install()
    sock = udp()
    await sock.bind(("127.0.0.1", 0))

    async def close_soon() -> None:
        await trio.sleep(0.01)
        sock.close()

    nursery.start_soon(close_soon)
    with trio.fail_after(5), pytest.raises(trio.ClosedResourceError):
        await sock.wait_readable()  # type: ignore[attr-defined]
    with pytest.raises(OSError) as info:
        await sock.wait_readable()  # type: ignore[attr-defined]
    assert info.value.errno == errno.EBADF


async def test_real_socket_wrapper_applies_faults_to_connected_send() -> None:
    faults = LinkFaults(loss=0.5, seed=3)
    async with FaultInjectingSocketFactory(faults) as factory:
        factory.install()
        with udp() as rx, udp() as tx:
            await rx.bind(("127.0.0.1", 0))
            await tx.bind(("127.0.0.1", 0))
            await tx.connect(rx.getsockname())
            data = packets(40, b"conn")
            for d in data:
                await tx.send(d)
            port = rx.getsockname()[1]
            expected = [d for d in data if not decide_fate(faults, "127.0.0.1", "127.0.0.1", port, d).lost]
            got: list[bytes] = []
            with trio.fail_after(5):
                while len(got) < len(expected):
                    got.append((await rx.recvfrom(100))[0])
    assert got == expected and 0 < len(expected) < 40


async def test_burst_copies_of_one_datagram_are_judged_independently(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """LAN browse replies go out three times at once (spec §6.1): each copy must
    get its own chance, or the repetition would be useless under loss."""
    injector = FaultInjector(LinkFaults(loss=0.5, seed=2))
    mixed = 0
    for d in packets(200, b"reply"):
        fates = {injector.fate("127.0.0.2", "127.0.0.9", PORT, d).lost for _ in range(3)}
        mixed += len(fates) == 2
    # Independent copies disagree with probability 3/4; shared fates never would.
    assert 120 < mixed < 180


async def test_repeat_memory_forgets_after_two_windows(autojump_clock: trio.testing.MockClock) -> None:
    faults = LinkFaults(loss=0.5, seed=4)
    injector = FaultInjector(faults, repeat_window=1.0)
    data = packets(100, b"rep")

    def decisions(occurrence: int) -> list[bool]:
        return [decide_fate(faults, "a", "b", PORT, d, occurrence).lost for d in data]

    assert [injector.fate("a", "b", PORT, d).lost for d in data] == decisions(0)
    await trio.sleep(1.5)  # next generation: still remembered
    assert [injector.fate("a", "b", PORT, d).lost for d in data] == decisions(1)
    await trio.sleep(2.5)  # two silent generations: forgotten
    assert [injector.fate("a", "b", PORT, d).lost for d in data] == decisions(0)


async def test_repeat_memory_is_capped(autojump_clock: trio.testing.MockClock) -> None:
    injector = FaultInjector(LinkFaults(loss=0.5, seed=4), max_tracked=10)
    data = packets(50, b"cap")
    for d in data:
        injector.fate("a", "b", PORT, d)
    assert len(injector._current) == 10
    with pytest.raises(ValueError):
        FaultInjector(repeat_window=0.0)


async def test_real_socket_sendto_nowait_applies_faults() -> None:
    faults = LinkFaults(loss=0.3, duplicate=0.2, seed=12)
    async with FaultInjectingSocketFactory(faults) as factory:
        factory.install()
        with udp() as rx, udp() as tx:
            await rx.bind(("127.0.0.1", 0))
            await tx.bind(("127.0.0.1", 0))
            port = rx.getsockname()[1]
            data = packets(100, b"nowait")
            for d in data:
                assert tx.sendto_nowait(d, ("127.0.0.1", port)) == len(d)  # type: ignore[attr-defined]
            fates = [decide_fate(faults, "127.0.0.1", "127.0.0.1", port, d) for d in data]
            expected = collections.Counter({d: len(f.copies) for d, f in zip(data, fates, strict=True) if f.copies})
            got: collections.Counter[bytes] = collections.Counter()
            with trio.fail_after(5):
                while sum(got.values()) < sum(expected.values()):
                    await rx.wait_readable()  # type: ignore[attr-defined]
                    got.update(drain(rx))
            with pytest.raises(PermissionError):
                tx.sendto_nowait(b"x", ("127.255.255.255", port))  # type: ignore[attr-defined]
    assert got == expected
    assert factory.statistics().duplicated > 0 and factory.statistics().lost > 0


async def test_lost_broadcast_without_so_broadcast_still_raises() -> None:
    async with FaultInjectingSocketFactory(LinkFaults(loss=1.0)) as factory:
        factory.install()
        with udp() as tx:
            await tx.bind(("127.0.0.1", 0))
            with pytest.raises(PermissionError):
                await tx.sendto(b"x", ("127.255.255.255", 9))
            with pytest.raises(PermissionError):
                tx.sendto_nowait(b"x", ("127.255.255.255", 9))  # type: ignore[attr-defined]
            tx.setsockopt(tsocket.SOL_SOCKET, tsocket.SO_BROADCAST, 1)
            await tx.sendto(b"x", ("127.255.255.255", 9))  # dropped by the faults, no error
    assert factory.statistics().lost == 3
