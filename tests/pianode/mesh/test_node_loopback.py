"""Nodes on real UDP sockets, each bound to its own 127.0.0.x: the node paths end to end.

Formation and data (reliable and unreliable), a member's leave, a host killed
without a leave (migration after the station timeout) followed by a newcomer
joining through the new host, a silent member timed out, a join into a full
mesh, and 10% loss plus duplication and reordering injected in the socket layer
(``pianode.sim.faults.FaultInjectingSocketFactory``).  Timeouts are shortened so
the file runs in a few seconds of real time; every wait is bounded.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from pianode.mesh.config import NodeConfig
from pianode.mesh.events import HostChanged, MeshDestroyed, StationLeft
from pianode.sim.faults import FaultInjectingSocketFactory, LinkFaults
from pianode.mesh.node import JoinError, Node, open_node

from node_fixtures import NodeMesh, check_exchange, form_mesh, n_connected, wait_until
from udp_sockets import in_readiness_polling

KEY = bytes.fromhex("0f1e2d3c4b5a69788796a5b4c3d2e1f0")
FAST = {"keepalive_interval": 0.2, "rtt_interval": 0.2, "station_timeout": 1.0, "resend_interval": 0.1}


class Mesh(NodeMesh):
    """Nodes on loopback, node i bound to 127.0.0.(base + i) on a free port, events collected."""

    def __init__(self, nursery: trio.Nursery, config: NodeConfig, base: int) -> None:
        super().__init__(nursery, config)
        self.base = base

    def settings(self, i: int) -> dict[str, object]:
        return {"bind": (f"127.0.0.{self.base + i}", 0)}

    async def start(self, **overrides: object) -> Node:
        node = await super().start(**overrides)
        i = len(self.nodes) - 1
        assert node.address[0] == f"127.0.0.{self.base + i}" and node.address[1] != 0
        return node


@asynccontextmanager
async def loopback_mesh(base: int, version: str = "5.18", **config: object) -> AsyncIterator[Mesh]:
    async with trio.open_nursery() as nursery:
        cfg = NodeConfig(version=version, session_key=KEY, **{**FAST, **config})  # type: ignore[arg-type]
        yield Mesh(nursery, cfg, base)
        nursery.cancel_scope.cancel()


async def form(mesh: Mesh, n: int, timeout: float = 10.0) -> list[Node]:
    nodes, _indexes = await form_mesh(mesh, n, timeout)
    return nodes


def message(src: int, k: int) -> bytes:
    return b"%d/%d/" % (src, k) + bytes(k % 13)


async def exchange(mesh: Mesh, nodes: list[Node], count: int, timeout: float = 20.0) -> None:
    """Each node broadcasts *count* numbered reliable messages; each arrives once and in order."""
    await check_exchange(mesh, nodes, count, message, timeout=timeout, pause=0.002, settle=0.3)


@pytest.mark.parametrize("version", ["5.18", "5.29"])
async def test_four_nodes_form_and_exchange_data(version: str) -> None:
    base = 21 if version == "5.18" else 31
    async with loopback_mesh(base, version) as mesh:
        nodes = await form(mesh, 4)
        assert [x.station_index for x in nodes] == [0, 1, 2, 3]
        assert {x.host_index for x in nodes} == {0}
        rows = [[(s.index, s.constant_id, s.address, s.is_host) for s in x.stations()] for x in nodes]
        assert all(r == rows[0] for r in rows)
        assert sorted(s[2][0] for s in rows[0]) == [f"127.0.0.{base + i}" for i in range(4)]
        await exchange(mesh, nodes, 25)
        for x in nodes:
            await x.broadcast(b"fire and forget " + bytes([x.station_index or 0]), reliable=False)
        await wait_until(lambda: all(len(mesh.data(x, reliable=False)) == 3 for x in nodes), 5)
        for x in nodes:
            assert mesh.data(x, reliable=False) == {
                o.station_index: [b"fire and forget " + bytes([o.station_index or 0])] for o in nodes if o is not x
            }
        await trio.sleep(0.5)  # a few RTT probes
        for x in nodes:
            for s in x.stations():
                if not s.is_self:
                    assert s.rtt is not None and 0 < s.rtt < 0.05
            assert x.statistics()["drops"] == {}


async def test_member_leaves_and_silent_member_times_out() -> None:
    async with loopback_mesh(41) as mesh:
        nodes = await form(mesh, 4)
        with trio.fail_after(3):
            await nodes[3].leave()
        await wait_until(lambda: all(len(x.stations()) == 3 for x in nodes[:3]), 5)
        assert mesh.of(nodes[3], MeshDestroyed) == [MeshDestroyed(reason="left")]
        for x in nodes[:3]:
            assert [(e.station_index, e.reason) for e in mesh.of(x, StationLeft)] == [(3, "left")]
        # Now a member just stops: the keep-alive timeout removes it.
        killed_at = trio.current_time()
        mesh.kill(nodes[2])
        rest = nodes[:2]
        await wait_until(lambda: all(len(x.stations()) == 2 for x in rest), 5)
        assert 0.7 <= trio.current_time() - killed_at <= 2.5
        for x in rest:
            assert [e.station_index for e in mesh.of(x, StationLeft)] == [3, 2]
            assert x.host_index == 0
        await exchange(mesh, rest, 10)


@pytest.mark.parametrize("version", ["5.18", "5.29"])
async def test_killed_host_migrates_and_newcomer_joins_new_host(version: str) -> None:
    base = 51 if version == "5.18" else 61
    async with loopback_mesh(base, version) as mesh:
        nodes = await form(mesh, 4)
        await exchange(mesh, nodes, 5)
        killed_at = trio.current_time()
        mesh.kill(nodes[0])
        rest = nodes[1:]
        await wait_until(lambda: all(x.host_index == 1 and len(x.stations()) == 3 for x in rest), 6)
        assert 0.7 <= trio.current_time() - killed_at <= 3.0
        assert [x.station_index for x in rest] == [1, 2, 3]
        for x in rest:
            assert mesh.of(x, HostChanged) == [HostChanged(old_host_index=0, new_host_index=1)]
        await exchange(mesh, rest, 10)
        newcomer = await mesh.start()
        with trio.fail_after(5):
            assert await newcomer.join(rest[0].address) == 0
        members = [*rest, newcomer]
        await wait_until(lambda: all(n_connected(x) == 3 for x in members), 5)
        assert {x.host_index for x in members} == {1}
        await exchange(mesh, members, 10)


async def test_host_leave_migrates_on_loopback() -> None:
    async with loopback_mesh(71, "5.29") as mesh:
        nodes = await form(mesh, 3)
        with trio.fail_after(3):
            await nodes[0].leave()
        rest = nodes[1:]
        await wait_until(lambda: all(x.host_index == 1 and len(x.stations()) == 2 for x in rest), 3)
        for x in rest:
            assert mesh.of(x, HostChanged) == [HostChanged(old_host_index=0, new_host_index=1)]
            assert [(e.station_index, e.reason) for e in mesh.of(x, StationLeft)] == [(0, "left")]
        await exchange(mesh, rest, 10)


async def test_join_denied_when_full_on_loopback() -> None:
    async with loopback_mesh(81, max_stations=2) as mesh:
        nodes = await form(mesh, 2)
        late = await mesh.start()
        with trio.fail_after(5):
            with pytest.raises(JoinError, match="full"):
                await late.join(nodes[0].address)
        assert all(len(x.stations()) == 2 for x in nodes)


@pytest.mark.parametrize("version", ["5.18", "5.29"])
async def test_loss_duplication_and_reordering_in_the_socket_layer(version: str) -> None:
    faults = LinkFaults(loss=0.1, duplicate=0.1, reorder=0.1, seed=23)
    base = 91 if version == "5.18" else 101
    async with FaultInjectingSocketFactory(faults) as factory:
        factory.install()
        # Station timeout 5 s, not FAST's 1 s: this test is about exactly-once delivery,
        # and a second-long stall of a shared machine at 10 % loss must not drop a station.
        async with loopback_mesh(base, version, station_timeout=5.0) as mesh:
            nodes = await form(mesh, 4, timeout=15)
            assert [x.station_index for x in nodes] == [0, 1, 2, 3]
            assert {x.host_index for x in nodes} == {0}
            await exchange(mesh, nodes, 40, timeout=30)
            stats = factory.statistics()
            assert stats.lost > 0 and stats.duplicated > 0 and stats.reordered > 0
            assert sum(s.lost for x in nodes for s in x.stations()) > 0  # data retransmitted
            assert sum(x.statistics()["drops"].get("replayed", 0) for x in nodes) > 0  # type: ignore[attr-defined]


@asynccontextmanager
async def _host_and_guest(first: int, **config: Any) -> AsyncIterator[tuple[Node, Node]]:
    """A 5.18 host on 127.0.0.<first> and a guest on the next address, connected (*config*: both nodes')."""
    key = bytes(range(16))
    async with open_node(NodeConfig(version="5.18", bind=(f"127.0.0.{first}", 0), session_key=key, **config)) as host, open_node(
        NodeConfig(version="5.18", bind=(f"127.0.0.{first + 1}", 0), session_key=key, **config)
    ) as guest:
        await host.create_mesh()
        await guest.join(host.address)
        assert await guest.wait_connected(1) and await host.wait_connected(1)
        yield host, guest


async def test_event_handler_takes_batches_instead_of_the_channel() -> None:
    from pianode.mesh.events import DataReceived as Data

    async with _host_and_guest(61) as (host, guest):
        batches: list[list[object]] = []
        host.set_event_handler(lambda events: batches.append(list(events)))
        for k in range(5):
            await guest.send(0, b"via handler %d" % k, reliable=True)
        with trio.fail_after(5):
            while sum(isinstance(e, Data) for b in batches for e in b) < 5:
                await trio.sleep(0.01)
        got = [e.data for b in batches for e in b if isinstance(e, Data)]
        assert got == [b"via handler %d" % k for k in range(5)]
        # Nothing of that went through the channel.
        leftovers = []
        while True:
            try:
                leftovers.append(host.events().receive_nowait())
            except trio.WouldBlock:
                break
        assert not any(isinstance(e, Data) for e in leftovers)
        host.set_event_handler(None)
        await guest.send(0, b"via channel", reliable=True)
        with trio.fail_after(5):
            while True:
                event = await host.events().receive()
                if isinstance(event, Data):
                    break
        assert event.data == b"via channel"


async def test_joining_the_nodes_own_address_says_so() -> None:
    with trio.fail_after(10):
        async with open_node(NodeConfig(version="5.18", session_key=KEY, bind=("127.0.0.1", 0), **FAST)) as node:  # type: ignore[arg-type]
            with pytest.raises(JoinError, match=r"^127\.0\.0\.1:\d+ is this node's own address"):
                await node.join(node.address)
            # Refused before anything went out: no answer from "a host that is not one", no drop,
            # and the node is as it was (it can still create a mesh).
            assert node.statistics()["drops"] == {}
            assert await node.create_mesh() == 0


async def test_a_datagram_longer_than_a_node_takes_is_dropped_as_oversized() -> None:
    # A console's Pia receive buffer is 1472 bytes (spec §1.8); a node takes up to MAX_DATAGRAM
    # (2048) and reads one byte more, so a longer datagram (NintendoClients e8f85f5 sends any
    # message in one) is counted as what it is, not cut and then refused as a bad tag.
    from pianode.mesh.config import MAX_DATAGRAM

    async with loopback_mesh(111) as mesh:
        host, guest = await form(mesh, 2)
        sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
        with sock:
            await sock.bind(("127.0.0.115", 0))
            pia = bytes.fromhex("32ab986484") + bytes(range(256)) * 40  # Pia magic, encrypted v4 header
            for size in (MAX_DATAGRAM + 1, 4000, 10000):
                await sock.sendto(pia[:size], host.address)
            await sock.sendto(pia[:MAX_DATAGRAM], host.address)
            await wait_until(lambda: sum(host.statistics()["drops"].values()) >= 4, 5)  # type: ignore[attr-defined]
        assert host.statistics()["drops"] == {"oversized": 3, "bad_tag": 1}
        await exchange(mesh, [host, guest], 3)


async def test_receive_nowait_reads_and_answers_for_a_sleeping_driver_in_the_calling_task() -> None:
    # A frame clock that runs many stations reads their sockets itself (Node.receive_nowait): in one
    # task, with no checkpoint between the sends and the read, what was sent is delivered, in order, and
    # the reliable message is acknowledged (the ack goes out from the same call).
    async with _host_and_guest(63) as (host, guest):
        got: list[tuple[int, bytes, bool]] = []
        host.set_data_handler(lambda index, data, reliable: got.append((index, data, reliable)))
        await trio.sleep(0.1)  # (both drivers asleep in their waits)
        assert host.receive_nowait() == 0  # nothing waits
        frames = [b"frame %d" % k for k in range(5)]
        for frame in frames:
            guest.broadcast_nowait(frame, reliable=False)
        guest.broadcast_nowait(b"reliable", reliable=True)
        assert host.receive_nowait() == 6  # no checkpoint since the sends: the host's driver never ran
        assert got == [(1, frame, False) for frame in frames] + [(1, b"reliable", True)]
        window = guest.session.peers[host.address].data_window  # type: ignore[union-attr]
        with trio.fail_after(5):
            while not window.idle():  # the host's ack, sent by receive_nowait, reached the guest
                await trio.sleep(0.01)
        assert window.statistics().acked == 1


async def test_receive_nowait_reads_while_the_driver_waits_its_turn_at_a_checkpoint() -> None:
    # The driver, woken (for a timer or a user call), yields at a checkpoint before it waits again; a
    # frame clock's read in that moment still reads what waits (it read nothing, and a frame was
    # delivered a tick late, when a timer had just woken the driver).
    async with _host_and_guest(64) as (host, guest):
        got: list[bytes] = []
        host.set_data_handler(lambda index, data, reliable: got.append(data))
        await trio.sleep(0.1)
        for _ in range(100):
            host._wake()  # (what a user call or the deadline does)
            for _ in range(50):
                await trio.lowlevel.checkpoint()
                if not host._waiting:
                    break
            else:
                continue
            break  # the driver ran and yields at its checkpoint, not in its wait
        assert not host._waiting
        guest.broadcast_nowait(b"one", reliable=False)
        guest.broadcast_nowait(b"two", reliable=False)
        assert host.receive_nowait() == 2
        assert got == [b"one", b"two"]


async def test_receive_nowait_from_the_nodes_own_handler_reads_nothing() -> None:
    # The node is reading (its driver's step or a receive_nowait): a receive_nowait from its own data
    # handler does not read in the middle of that batch, and every datagram is delivered once, in order.
    async with _host_and_guest(66) as (host, guest):
        got: list[bytes] = []
        nested: list[int] = []

        def handler(index: int, data: bytes, reliable: bool) -> None:
            got.append(data)
            if data == b"frame 0":
                guest.broadcast_nowait(data + b" answered", reliable=False)  # (now in the host's socket)
            nested.append(host.receive_nowait())

        host.set_data_handler(handler)
        await trio.sleep(0.1)
        frames = [b"frame %d" % k for k in range(5)]
        for frame in frames:
            guest.broadcast_nowait(frame, reliable=False)
        assert host.receive_nowait() == 5  # (the calling task reads)
        with trio.fail_after(5):
            while len(got) < 6:
                await trio.sleep(0.01)  # (the driver reads the answer)
        assert got == [*frames, b"frame 0 answered"] and nested == [0] * 6


class _FullSocket:
    """A node's socket whose kernel takes nothing without blocking while ``refusing``, and whose blocking
    sends wait until ``gate`` is set (the socket is full until then); ``sent`` keeps what went, in order."""

    def __init__(self, node: Node) -> None:
        endpoint = node._endpoint
        assert endpoint is not None
        self.refusing, self.gate = True, trio.Event()
        self.sent: list[bytes] = []
        send_all_nowait, send = endpoint.send_all_nowait, endpoint.send

        def refuse_all(out: list[tuple[bytes, tuple[str, int]]]) -> int:
            return 0 if self.refusing else send_all_nowait(out)

        async def send_after_the_gate(data: bytes, addr: tuple[str, int]) -> None:
            await self.gate.wait()
            self.sent.append(data)
            await send(data, addr)

        endpoint.send_all_nowait = refuse_all  # type: ignore[method-assign]
        endpoint.send = send_after_the_gate  # type: ignore[method-assign]


@pytest.mark.parametrize("third", ["broadcast_nowait", "broadcast"])
async def test_a_frame_sent_while_the_driver_sends_refused_ones_goes_once_behind_them(third: str) -> None:
    # The kernel refused two frames, and the guest's driver sends them when the socket takes them again.
    # A frame sent meanwhile goes out after them, even when the kernel would take it at once
    # (broadcast_nowait), and a task's send (broadcast) waits behind them rather than sending them a
    # second time; broadcast returns once every frame has gone.
    quiet = {"keepalive_interval": 3.0, "rtt_interval": 1.0, "rtt_probe_rate": 1.0}  # (a timer a second)
    async with _host_and_guest(67, **quiet) as (host, guest):
        got: list[bytes] = []
        host.set_data_handler(lambda index, data, reliable: got.append(data))
        await trio.sleep(0.1)
        socket = _FullSocket(guest)
        guest.broadcast_nowait(b"one", reliable=False)
        guest.broadcast_nowait(b"two", reliable=False)
        await trio.sleep(0.05)  # (the guest's driver waits to send "one")
        if third == "broadcast_nowait":
            socket.refusing = False
            guest.broadcast_nowait(b"three", reliable=False)
            socket.gate.set()
        else:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(functools.partial(guest.broadcast, b"three", reliable=False))
                await trio.sleep(0.05)
                socket.gate.set()
            assert not guest._unsent
        with trio.fail_after(5):
            while len(got) < 3:
                await trio.sleep(0.01)
        await trio.sleep(0.05)
        assert got == [b"one", b"two", b"three"]
        # Each datagram went once (with the frames, what the guest's timers sent meanwhile).
        assert len(set(socket.sent)) == len(socket.sent) >= 2 and host.statistics()["drops"] == {}


async def _guest_hears_from(host: Node, guest: Node) -> None:
    """Wait (at most 5 s) until the guest receives the host's next packet."""
    heard = guest.session.peers[host.address].packets_received  # type: ignore[union-attr]
    with trio.fail_after(5):
        while guest.session.peers[host.address].packets_received == heard:  # type: ignore[union-attr]
            await trio.sleep(0.005)


async def test_a_polled_node_leaves_its_socket_to_its_caller_and_still_runs_its_timers() -> None:
    # A frame clock that reads its stations itself each tick (Node.set_polled): the driver leaves the
    # socket alone (out of Trio's readiness polling), what arrives waits for receive_nowait, the
    # session's timers still run, and off again the driver reads what waits and watches the socket.
    quiet = {"keepalive_interval": 3.0, "rtt_interval": 1.0, "rtt_probe_rate": 1.0}  # (a timer a second)
    async with _host_and_guest(65, **quiet) as (host, guest):
        got: list[bytes] = []
        host.set_data_handler(lambda index, data, reliable: got.append(data))
        fd = host._endpoint._raw.fileno()  # type: ignore[union-attr]
        await trio.sleep(0.05)
        assert in_readiness_polling(fd) and not host.polled
        host.set_polled(True)
        await trio.sleep(0.05)
        assert host.polled and not in_readiness_polling(fd)
        # Right after one of the host's timers ran (its keep-alive or RTT probe reached the guest), the
        # next is most of a second away (rtt_probe_rate 1): the host reads nothing meanwhile.
        await _guest_hears_from(host, guest)
        guest.broadcast_nowait(b"one", reliable=False)
        await trio.sleep(0.2)  # (the driver would have read it long since)
        assert got == []
        assert host.receive_nowait() >= 1 and got == [b"one"]  # (with what else the guest sent meanwhile)
        # More than one call reads: the rest is read by the driver, woken for it, not left for the next call.
        from pianode.mesh.node import BATCH, BATCHES_PER_TURN

        burst = [b"burst %d" % k for k in range(BATCH * BATCHES_PER_TURN + 40)]
        for frame in burst:
            guest.broadcast_nowait(frame, reliable=False)
        await trio.sleep(0.1)
        assert host.receive_nowait() == BATCH * BATCHES_PER_TURN
        with trio.fail_after(0.3):  # (at once: the host's next timer is most of a second away)
            while len(got) < 1 + len(burst):
                await trio.sleep(0.01)
        assert got == [b"one", *burst]
        del got[1:]
        # Timers: with nothing to send, the host's keep-alives and RTT probes still reach the guest.
        await _guest_hears_from(host, guest)
        guest.broadcast_nowait(b"two", reliable=False)
        await trio.sleep(0.1)
        host.set_polled(False)
        with trio.fail_after(5):
            while got != [b"one", b"two"]:  # read by the driver, woken for it
                await trio.sleep(0.01)
        guest.broadcast_nowait(b"three", reliable=False)
        with trio.fail_after(5):
            while got != [b"one", b"two", b"three"]:  # and the driver waits on the socket again
                await trio.sleep(0.01)
        assert in_readiness_polling(fd) and not host.polled


async def test_a_polled_station_that_leaves_closes_in_its_callers_read_of_the_last_ack() -> None:
    # A read that queues nothing sends nothing (Node.receive_nowait skips the flush), except while the
    # station leaves: the read of the acks of its leave is what completes it.  The driver, polled with a
    # 1-s tick, would wake for that only 2 s after its next timer.
    async with _host_and_guest(71) as (host, guest):
        guest.set_polled(True, 1.0)
        await trio.sleep(0.05)  # (the driver's wake-up for set_polled)
        session = guest.session
        assert session is not None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(guest.leave, 5.0)
            with trio.fail_after(0.5):
                while not session.closed:
                    guest.receive_nowait()
                    await trio.sleep(0.01)
        assert host.session is not None and not host.session.closed


async def test_a_polled_nodes_timers_run_in_its_callers_reads_and_its_driver_sleeps_while_it_keeps_its_tick() -> None:
    # Node.set_polled(True, tick): the caller's receive_nowait runs the session's due timers (its RTT
    # probes and keep-alives still reach the guest), and the driver, whose wake-up for a timer is two
    # ticks after it is due, never wakes while the caller reads every tick; it does once the caller stops.
    quiet = {"keepalive_interval": 3.0, "rtt_interval": 0.3, "rtt_probe_rate": 4.0}
    async with _host_and_guest(67, **quiet) as (host, guest):
        endpoint = host._endpoint
        assert endpoint is not None
        readers: list[object] = []
        read = endpoint.receive_batch

        def watched(limit: int) -> list[tuple[bytes, tuple[str, int]]]:
            readers.append(trio.lowlevel.current_task())
            return read(limit)

        endpoint.receive_batch = watched  # type: ignore[method-assign]
        tick = 0.02
        host.set_polled(True, tick)
        await trio.sleep(0.05)  # (the driver's wake-up for set_polled)
        readers.clear()
        me = trio.lowlevel.current_task()
        heard = guest.session.peers[host.address].packets_received  # type: ignore[union-attr]
        for _ in range(75):  # 1.5 s of ticks
            host.receive_nowait()
            await trio.sleep(tick)
        assert guest.session.peers[host.address].packets_received > heard  # the host's timers ran
        assert readers and set(readers) == {me}  # in the caller's reads only
        readers.clear()
        with trio.fail_after(5):
            while not readers:  # the caller stopped: the driver wakes for the next timer
                await trio.sleep(0.05)
        assert me not in readers
        with pytest.raises(ValueError):
            host.set_polled(True, -1.0)
