"""Endpoint-wide bounds of the PRUDP endpoint's Trio driver, under hostile peers on real loopback UDP.

Every connection has its own bound on what it holds received and not read (``receive_queue_bytes``), but many
connections from many source addresses, whose application never reads, would each fill theirs: the endpoint as a
whole must hold no more than ``max_unread_bytes``, drop (and count) what comes beyond it, and go on serving a
connection whose application reads.  Each run is bounded in time (``fail_after``) and in what it sends.
"""

from __future__ import annotations

import trio

from pianode.prudp import Settings
from pianode.prudp.core import DROP_REASONS
from pianode.prudp.endpoint import PrudpEndpoint

KIB = 1 << 10
KEY = "12345678"


async def _send_messages(client: PrudpEndpoint, addr: tuple[str, int], count: int, size: int) -> None:
    """Connect to *addr* and send *count* messages of *size* bytes, until the connection closes."""
    conn = await client.connect(addr)
    for i in range(count):
        try:
            await conn.send(bytes([i]) * size)
        except trio.ClosedResourceError:
            return


def _unread(host: PrudpEndpoint) -> int:
    """Bytes the host's connections received and its application did not read, counted from the messages."""
    handles = {id(h): h for h in [*host._handles.values(), *host._accepted]}  # type: ignore[attr-defined]
    return sum(len(m.data) for handle in handles.values() for m in handle._messages)


async def test_flooding_connections_that_nobody_reads_stay_within_the_endpoint_bound() -> None:
    flooders, per_flooder, message = 8, 448 * KIB, 32 * KIB
    bound = 1024 * KIB  # below what the flooders send in all (3.5 MiB), above each one's own bound
    held, largest = 64 * KIB, 64 * KIB  # what one connection may have taken before the bound: its burst
    host = PrudpEndpoint(Settings(
        "nintendo-v1", access_key=KEY, receive_queue_bytes=512 * KIB, max_held_bytes=held, max_message_size=largest,
        max_unread_bytes=bound,
    ))  # fmt: skip
    host._accepted = []  # type: ignore[attr-defined]  # (the handles accepted, read or not: _unread counts them)
    good_read: list[bytes] = []
    peak = 0

    async def serve(nursery: trio.Nursery) -> None:
        while True:
            conn = await host.accept()
            host._accepted.append(conn)  # type: ignore[attr-defined]
            if conn.id.address[0] == "127.0.0.9":  # the well-behaved one: its application reads
                nursery.start_soon(read_all, conn)

    async def read_all(conn: object) -> None:
        while True:
            good_read.append(await conn.receive())  # type: ignore[attr-defined]

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            addr = await nursery.start(host.run, ("127.0.0.1", 0))
            host.listen()
            nursery.start_soon(serve, nursery)
            clients = []
            for n in range(flooders):
                client = PrudpEndpoint(Settings("nintendo-v1", access_key=KEY))
                await nursery.start(client.run, (f"127.0.0.{2 + n % 4}", 0))
                clients.append(client)
                nursery.start_soon(_send_messages, client, addr, per_flooder // message, message)
            # Until the flooders reach the bound (a slow machine takes longer), then a while more past it.
            for _ in range(3000):
                await trio.sleep(0.01)
                peak = max(peak, _unread(host))
                if peak >= bound - message:
                    break
            for _ in range(200):
                await trio.sleep(0.01)
                peak = max(peak, _unread(host))
            good = PrudpEndpoint(Settings("nintendo-v1", access_key=KEY))
            await nursery.start(good.run, ("127.0.0.9", 0))
            conn = await good.connect(addr)
            sent = [bytes([i]) * (4 * KIB) for i in range(20)]
            for data in sent:
                await conn.send(data)
            while len(good_read) < len(sent):
                await trio.sleep(0.01)
                peak = max(peak, _unread(host))
            nursery.cancel_scope.cancel()
    assert good_read == sent  # the well-behaved connection was served, in order
    # Past the bound, a connection whose application has read everything is still served: what it took before
    # (early packets held, at most max_held_bytes, and a message's first fragments) may then complete, once.
    assert peak <= bound + flooders * (held + largest), f"the host held {peak // KIB} KiB unread"
    assert peak >= bound - message  # (the flooders did reach the bound: the test tested it)
    stats = host.statistics()
    assert "unread_full" in DROP_REASONS and stats.get("dropped_unread_full", 0) > 0
    assert host.unread_bytes == _unread(host)


async def test_unread_bytes_follow_what_is_read_and_what_is_let_go() -> None:
    """The endpoint's count of unread bytes falls as the application reads, and when it lets go of a closed
    connection it never drained (else the bound would fill with memory nobody holds)."""
    host = PrudpEndpoint(Settings("nintendo-v1", access_key=KEY))
    client = PrudpEndpoint(Settings("nintendo-v1", access_key=KEY))
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            addr = await nursery.start(host.run, ("127.0.0.1", 0))
            await nursery.start(client.run, ("127.0.0.2", 0))
            host.listen()
            for first in (True, False):
                conn = await client.connect(addr)
                accepted = await host.accept()
                for i in range(3):
                    await conn.send(bytes([i]) * 1000)
                while accepted.unread_bytes < 3000:
                    await trio.sleep(0.01)
                assert host.unread_bytes == 3000
                if first:
                    assert await accepted.receive() == bytes(1000)
                    assert host.unread_bytes == 2000
                await conn.close()
                await accepted.wait_closed()
                assert host.unread_bytes == (2000 if first else 3000)  # (a closed one may still be read)
                del accepted
                assert host.unread_bytes == 0
            nursery.cancel_scope.cancel()


def _queued(host: PrudpEndpoint) -> int:
    """Bytes the host's connections hold queued to send (not yet in their windows)."""
    return sum(conn.queued_bytes for conn in host.core.connections.values())


async def test_echoes_to_peers_that_never_take_them_stay_within_the_endpoint_send_bound() -> None:
    """Peers that send to an echo host and never take the echo (their own unread bound drops it unacknowledged):
    each connection queues up to send_queue_bytes, but the endpoint as a whole no more than max_queued_bytes
    (``send`` waits), and a peer that takes its echoes is still served."""
    from pianode.prudp.echo import serve_echo

    attackers, per_attacker, message = 6, 512 * KIB, 32 * KIB
    bound = 512 * KIB
    host = PrudpEndpoint(Settings("nintendo-v1", access_key=KEY, send_queue_bytes=1024 * KIB, max_queued_bytes=bound))
    peak = 0

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            addr = await nursery.start(host.run, ("127.0.0.1", 0))
            host.listen()
            nursery.start_soon(serve_echo, host, nursery)
            for n in range(attackers):
                # max_unread_bytes=1: after the first echo it drops every DATA packet unacknowledged (never reads)
                client = PrudpEndpoint(Settings("nintendo-v1", access_key=KEY, max_unread_bytes=1))
                await nursery.start(client.run, (f"127.0.0.{2 + n % 3}", 0))
                nursery.start_soon(_send_messages, client, addr, per_attacker // message, message)
            for _ in range(3000):  # until the attackers reach the bound (a slow machine takes longer) ...
                await trio.sleep(0.01)
                peak = max(peak, _queued(host))
                if peak >= bound - message:
                    break
            for _ in range(200):  # ... and a while more past it
                await trio.sleep(0.01)
                peak = max(peak, _queued(host))
            good = PrudpEndpoint(Settings("nintendo-v1", access_key=KEY))
            await nursery.start(good.run, ("127.0.0.9", 0))
            conn = await good.connect(addr)
            for i in range(10):
                await conn.send(bytes([i]) * (4 * KIB))
                assert await conn.receive() == bytes([i]) * (4 * KIB)
                peak = max(peak, _queued(host))
            nursery.cancel_scope.cancel()
    # A connection with nothing queued may always queue a message: one each past the bound at most.
    assert peak <= bound + attackers * message, f"the host queued {peak // KIB} KiB"
    assert peak >= bound - message  # (the attackers did reach the bound: the test tested it)
