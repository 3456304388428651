"""The simulated UDP network: sockets, binding rules, broadcast, bounded queues.

Expected behaviour is Linux's, observed on loopback on this project's machine
(broadcast reaches 0.0.0.0 and broadcast-address binds only, the most recent of
several SO_REUSEADDR sockets gets a unicast datagram, SO_RCVBUF is doubled,
about 256 small datagrams fit the default 212992-byte buffer).  Every wait is
under ``trio.fail_after``, on the virtual clock.
"""

from __future__ import annotations

import errno
import socket as stdlib_socket
from collections.abc import AsyncIterator

import pytest
import trio
import trio.testing
from trio import socket as tsocket

from pianode.sim.netsim import SimulatedNetwork, SimulatedSocket

from udp_sockets import bound_udp, drain_datagrams, udp

PORT = 40000


async def bound(ip: str, port: int = PORT, *, reuse: bool = False, broadcast: bool = False) -> tsocket.SocketType:
    return await bound_udp(ip, port, reuse=reuse, broadcast=broadcast)


# pytest-trio passes a clock to trio.run only when the *test* takes it, so every
# test using this fixture also names autojump_clock.
@pytest.fixture
async def net() -> AsyncIterator[SimulatedNetwork]:
    async with SimulatedNetwork() as network:
        network.install()
        yield network


# ---------------------------------------------------------------- installation


async def test_install_routes_trio_socket_calls_here(
    net: SimulatedNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    sock = udp()
    assert isinstance(sock, SimulatedSocket)
    assert isinstance(sock, tsocket.SocketType)
    assert sock.family == tsocket.AF_INET and sock.type == tsocket.SOCK_DGRAM
    assert sock.fileno() == -1  # no kernel object, and no exception either


def test_install_lasts_only_for_its_run() -> None:
    async def simulated() -> str:
        SimulatedNetwork().install()
        return type(udp()).__name__

    async def plain() -> str:
        with udp() as sock:
            return type(sock).__name__

    assert trio.run(simulated) == "SimulatedSocket"
    assert trio.run(plain) != "SimulatedSocket"


def test_install_outside_a_run_fails() -> None:
    with pytest.raises(RuntimeError):
        SimulatedNetwork().install()


async def test_only_ipv4_udp_is_simulated(net: SimulatedNetwork, autojump_clock: trio.testing.MockClock) -> None:
    with pytest.raises(OSError) as info:
        tsocket.socket(tsocket.AF_INET, tsocket.SOCK_STREAM)
    assert info.value.errno == errno.EPROTONOSUPPORT
    with pytest.raises(OSError) as info:
        tsocket.socket(tsocket.AF_INET6, tsocket.SOCK_DGRAM)
    assert info.value.errno == errno.EAFNOSUPPORT


# ---------------------------------------------------------------- unicast basics


async def test_sendto_recvfrom_round_trip(net: SimulatedNetwork, autojump_clock: trio.testing.MockClock) -> None:
    a = await bound("127.0.0.1")
    b = await bound("127.0.0.2")
    assert await a.sendto(b"ping", ("127.0.0.2", PORT)) == 4
    with trio.fail_after(1):
        assert await b.recvfrom(2048) == (b"ping", ("127.0.0.1", PORT))
    await b.sendto(memoryview(b"pong"), ("127.0.0.1", PORT))
    with trio.fail_after(1):
        assert await a.recvfrom(2048) == (b"pong", ("127.0.0.2", PORT))
    assert trio.current_time() == 0.0  # in-memory delivery takes no time
    stats = net.statistics()
    assert (stats.sent, stats.delivered, stats.lost) == (2, 2, 0)


async def test_sendto_with_flags_argument_form(net: SimulatedNetwork, autojump_clock: trio.testing.MockClock) -> None:
    a, b = await bound("127.0.0.1"), await bound("127.0.0.2")
    await a.sendto(b"x", 0, ("127.0.0.2", PORT))
    assert drain_datagrams(b) == [(b"x", ("127.0.0.1", PORT))]


async def test_port_zero_picks_distinct_free_ports(
    net: SimulatedNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    first = await bound("127.0.0.1", 0)
    second = await bound("127.0.0.1", 0)
    p1, p2 = first.getsockname()[1], second.getsockname()[1]
    assert p1 != p2 and p1 > 0 and p2 > 0
    taken = await bound("0.0.0.0", 0)
    assert taken.getsockname()[1] not in (p1, p2)


async def test_unbound_sender_binds_on_first_send(
    net: SimulatedNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    sender = udp()
    assert sender.getsockname() == ("0.0.0.0", 0)
    receiver = await bound("127.0.0.9")
    await sender.sendto(b"hi", ("127.0.0.9", PORT))
    ip, port = sender.getsockname()
    assert ip == "0.0.0.0" and port != 0
    # A wildcard-bound sender appears as 127.0.0.1, as on Linux loopback.
    assert drain_datagrams(receiver) == [(b"hi", ("127.0.0.1", port))]


async def test_same_address_twice_is_eaddrinuse(net: SimulatedNetwork, autojump_clock: trio.testing.MockClock) -> None:
    await bound("127.0.0.1")
    with pytest.raises(OSError) as info:
        await bound("127.0.0.1")
    assert info.value.errno == errno.EADDRINUSE
    # A wildcard bind overlaps every address on the port.
    with pytest.raises(OSError) as info:
        await bound("0.0.0.0")
    assert info.value.errno == errno.EADDRINUSE
    # Another address on the same port is fine (one IP per simulated node).
    await bound("127.0.0.2")


async def test_reuseaddr_needs_both_sockets(net: SimulatedNetwork, autojump_clock: trio.testing.MockClock) -> None:
    await bound("0.0.0.0", reuse=True)
    await bound("0.0.0.0", reuse=True)
    with pytest.raises(OSError) as info:
        await bound("0.0.0.0", reuse=False)
    assert info.value.errno == errno.EADDRINUSE


async def test_reuseport_also_shares(net: SimulatedNetwork, autojump_clock: trio.testing.MockClock) -> None:
    socks = []
    for _ in range(2):
        sock = udp()
        sock.setsockopt(tsocket.SOL_SOCKET, tsocket.SO_REUSEPORT, 1)
        await sock.bind(("0.0.0.0", PORT))
        socks.append(sock)
    assert [s.getsockname() for s in socks] == [("0.0.0.0", PORT)] * 2


async def test_rebinding_is_einval_and_close_frees_the_port(
    net: SimulatedNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    sock = await bound("127.0.0.1")
    with pytest.raises(OSError) as info:
        await sock.bind(("127.0.0.1", PORT + 1))
    assert info.value.errno == errno.EINVAL
    sock.close()
    again = await bound("127.0.0.1")
    assert again.getsockname() == ("127.0.0.1", PORT)


async def test_bad_addresses(net: SimulatedNetwork, autojump_clock: trio.testing.MockClock) -> None:
    sock = udp()
    with pytest.raises(OSError) as info:
        await sock.sendto(b"x", ("pianode.invalid", PORT))
    assert info.value.errno == errno.EINVAL
    with pytest.raises(OverflowError):
        await sock.bind(("127.0.0.1", 70000))
    with pytest.raises(OSError) as info:
        await sock.sendto(b"x", ("127.0.0.1", 0))
    assert info.value.errno == errno.EINVAL
    with pytest.raises(OSError) as info:
        await sock.sendto(b"x" * 65508, ("127.0.0.1", PORT))
    assert info.value.errno == errno.EMSGSIZE


async def test_wildcard_bind_receives_any_destination_ip(
    net: SimulatedNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    wild = await bound("0.0.0.0")
    sender = await bound("127.0.0.3", PORT + 1)
    for ip in ("127.0.0.1", "127.0.0.77", "10.1.2.3"):
        await sender.sendto(ip.encode(), (ip, PORT))
    assert [d for d, _ in drain_datagrams(wild)] == [b"127.0.0.1", b"127.0.0.77", b"10.1.2.3"]


async def test_exact_bind_beats_wildcard(net: SimulatedNetwork, autojump_clock: trio.testing.MockClock) -> None:
    wild = await bound("0.0.0.0", reuse=True)
    exact = await bound("127.0.0.5", reuse=True)
    sender = await bound("127.0.0.1", PORT + 1)
    await sender.sendto(b"to .5", ("127.0.0.5", PORT))
    await sender.sendto(b"to .6", ("127.0.0.6", PORT))
    assert [d for d, _ in drain_datagrams(exact)] == [b"to .5"]
    assert [d for d, _ in drain_datagrams(wild)] == [b"to .6"]


async def test_unicast_to_shared_port_reaches_one_socket(
    net: SimulatedNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    socks = [await bound("0.0.0.0", reuse=True) for _ in range(3)]
    sender = await bound("127.0.0.1", PORT + 1)
    await sender.sendto(b"one", ("127.0.0.1", PORT))
    counts = [len(drain_datagrams(s)) for s in socks]
    assert counts == [0, 0, 1]  # the most recently bound, as Linux does


async def test_datagram_to_nobody_is_counted(net: SimulatedNetwork, autojump_clock: trio.testing.MockClock) -> None:
    sender = await bound("127.0.0.1")
    await sender.sendto(b"void", ("127.0.0.2", PORT))
    assert net.statistics().no_listener == 1
    assert net.statistics().delivered == 0


# ---------------------------------------------------------------- broadcast


async def test_broadcast_fans_out_to_wildcard_and_broadcast_binds(
    net: SimulatedNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    listeners = [await bound("0.0.0.0", reuse=True) for _ in range(3)]
    on_bcast = await bound("127.255.255.255", reuse=True)
    on_unicast = await bound("127.0.0.2", reuse=True)  # Linux gives this one nothing
    other_port = await bound("0.0.0.0", PORT + 7)
    sender = await bound("127.0.0.4", PORT + 1, broadcast=True)
    await sender.sendto(b"who is there", ("127.255.255.255", PORT))
    for sock in [*listeners, on_bcast]:
        assert drain_datagrams(sock) == [(b"who is there", ("127.0.0.4", PORT + 1))]
    assert drain_datagrams(on_unicast) == []
    assert drain_datagrams(other_port) == []
    assert net.statistics().delivered == 4


async def test_limited_broadcast_and_stdlib_spelling(
    net: SimulatedNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    listeners = [await bound("", reuse=True) for _ in range(2)]  # "" is INADDR_ANY
    sender = await bound("127.0.0.4", PORT + 1, broadcast=True)
    await sender.sendto(b"all", ("<broadcast>", PORT))
    await sender.sendto(b"all again", ("255.255.255.255", PORT))
    for sock in listeners:
        assert [d for d, _ in drain_datagrams(sock)] == [b"all", b"all again"]


async def test_broadcast_needs_so_broadcast(net: SimulatedNetwork, autojump_clock: trio.testing.MockClock) -> None:
    await bound("0.0.0.0")
    sender = await bound("127.0.0.4", PORT + 1)
    with pytest.raises(PermissionError) as info:
        await sender.sendto(b"x", ("127.255.255.255", PORT))
    assert info.value.errno == errno.EACCES
    assert sender.getsockopt(tsocket.SOL_SOCKET, tsocket.SO_BROADCAST) == 0
    sender.setsockopt(tsocket.SOL_SOCKET, tsocket.SO_BROADCAST, 1)
    assert sender.getsockopt(tsocket.SOL_SOCKET, tsocket.SO_BROADCAST) == 1
    await sender.sendto(b"x", ("127.255.255.255", PORT))
    assert net.statistics().delivered == 1


async def test_subnet_bind_shim_and_custom_networks(autojump_clock: trio.testing.MockClock) -> None:
    net = SimulatedNetwork(broadcast_networks=["192.168.7.0/24", "127.0.0.0/8"], broadcast_to_subnet_binds=True)
    net.install()
    inside = [await bound(f"192.168.7.{i}") for i in (2, 3)]
    outside = await bound("192.168.8.2")
    loopback = await bound("127.0.0.2")
    sender = await bound("192.168.7.1", PORT + 1, broadcast=True)
    await sender.sendto(b"lan", ("192.168.7.255", PORT))
    assert [len(drain_datagrams(s)) for s in inside] == [1, 1]
    assert drain_datagrams(outside) == [] and drain_datagrams(loopback) == []
    assert "192.168.7.255" in net.broadcast_addresses
    # Without the shim (the Linux behaviour) unicast binds get nothing.
    plain = SimulatedNetwork(broadcast_networks=["192.168.7.0/24"])
    plain.install()
    a = await bound("192.168.7.2")
    s = await bound("192.168.7.1", PORT + 1, broadcast=True)
    await s.sendto(b"lan", ("192.168.7.255", PORT))
    assert drain_datagrams(a) == []
    assert plain.statistics().no_listener == 1


# ---------------------------------------------------------------- receive queues


async def test_receive_queue_is_bounded_like_a_kernel_buffer(
    net: SimulatedNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    receiver = await bound("127.0.0.2")
    sender = await bound("127.0.0.1")
    assert receiver.getsockopt(tsocket.SOL_SOCKET, tsocket.SO_RCVBUF) == 212992
    total = 1000
    for i in range(total):
        await sender.sendto(i.to_bytes(2, "big") * 50, ("127.0.0.2", PORT))
    got = drain_datagrams(receiver)
    # Linux loopback keeps 256 such datagrams in 212992 bytes; the model is close.
    assert 200 <= len(got) <= 260
    # The oldest are kept and the newest dropped, as a full kernel buffer does.
    assert [d[:2] for d, _ in got] == [i.to_bytes(2, "big") for i in range(len(got))]
    stats = net.statistics()
    assert stats.queue_full == total - len(got) == receiver.statistics().dropped  # type: ignore[attr-defined]
    assert stats.delivered == len(got)
    # Draining made room again.
    await sender.sendto(b"after", ("127.0.0.2", PORT))
    assert drain_datagrams(receiver) == [(b"after", ("127.0.0.1", PORT))]


async def test_so_rcvbuf_is_doubled_and_limits_the_queue(
    net: SimulatedNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    receiver = await bound("127.0.0.2")
    receiver.setsockopt(tsocket.SOL_SOCKET, tsocket.SO_RCVBUF, 4096)
    assert receiver.getsockopt(tsocket.SOL_SOCKET, tsocket.SO_RCVBUF) == 8192
    sender = await bound("127.0.0.1")
    for _ in range(50):
        await sender.sendto(b"z" * 100, ("127.0.0.2", PORT))
    kept = len(drain_datagrams(receiver))
    assert 5 <= kept <= 12
    receiver.setsockopt(tsocket.SOL_SOCKET, tsocket.SO_RCVBUF, 1)
    assert receiver.getsockopt(tsocket.SOL_SOCKET, tsocket.SO_RCVBUF) == 2304  # Linux's floor


async def test_a_datagram_larger_than_the_buffer_still_fits_an_empty_queue(
    net: SimulatedNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    receiver = await bound("127.0.0.2")
    receiver.setsockopt(tsocket.SOL_SOCKET, tsocket.SO_RCVBUF, 1)
    sender = await bound("127.0.0.1")
    await sender.sendto(b"b" * 5000, ("127.0.0.2", PORT))
    await sender.sendto(b"c", ("127.0.0.2", PORT))
    assert [len(d) for d, _ in drain_datagrams(receiver)] == [5000]


async def test_options_and_unknown_options(net: SimulatedNetwork, autojump_clock: trio.testing.MockClock) -> None:
    sock = udp()
    sock.setsockopt(tsocket.SOL_SOCKET, tsocket.SO_REUSEADDR, 1)
    sock.setsockopt(tsocket.SOL_SOCKET, tsocket.SO_SNDBUF, (65536).to_bytes(4, "little"))
    assert sock.getsockopt(tsocket.SOL_SOCKET, tsocket.SO_REUSEADDR) == 1
    assert sock.getsockopt(tsocket.SOL_SOCKET, tsocket.SO_SNDBUF) == 65536
    assert sock.getsockopt(tsocket.SOL_SOCKET, tsocket.SO_TYPE) == tsocket.SOCK_DGRAM
    assert sock.getsockopt(tsocket.SOL_SOCKET, tsocket.SO_REUSEADDR, 4) == (1).to_bytes(4, "little")
    with pytest.raises(OSError) as info:
        sock.setsockopt(tsocket.IPPROTO_IP, stdlib_socket.IP_TTL, 3)
    assert info.value.errno == errno.ENOPROTOOPT


# ---------------------------------------------------------------- receive API


async def test_recv_nowait_and_wait_readable_contract(
    net: SimulatedNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    receiver = await bound("127.0.0.2")
    sender = await bound("127.0.0.1")
    with pytest.raises(trio.WouldBlock):
        receiver.recv_nowait()  # type: ignore[attr-defined]
    assert not receiver.is_readable()

    async def later() -> None:
        await trio.sleep(3)
        await sender.sendto(b"late", ("127.0.0.2", PORT))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(later)
        with trio.fail_after(10):
            await receiver.wait_readable()  # type: ignore[attr-defined]
        assert trio.current_time() == 3.0
        assert receiver.is_readable()
        assert receiver.recv_nowait() == (b"late", ("127.0.0.1", PORT))  # type: ignore[attr-defined]


async def test_drain_loop_with_batches(net: SimulatedNetwork, autojump_clock: trio.testing.MockClock) -> None:
    """The loop the node will run: wait, then take datagrams until WouldBlock."""
    receiver = await bound("127.0.0.2")
    senders = [await bound(f"127.0.0.{10 + i}") for i in range(4)]
    got: list[bytes] = []

    async def send_all(sock: tsocket.SocketType) -> None:
        for n in range(40):
            await sock.sendto(b"%s/%d" % (sock.getsockname()[0].encode(), n), ("127.0.0.2", PORT))
            await trio.sleep(0.01)

    async def receive() -> None:
        while len(got) < 160:
            await receiver.wait_readable()  # type: ignore[attr-defined]
            for _ in range(16):
                try:
                    data, _addr = receiver.recv_nowait()  # type: ignore[attr-defined]
                except trio.WouldBlock:
                    break
                got.append(data)

    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(receive)
            for s in senders:
                nursery.start_soon(send_all, s)
    assert sorted(got) == sorted(b"127.0.0.%d/%d" % (10 + i, n) for i in range(4) for n in range(40))


async def test_recvfrom_truncates_and_into_variants(
    net: SimulatedNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    receiver = await bound("127.0.0.2")
    sender = await bound("127.0.0.1")
    for payload in (b"0123456789", b"abcdef", b"XYZ", b"hello"):
        await sender.sendto(payload, ("127.0.0.2", PORT))
    with trio.fail_after(1):
        assert await receiver.recvfrom(4) == (b"0123", ("127.0.0.1", PORT))  # rest discarded, as UDP does
        buf = bytearray(16)
        assert await receiver.recvfrom_into(buf) == (6, ("127.0.0.1", PORT))
        assert bytes(buf[:6]) == b"abcdef"
        assert await receiver.recv(100) == b"XYZ"
        small = bytearray(3)
        assert await receiver.recv_into(small) == 3 and small == b"hel"


async def test_close_wakes_waiters_and_later_calls_fail(
    net: SimulatedNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    sock = await bound("127.0.0.2")

    async def close_soon() -> None:
        await trio.sleep(1)
        sock.close()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(close_soon)
        with trio.fail_after(5), pytest.raises(trio.ClosedResourceError):
            await sock.recvfrom(100)
    for call in (lambda: sock.recv_nowait(), lambda: sock.getsockname()):  # type: ignore[attr-defined]
        with pytest.raises(OSError) as info:
            call()
        assert info.value.errno == errno.EBADF
    with pytest.raises(OSError) as info:
        await sock.sendto(b"x", ("127.0.0.1", PORT))
    assert info.value.errno == errno.EBADF


async def test_context_manager_closes_and_unbinds(
    net: SimulatedNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    with udp() as sock:
        await sock.bind(("127.0.0.1", PORT))
        assert ("127.0.0.1", PORT) in net.bound()
    assert ("127.0.0.1", PORT) not in net.bound()


async def test_cancelled_sendto_sends_nothing(net: SimulatedNetwork, autojump_clock: trio.testing.MockClock) -> None:
    receiver = await bound("127.0.0.2")
    sender = await bound("127.0.0.1")
    with trio.CancelScope() as scope:
        scope.cancel()
        await sender.sendto(b"never", ("127.0.0.2", PORT))
    assert drain_datagrams(receiver) == []


# ---------------------------------------------------------------- lifetime


async def test_body_exception_comes_out_unwrapped(autojump_clock: trio.testing.MockClock) -> None:
    with pytest.raises(KeyError):
        async with SimulatedNetwork():
            raise KeyError("from the body")


async def test_network_can_run_in_a_callers_nursery(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    from pianode.sim.faults import LinkFaults

    net = SimulatedNetwork(LinkFaults(delay=2.0))
    await nursery.start(net.run)
    net.install()
    a, b = await bound("127.0.0.1"), await bound("127.0.0.2")
    await a.sendto(b"x", ("127.0.0.2", PORT))
    with trio.fail_after(5):
        assert await b.recvfrom(10) == (b"x", ("127.0.0.1", PORT))
    assert trio.current_time() == 2.0


async def test_outer_cancellation_passes_through_the_network(autojump_clock: trio.testing.MockClock) -> None:
    with trio.move_on_after(5) as scope:
        async with SimulatedNetwork() as net:
            net.install()
            sock = await bound("127.0.0.1")
            await sock.recvfrom(10)  # nobody sends
    assert scope.cancelled_caught
    assert trio.current_time() == 5.0


async def test_non_string_hosts_are_type_errors(net: SimulatedNetwork, autojump_clock: trio.testing.MockClock) -> None:
    sock = udp()
    with pytest.raises(TypeError):
        await sock.sendto(b"x", (2130706433, PORT))
    with pytest.raises(TypeError):
        await sock.bind("127.0.0.1")


async def test_sendto_nowait_delivers_without_a_checkpoint(
    net: SimulatedNetwork, autojump_clock: trio.testing.MockClock
) -> None:
    receiver = await bound("127.0.0.2")
    sender = await bound("127.0.0.1")
    with trio.CancelScope() as scope:  # noqa: ASYNC100 - the point: no checkpoint inside
        scope.cancel()
        # Not a checkpoint, so even a cancelled scope lets it through.
        for n in range(3):
            assert sender.sendto_nowait(b"%d" % n, ("127.0.0.2", PORT)) == 1  # type: ignore[attr-defined]
    assert [d for d, _ in drain_datagrams(receiver)] == [b"0", b"1", b"2"]
    with pytest.raises(PermissionError):
        sender.sendto_nowait(b"x", ("127.255.255.255", PORT))  # type: ignore[attr-defined]
