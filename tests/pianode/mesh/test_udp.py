"""The UDP endpoint's batch receive on real loopback sockets: what ``recvmmsg`` reads (pianode.mesh.mmsg)
is what ``recvfrom`` reads, datagram for datagram, sender for sender."""

from __future__ import annotations

import socket
import sys

import pytest
import trio

from pianode.mesh import mmsg
from pianode.mesh.config import MAX_DATAGRAM
from pianode.mesh.udp import RECEIVE_SIZE, SENDMMSG_FROM, UdpEndpoint, open_udp_endpoint
from udp_sockets import in_readiness_polling

SIZES = [0, 1, 110, 1500, MAX_DATAGRAM, MAX_DATAGRAM + 1, MAX_DATAGRAM + 700, 9000]


def _senders(count: int) -> list[socket.socket]:
    out = []
    for i in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((f"127.0.77.{10 + i}", 0))
        out.append(s)
    return out


def _send_mix(senders: list[socket.socket], target: tuple[str, int]) -> list[tuple[bytes, tuple[str, int]]]:
    """Datagrams of every size from every sender, in an order that interleaves them; what recvfrom would
    give for each (the data cut to RECEIVE_SIZE, the sender's address)."""
    expected = []
    for k, size in enumerate(SIZES * 3):
        s = senders[k % len(senders)]
        data = bytes((k + j) & 0xFF for j in range(size))
        s.sendto(data, target)
        expected.append((data[:RECEIVE_SIZE], s.getsockname()))
    return expected


async def _endpoint(host: str, call: str, batched: bool, monkeypatch: pytest.MonkeyPatch) -> UdpEndpoint:
    """An endpoint on *host* with *call* (RECVMMSG, SENDMMSG) in use, or turned off (``PIANODE_<call>=0``)."""
    if not batched:
        monkeypatch.setenv(f"PIANODE_{call}", "0")
    return await open_udp_endpoint((host, 0))


async def _drain(endpoint: UdpEndpoint, limit: int = 64) -> list[tuple[bytes, tuple[str, int]]]:
    """Every datagram that arrives until the socket stays quiet for 0.2 s, read *limit* at a time."""
    got: list[tuple[bytes, tuple[str, int]]] = []
    for _ in range(1000):
        batch = endpoint.receive_batch(limit)
        assert len(batch) <= limit
        got.extend(batch)
        if not batch:
            with trio.move_on_after(0.2) as quiet:
                await endpoint.wait_readable()
            if quiet.cancelled_caught:
                break
    return got


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="recvmmsg is Linux's")
def test_the_batch_receiver_is_in_use_on_linux() -> None:
    # The fast path must not fall back silently where it is to be had.
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        assert mmsg.batch_receiver(s, 8, RECEIVE_SIZE) is not None


@pytest.mark.parametrize("batched", [True, False], ids=["recvmmsg", "recvfrom"])
async def test_a_batch_holds_every_datagram_whole_or_cut_as_recvfrom_cuts_it_with_its_sender(
    batched: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    endpoint = await _endpoint("127.0.77.1", "RECVMMSG", batched, monkeypatch)
    senders = _senders(3)
    try:
        assert (endpoint._batch is not None) == (batched and sys.platform.startswith("linux"))
        assert endpoint.receive_batch(64) == []  # empty: nothing, no error
        expected = _send_mix(senders, endpoint.address)
        got = await _drain(endpoint)
        assert got == expected
        assert all(type(d) is bytes and type(a) is tuple and type(a[0]) is str and type(a[1]) is int for d, a in got)
        assert endpoint.receive_batch(64) == [] and endpoint.receive_errors == 0
    finally:
        for s in senders:
            s.close()
        endpoint.close()


@pytest.mark.parametrize("size", SIZES)
async def test_a_batch_of_one_length_holds_every_datagram_with_its_sender(size: int) -> None:
    # A batch is copied out by one call at its longest datagram's length, the shorter then cut
    # (pianode.mesh.mmsg); where all have one length (a session's frames) none is: the same datagrams
    # and senders as recvfrom gives, cut where it cuts; and batches of other counts after it as well.
    endpoint = await open_udp_endpoint(("127.0.77.5", 0))
    senders = _senders(3)
    try:
        for count in (1, 2, 31, 64, 7):
            expected = []
            for k in range(count):
                s = senders[k % 3]
                data = bytes((k * 7 + j + size) & 0xFF for j in range(size))
                s.sendto(data, endpoint.address)
                expected.append((data[:RECEIVE_SIZE], s.getsockname()))
            assert await _drain(endpoint) == expected
        if endpoint._batch is not None:
            assert len(endpoint._batch._layouts) <= mmsg._LAYOUT_TABLE_LIMIT
    finally:
        for s in senders:
            s.close()
        endpoint.close()


async def test_a_batch_of_short_datagrams_of_mixed_lengths_holds_each_whole_with_its_sender() -> None:
    # Read at the longest one's length and the others cut (pianode.mesh.mmsg), up to the cut limit and
    # just over it (read slot by slot): every datagram whole, in order, with its sender.
    endpoint = await open_udp_endpoint(("127.0.77.6", 0))
    senders = _senders(3)
    try:
        for top in (mmsg._CUT_LIMIT, mmsg._CUT_LIMIT + 1):
            expected = []
            for k, size in enumerate([0, 1, 37, 110, top, 3, 256, 511, 2] * 3):
                s = senders[k % 3]
                data = bytes((k * 5 + j) & 0xFF for j in range(size))
                s.sendto(data, endpoint.address)
                expected.append((data, s.getsockname()))
            assert await _drain(endpoint) == expected
    finally:
        for s in senders:
            s.close()
        endpoint.close()


@pytest.mark.parametrize("limit", [1, 5, 64])
async def test_a_batch_stops_at_its_limit_and_the_rest_waits_for_the_next(limit: int) -> None:
    endpoint = await open_udp_endpoint(("127.0.77.2", 0))
    senders = _senders(2)
    try:
        expected = []
        for k in range(150):
            data = k.to_bytes(2, "big") * 20
            senders[k % 2].sendto(data, endpoint.address)
            expected.append((data, senders[k % 2].getsockname()))
        await trio.sleep(0.05)
        first = endpoint.receive_batch(limit)
        assert first == expected[:limit]
        assert first + await _drain(endpoint, limit) == expected
    finally:
        for s in senders:
            s.close()
        endpoint.close()


@pytest.mark.parametrize("batched", [True, False], ids=["recvmmsg", "recvfrom"])
async def test_an_error_the_socket_reports_is_counted_and_reading_goes_on(batched: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # A datagram to a closed port from a connected socket queues ECONNREFUSED on it (an ICMP port
    # unreachable); the receive that meets it counts it, and datagrams are still read after it.
    endpoint = await _endpoint("127.0.77.3", "RECVMMSG", batched, monkeypatch)
    closed = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    closed.bind(("127.0.77.4", 0))
    nobody = closed.getsockname()
    closed.close()
    sender = _senders(1)[0]
    try:
        assert endpoint._raw is not None
        endpoint._raw.connect(nobody)
        endpoint._raw.send(b"to nobody")
        await trio.sleep(0.05)
        endpoint._raw.connect(sender.getsockname())  # (a connected socket hears its peer only)
        sender.sendto(b"after", endpoint.address)
        got = await _drain(endpoint)
        assert got == [(b"after", sender.getsockname())] and endpoint.receive_errors == 1
    finally:
        sender.close()
        endpoint.close()


def test_the_tables_of_senders_and_layouts_are_bounded() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        receiver = mmsg.batch_receiver(s, 4, RECEIVE_SIZE)
        if receiver is None:
            pytest.skip("no recvmmsg on this platform")
        for port in range(mmsg._ADDRESS_TABLE_LIMIT + 10):
            key = port.to_bytes(2, "big") + bytes([127, 0, 0, 1])
            assert receiver._sender(key) == ("127.0.0.1", port)
            assert len(receiver._senders) <= mmsg._ADDRESS_TABLE_LIMIT
        for length in range(mmsg._LAYOUT_TABLE_LIMIT + 10):
            assert receiver._layout(length, 2).size == 2 * RECEIVE_SIZE  # (two whole slots; it reads length bytes of each)
            assert len(receiver._layouts) <= mmsg._LAYOUT_TABLE_LIMIT


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="recvmmsg is Linux's")
def test_receivers_of_one_thread_share_buffers_and_each_reads_only_its_own_socket() -> None:
    # A thread's receivers fill the same buffers (mmsg._Buffers): what one returned must stay whole after
    # the next call of another, and each must name its own socket's senders.
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_DGRAM) for _ in range(2)]
    senders = _senders(3)
    try:
        for i, s in enumerate(sockets):
            s.bind((f"127.0.77.{i + 1}", 0))
            s.setblocking(False)
        receivers = [mmsg.batch_receiver(s, 8, RECEIVE_SIZE) for s in sockets]
        assert receivers[0] is not None and receivers[1] is not None
        assert receivers[0]._data is receivers[1]._data  # one set of buffers for the thread
        got: list[list[tuple[bytes, tuple[str, int]]]] = [[], []]
        expected: list[list[tuple[bytes, tuple[str, int]]]] = [[], []]
        for round_ in range(6):
            for i, s in enumerate(sockets):
                for k, sender in enumerate(senders):
                    data = bytes([i, round_, k]) * (20 + 300 * i + k)
                    sender.sendto(data, s.getsockname())
                    expected[i].append((data, sender.getsockname()))
            for i in (round_ % 2, 1 - round_ % 2):  # alternating which reads first
                for _ in range(100):
                    batch = receivers[i].receive(2)
                    got[i].extend(batch)
                    if len(got[i]) == len(expected[i]):
                        break
        assert got == expected
    finally:
        for s in sockets + senders:
            s.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="recvmmsg is Linux's")
def test_a_receiver_made_in_another_thread_has_buffers_of_its_own() -> None:
    import threading

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as b:
        here = mmsg.batch_receiver(a, 8, RECEIVE_SIZE)
        there: list[object] = []
        thread = threading.Thread(target=lambda: there.append(mmsg.batch_receiver(b, 8, RECEIVE_SIZE)))
        thread.start()
        thread.join(10)
        assert here is not None and there and there[0] is not None
        assert there[0]._data is not here._data  # type: ignore[attr-defined]


# ---- sending many datagrams at a time: sendmmsg (pianode.mesh.mmsg.BatchSender) or sendto --------------------


def _listeners(count: int) -> list[socket.socket]:
    out = []
    for i in range(count):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 21)
        s.bind((f"127.0.78.{1 + i}", 0))
        s.setblocking(False)
        out.append(s)
    return out


def _heard(listener: socket.socket, count: int) -> list[tuple[bytes, tuple[str, int]]]:
    got = []
    for _ in range(count):
        try:
            got.append(listener.recvfrom(70000))
        except BlockingIOError:
            break
    return got


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sendmmsg is Linux's")
def test_the_batch_sender_is_in_use_on_linux() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        assert mmsg.batch_sender(s, 8, RECEIVE_SIZE) is not None


_MIXED = [0, 1, 104, 37, 1500, 104, 2048, 2049, 9] * 3


@pytest.mark.parametrize("batched", [True, False], ids=["sendmmsg", "sendto"])
@pytest.mark.parametrize("shape", ["one length", "mixed lengths", "lengths in turn", "more than a call", "large", "names"])
async def test_a_batch_sent_at_once_arrives_whole_in_order_from_the_endpoint(
    batched: bool, shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # What send_all_nowait sends is what sendto, one by one, sends: each datagram whole, to its address,
    # in order, from the endpoint's address; batches of one length (a frame to every station), of many
    # lengths, of one length and then another or many in turn (the iovecs laid out again), more
    # datagrams than a call takes (64) and more bytes than its buffer, and an address that is a name
    # (left to sendto) after datagrams a first call sent.
    endpoint = await _endpoint("127.0.78.100", "SENDMMSG", batched, monkeypatch)
    listeners = _listeners(3)
    try:
        assert (endpoint._batch_send is not None) == (batched and sys.platform.startswith("linux"))
        targets = [s.getsockname() for s in listeners]
        batches = {"one length": [[104] * 31], "mixed lengths": [_MIXED],
                   "lengths in turn": [[104] * 31, _MIXED, [104] * 31, [80] * 31, [80] * 5, _MIXED[:4], [104] * 2],
                   "more than a call": [[60 + k % 5 for k in range(150)], [70] * 130], "large": [[9000] * 20 + [65000, 3]],
                   "names": [[50] * 70]}[shape]  # fmt: skip
        sent = []
        for lengths in batches:
            out = []
            for k, length in enumerate(lengths):
                target = targets[k % 3]
                if shape == "names" and k == 66:
                    target = ("localhost", target[1])  # (127.0.0.1, where nobody listens)
                out.append((bytes((len(sent) + k * 3 + j) & 0xFF for j in range(length)), target))
            assert endpoint.send_all_nowait(out) == len(out) and endpoint.send_errors == 0
            sent += out
        await trio.sleep(0.05)
        for i, listener in enumerate(listeners):
            want = [(data, endpoint.address) for data, addr in sent if addr == targets[i]]
            assert _heard(listener, len(sent) + 1) == want
    finally:
        for s in listeners:
            s.close()
        endpoint.close()


@pytest.mark.parametrize("batched", [True, False], ids=["sendmmsg", "sendto"])
async def test_a_datagram_the_kernel_refuses_is_counted_and_the_rest_go(batched: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # A datagram to port 0 (EINVAL) or longer than UDP takes (EMSGSIZE) in the middle of a batch: it is
    # lost and counted, as sendto loses it, and the datagrams after it are sent.
    endpoint = await _endpoint("127.0.78.101", "SENDMMSG", batched, monkeypatch)
    listeners = _listeners(1)
    try:
        target = listeners[0].getsockname()
        # (long enough to go by sendmmsg where it is in use: SENDMMSG_FROM)
        tail = [(bytes([k]) * 40, target) for k in range(SENDMMSG_FROM)]
        out = [(b"a" * 40, target), (b"b" * 40, target), (b"bad port", (target[0], 0)), (b"c" * 40, target),
               (b"x" * 66000, target), (b"d" * 40, target), (b"e" * 40, target), *tail]  # fmt: skip
        assert endpoint.send_all_nowait(out) == len(out)
        assert endpoint.send_errors == 2
        await trio.sleep(0.05)
        assert [d for d, _ in _heard(listeners[0], len(out) + 1)] == [b"a" * 40, b"b" * 40, b"c" * 40, b"d" * 40, b"e" * 40,
                                                                      *(d for d, _ in tail)]  # fmt: skip
    finally:
        listeners[0].close()
        endpoint.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sendmmsg is Linux's")
def test_a_batch_sender_sends_what_fits_its_buffer_and_leaves_the_rest() -> None:
    # A sender of 4 slots of 100 bytes (a 400-byte buffer): a call takes as many datagrams as fit, at
    # least one; a first datagram longer than the whole buffer is left to sendto (None).
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.78.102", 0))
        listener = _listeners(1)[0]
        try:
            sender = mmsg.batch_sender(s, 4, 100)
            assert sender is not None
            target = listener.getsockname()
            assert sender.send([(b"1" * 60, target)] * 6, 0) == 4  # (the slots)
            assert sender.send([(b"2" * 150, target)] * 4, 1) == 2  # (300 bytes fit, 450 do not)
            assert sender.send([(b"3" * 401, target), (b"4", target)], 0) is None
            assert sender.send([(b"5", ("localhost", target[1]))], 0) is None
            assert [d for d, _ in _heard(listener, 10)] == [b"1" * 60] * 4 + [b"2" * 150] * 2
        finally:
            listener.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sendmmsg is Linux's")
@pytest.mark.parametrize("count", [2, SENDMMSG_FROM - 1, SENDMMSG_FROM, 31])
async def test_a_short_batch_goes_by_sendto_and_a_long_one_by_sendmmsg(count: int) -> None:
    # A sendmmsg call costs more than a few sendto calls (udp.SENDMMSG_FROM): a batch shorter than that
    # goes datagram by datagram, a longer one (a frame to 31 stations) in calls of the batch sender; both
    # arrive whole and in order.
    endpoint = await open_udp_endpoint(("127.0.78.105", 0))
    listener = _listeners(1)[0]
    try:
        assert endpoint._batch_send is not None
        calls: list[int] = []
        call = endpoint._batch_send._call

        def counted(fd: int, headers: int, n: int, flags: int) -> int:
            calls.append(n)
            return call(fd, headers, n, flags)

        endpoint._batch_send._call = counted
        out = [(bytes([k]) * 40, listener.getsockname()) for k in range(count)]
        assert endpoint.send_all_nowait(out) == count and endpoint.send_errors == 0
        assert calls == ([count] if count >= SENDMMSG_FROM else [])
        await trio.sleep(0.05)
        assert _heard(listener, count + 1) == [(data, endpoint.address) for data, _ in out]
    finally:
        listener.close()
        endpoint.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sendmmsg is Linux's")
async def test_a_batch_stops_where_the_kernel_takes_no_more_and_returns_how_many_went() -> None:
    # The kernel's "would block" after some datagrams of a call (EAGAIN): send_all_nowait returns how
    # many went, in order, and counts no error; the rest are the caller's to send later.
    import ctypes
    import errno

    endpoint = await open_udp_endpoint(("127.0.78.103", 0))
    try:
        assert endpoint._batch_send is not None
        calls: list[int] = []

        def kernel(fd: int, headers: int, n: int, flags: int) -> int:
            calls.append(n)
            if len(calls) == 1:
                return 3  # (three went, then the socket's buffer was full)
            ctypes.set_errno(errno.EAGAIN)
            return -1

        endpoint._batch_send._call = kernel
        count = SENDMMSG_FROM + 4  # (long enough to go by sendmmsg)
        out = [(bytes([k]) * 20, ("127.0.78.104", 9)) for k in range(count)]
        assert endpoint.send_all_nowait(out) == 3
        assert calls == [count, count - 3] and endpoint.send_errors == 0
    finally:
        endpoint.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="sendmmsg is Linux's")
def test_senders_share_their_threads_buffers_and_another_thread_has_its_own() -> None:
    import threading

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as a, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as b:
        here, again = mmsg.batch_sender(a, 8, RECEIVE_SIZE), mmsg.batch_sender(b, 8, RECEIVE_SIZE)
        there: list[object] = []
        thread = threading.Thread(target=lambda: there.append(mmsg.batch_sender(b, 8, RECEIVE_SIZE)))
        thread.start()
        thread.join(10)
        assert here is not None and again is not None and there and there[0] is not None
        assert here._b is again._b and there[0]._b is not here._b  # type: ignore[attr-defined]


async def test_an_endpoint_forgotten_by_the_readiness_poller_is_watched_again_by_its_next_wait() -> None:
    # UdpEndpoint.forget_readiness takes the socket out of Trio's epoll set (what Node.set_polled does
    # while a frame clock reads the socket itself); the next wait puts it back and still wakes.
    endpoint = await open_udp_endpoint(("127.0.0.1", 0))
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        fd = endpoint._raw.fileno()  # type: ignore[union-attr]
        endpoint.forget_readiness()  # never waited: nothing to take out
        assert not in_readiness_polling(fd)
        sender.sendto(b"a", endpoint.address)
        with trio.fail_after(5):
            await endpoint.wait_readable()
        assert in_readiness_polling(fd)
        assert [d for d, _ in endpoint.receive_batch(8)] == [b"a"]
        endpoint.forget_readiness()
        assert not in_readiness_polling(fd)
        sender.sendto(b"b", endpoint.address)
        with trio.fail_after(5):
            await endpoint.wait_readable()
        assert [d for d, _ in endpoint.receive_batch(8)] == [b"b"]
        assert in_readiness_polling(fd)
    finally:
        sender.close()
        endpoint.close()
