"""Real :class:`pianode.mesh.node.Node` objects on the simulated network, under an autojump MockClock.

Join, data, leave, host migration (leave and silence), keep-alive timeout,
denial and retransmission, each with every wait under ``trio.fail_after`` on
the virtual clock.  A wall-clock watchdog turns a node that spins without
letting virtual time advance (which ``fail_after`` cannot see) into a failure.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
import trio
import trio.testing

from pianode.mesh.config import NodeConfig
from pianode.mesh.events import HostChanged, MeshDestroyed, MeshJoined, StationJoined, StationLeft
from pianode.sim.faults import CLEAN, LinkFaults
from pianode.sim.netsim import SimulatedNetwork
from pianode.mesh.node import JoinError, Node
from pianode.mesh.reliable import SendBufferFull

from node_fixtures import NodeMesh, check_exchange, form_mesh, n_connected, wait_until

KEY = bytes.fromhex("00112233445566778899aabbccddeeff")
PORT = 49152
TIMEOUT = 5.0  # NodeConfig.station_timeout default
WALL_LIMIT = 20.0  # real seconds any one test may take


@asynccontextmanager
async def wall_clock_limit(seconds: float = WALL_LIMIT) -> AsyncIterator[None]:
    """Cancel the body if it takes *seconds* of real time (a spin the virtual clock hides)."""
    token = trio.lowlevel.current_trio_token()
    done = threading.Event()
    scope = trio.CancelScope()

    def watchdog() -> None:
        if not done.wait(seconds):
            try:
                trio.from_thread.run_sync(scope.cancel, trio_token=token)
            except trio.RunFinishedError:
                pass

    thread = threading.Thread(target=watchdog, daemon=True)
    thread.start()
    try:
        with scope:
            yield
    finally:
        done.set()
        thread.join()
    if scope.cancelled_caught:
        pytest.fail(f"the test used more than {seconds} s of real time: a node busy-loops without advancing the clock")


class Mesh(NodeMesh):
    """Nodes on one simulated network, each on its own 127.0.0.x, with their events collected."""

    def __init__(self, nursery: trio.Nursery, net: SimulatedNetwork, config: NodeConfig) -> None:
        super().__init__(nursery, config)
        self.net = net

    def settings(self, i: int) -> dict[str, object]:
        return {"bind": (f"127.0.0.{i + 1}", PORT), "seed": 100 + i}


@asynccontextmanager
async def simulated_mesh(
    version: str = "5.18", network: str = "lan", faults: LinkFaults = CLEAN, **config: object
) -> AsyncIterator[Mesh]:
    async with wall_clock_limit():
        async with SimulatedNetwork(faults) as net:
            net.install()
            async with trio.open_nursery() as nursery:
                cfg = NodeConfig(version=version, network=network, session_key=KEY, **config)  # type: ignore[arg-type]
                yield Mesh(nursery, net, cfg)
                nursery.cancel_scope.cancel()


def by_index(nodes: list[Node], index: int) -> Node:
    return next(x for x in nodes if x.station_index == index)


async def form(mesh: Mesh, n: int, timeout: float = 30.0) -> list[Node]:
    nodes, indexes = await form_mesh(mesh, n, timeout)
    assert indexes == list(range(1, n))
    return nodes


def message(src: int, k: int) -> bytes:
    return b"%d:%d:" % (src, k) + bytes(k % 11)


async def exchange(mesh: Mesh, nodes: list[Node], count: int, timeout: float = 60.0) -> None:
    """Each node broadcasts *count* numbered reliable messages; each arrives once, in order."""
    await check_exchange(mesh, nodes, count, message, timeout=timeout, pause=0.005, settle=1.0)


# ---------------------------------------------------------------- tests


@pytest.mark.parametrize("version", ["5.18", "5.29"])
@pytest.mark.parametrize("network", ["lan", "ldn", "nex"])
async def test_mesh_forms_and_exchanges_data(version: str, network: str, autojump_clock: trio.testing.MockClock) -> None:
    async with simulated_mesh(version, network) as mesh:
        nodes = await form(mesh, 4)
        assert sorted(x.station_index for x in nodes) == [0, 1, 2, 3]
        assert {x.host_index for x in nodes} == {0}
        rows = [[(s.index, s.constant_id, s.address, s.is_host) for s in x.stations()] for x in nodes]
        assert all(r == rows[0] for r in rows)
        assert {s[2] for s in rows[0]} == {x.address for x in nodes}
        for x in nodes:
            joined = mesh.of(x, MeshJoined)
            assert joined == [MeshJoined(station_index=x.station_index, host_index=0)]  # type: ignore[arg-type]
            assert sorted(e.station_index for e in mesh.of(x, StationJoined)) == sorted(
                o.station_index for o in nodes if o is not x
            )
        # Unreliable: one each way on a clean network.
        for x in nodes:
            await x.send((x.station_index + 1) % 4, b"ping", reliable=False)  # type: ignore[operator]
        await exchange(mesh, nodes, 10)
        for x in nodes:
            assert mesh.data(x, reliable=False) == {(x.station_index - 1) % 4: [b"ping"]}  # type: ignore[operator]
        # RTT: the simulated network has no latency, so samples exist and are tiny.
        await trio.sleep(3.0)
        for x in nodes:
            for s in x.stations():
                if not s.is_self:
                    assert s.rtt is not None and 0.0 <= s.rtt < 0.01
                    assert s.packets_sent > 0 and s.packets_received > 0
            stats = x.statistics()
            assert stats["station_index"] == x.station_index and stats["host_index"] == 0
            assert stats["drops"] == {}


async def test_join_denied_when_mesh_full(autojump_clock: trio.testing.MockClock) -> None:
    async with simulated_mesh(max_stations=3) as mesh:
        nodes = await form(mesh, 3)
        late = await mesh.start()
        with trio.fail_after(30):
            with pytest.raises(JoinError, match="full"):
                await late.join(nodes[0].address)
        await trio.sleep(0.05)
        destroyed = mesh.of(late, MeshDestroyed)
        assert len(destroyed) == 1 and "full" in destroyed[0].reason
        assert late.station_index is None
        assert all(len(x.stations()) == 3 for x in nodes)
        await exchange(mesh, nodes, 2)


async def test_join_to_nobody_fails_after_join_timeout(autojump_clock: trio.testing.MockClock) -> None:
    async with simulated_mesh(join_timeout=3.0) as mesh:
        lonely = await mesh.start()
        started = trio.current_time()
        with trio.fail_after(30):
            with pytest.raises(JoinError):
                await lonely.join(("127.0.0.200", PORT))
        assert 3.0 <= trio.current_time() - started <= 5.0


@pytest.mark.parametrize("version", ["5.18", "5.29"])
async def test_member_leave(version: str, autojump_clock: trio.testing.MockClock) -> None:
    async with simulated_mesh(version) as mesh:
        nodes = await form(mesh, 4)
        leaver = by_index(nodes, 2)
        with trio.fail_after(5):
            await leaver.leave()
        await wait_until(lambda: leaver.session is not None and leaver.session.closed, 1)
        assert mesh.of(leaver, MeshDestroyed) == [MeshDestroyed(reason="left")]
        rest = [x for x in nodes if x is not leaver]
        await wait_until(lambda: all(len(x.stations()) == 3 for x in rest), 10)
        for x in rest:
            assert [(e.station_index, e.reason) for e in mesh.of(x, StationLeft)] == [(2, "left")]
            assert [s.index for s in x.stations()] == [0, 1, 3]
            assert x.host_index == 0
        await exchange(mesh, rest, 5)


@pytest.mark.parametrize("version", ["5.18", "5.29"])
async def test_host_leave_then_newcomer_joins_new_host(version: str, autojump_clock: trio.testing.MockClock) -> None:
    async with simulated_mesh(version) as mesh:
        nodes = await form(mesh, 4)
        with trio.fail_after(5):
            await nodes[0].leave()
        rest = nodes[1:]
        await wait_until(lambda: all(x.host_index == 1 and len(x.stations()) == 3 for x in rest), 10)
        for x in rest:
            assert mesh.of(x, HostChanged) == [HostChanged(old_host_index=0, new_host_index=1)]
        assert [x.station_index for x in rest] == [1, 2, 3]
        await exchange(mesh, rest, 5)
        newcomer = await mesh.start()
        with trio.fail_after(15):
            assert await newcomer.join(rest[0].address) == 0  # lowest free index
        members = [*rest, newcomer]
        await wait_until(lambda: all(n_connected(x) == 3 for x in members), 15)
        assert {x.host_index for x in members} == {1}
        await exchange(mesh, members, 5)


@pytest.mark.parametrize("version", ["5.18", "5.29"])
async def test_killed_host_migrates_after_station_timeout(version: str, autojump_clock: trio.testing.MockClock) -> None:
    async with simulated_mesh(version) as mesh:
        nodes = await form(mesh, 4)
        await trio.sleep(1.3)
        killed_at = trio.current_time()
        mesh.kill(nodes[0])
        rest = nodes[1:]
        await wait_until(lambda: all(x.host_index == 1 for x in rest), 3 * TIMEOUT)
        assert TIMEOUT - 1.0 <= trio.current_time() - killed_at <= TIMEOUT + 1.5
        for x in rest:
            assert mesh.of(x, HostChanged) == [HostChanged(old_host_index=0, new_host_index=1)]
            # Timed out itself, or removed by the new host's update that came first.
            assert [e.station_index for e in mesh.of(x, StationLeft)] == [0]
            assert mesh.of(x, StationLeft)[0].reason.startswith(("silent for", "removed by the host"))
        await wait_until(lambda: all(len(x.stations()) == 3 for x in rest), 5)
        assert [x.station_index for x in rest] == [1, 2, 3]
        await exchange(mesh, rest, 5)


@pytest.mark.parametrize("version", ["5.18", "5.29"])
async def test_keepalive_and_timeout_of_a_silent_member(version: str, autojump_clock: trio.testing.MockClock) -> None:
    async with simulated_mesh(version) as mesh:
        nodes = await form(mesh, 3)
        await trio.sleep(3 * TIMEOUT)  # quiet: only keep-alives and RTT probes
        assert all(n_connected(x) == 2 for x in nodes)
        assert not any(mesh.of(x, StationLeft) for x in nodes)
        for x in nodes:
            counters = x.statistics()["counters"]
            # Each peer fills every second of silence: with a keep-alive, or an RTT
            # probe that happens to go out then (keep-alives only fill silence).
            assert isinstance(counters, dict) and counters["keepalives_received"] > 0
            assert counters["keepalives_received"] + counters["rtt_requests_received"] >= 2 * (3 * TIMEOUT - 2)
        silenced = trio.current_time()
        mesh.net.isolate(nodes[2].address[0])
        rest = nodes[:2]
        await wait_until(lambda: all(len(x.stations()) == 2 for x in rest), 3 * TIMEOUT)
        assert TIMEOUT - 1.0 <= trio.current_time() - silenced <= TIMEOUT + 1.5
        for x in rest:
            assert [e.station_index for e in mesh.of(x, StationLeft)] == [2]
            assert x.host_index == 0
        await exchange(mesh, rest, 3)


@pytest.mark.parametrize("version", ["5.18", "5.29"])
async def test_retransmission_under_loss_duplication_and_reordering(
    version: str, autojump_clock: trio.testing.MockClock
) -> None:
    faults = LinkFaults(loss=0.2, duplicate=0.1, reorder=0.1, seed=11)
    async with simulated_mesh(version, faults=faults) as mesh:
        nodes = await form(mesh, 4, timeout=60)
        assert sorted(x.station_index for x in nodes) == [0, 1, 2, 3]
        assert {x.host_index for x in nodes} == {0}
        await exchange(mesh, nodes, 30, timeout=120)
        stats = mesh.net.statistics().as_dict()
        assert stats["lost"] > 0 and stats["duplicated"] > 0
        # The lost data segments were sent again, and duplicates were refused.
        assert sum(s.lost for x in nodes for s in x.stations()) > 0
        assert sum(x.statistics()["drops"].get("replayed", 0) for x in nodes) > 0  # type: ignore[attr-defined]


@pytest.mark.parametrize("version", ["5.18", "5.29"])
async def test_join_racing_the_host_leave_converges(version: str, autojump_clock: trio.testing.MockClock) -> None:
    async with simulated_mesh(version, faults=LinkFaults(delay=0.02)) as mesh:
        nodes = await form(mesh, 3)
        newcomer = await mesh.start()
        outcome: list[object] = []

        async def join() -> None:
            try:
                outcome.append(await newcomer.join(nodes[0].address))
            except JoinError as exc:
                outcome.append(exc)

        mesh.nursery.start_soon(join)
        # The host accepts the newcomer (it is in the host's table), then leaves at once.
        await wait_until(lambda: len(nodes[0].stations()) == 4, 5)
        with trio.fail_after(5):
            await nodes[0].leave()
        rest = nodes[1:]
        await wait_until(lambda: bool(outcome) and all(x.host_index == 1 for x in rest), 15)
        await trio.sleep(TIMEOUT + 5)
        if isinstance(outcome[0], int) and not newcomer.session.closed:  # type: ignore[union-attr]
            members = [*rest, newcomer]
            assert all(n_connected(x) == 2 for x in members)
            assert {x.host_index for x in members} == {1}
            rows = [[(s.index, s.address, s.is_host) for s in x.stations()] for x in members]
            assert all(r == rows[0] for r in rows)
        else:
            assert all(len(x.stations()) == 2 for x in rest)


async def test_reliable_broadcast_is_all_or_nothing_when_a_window_fills(autojump_clock: trio.testing.MockClock) -> None:
    async with simulated_mesh() as mesh:
        nodes = await form(mesh, 3)
        sender, awake, unplugged = nodes
        mesh.net.isolate(unplugged.address[0])  # stops acknowledging; its window toward it fills
        sent = 0
        with trio.fail_after(5):
            with pytest.raises(SendBufferFull):
                for k in range(2000):
                    await sender.broadcast(b"n%d" % k)
                    sent += 1
        assert sent > 0
        # The refused broadcast reached nobody; everything before it reaches everyone,
        # the unplugged station too once it is back within the station timeout.
        mesh.net.restore(unplugged.address[0])
        want = [b"n%d" % k for k in range(sent)]
        await wait_until(lambda: all(len(mesh.data(x).get(0, [])) >= sent for x in (awake, unplugged)), 20)
        await trio.sleep(1.0)
        assert mesh.data(awake) == {0: want}
        assert mesh.data(unplugged) == {0: want}
        assert not mesh.of(unplugged, StationLeft) and not mesh.of(sender, StationLeft)


def refuse_sends(node: Node, count: int) -> list[int]:
    """Have the kernel refuse *node*'s next *count* non-blocking sends (a full socket
    buffer); the list returned holds how many it refused so far."""
    endpoint = node._endpoint
    assert endpoint is not None
    real_send_nowait = endpoint.send_nowait
    refusals = [0]

    def full_kernel(data: bytes, addr: tuple[str, int]) -> bool:
        if refusals[0] < count:
            refusals[0] += 1
            return False
        return real_send_nowait(data, addr)

    endpoint.send_nowait = full_kernel  # type: ignore[method-assign]
    return refusals


@pytest.mark.parametrize("version", ["5.18", "5.29"])
async def test_broadcast_nowait_never_yields_and_keeps_what_the_kernel_refuses(
    version: str, autojump_clock: trio.testing.MockClock
) -> None:
    """broadcast_nowait is not a checkpoint; datagrams the kernel refuses are
    sent later by the node's task, in order, so nothing is lost or reordered."""
    async with simulated_mesh(version) as mesh:
        nodes = await form(mesh, 3)
        sender = nodes[0]
        refusals = refuse_sends(sender, 25)
        with trio.CancelScope() as scope:
            scope.cancel()  # any checkpoint below would raise Cancelled
            for k in range(20):
                assert sender.broadcast_nowait(b"r%d" % k) == 2
                assert sender.broadcast_nowait(b"u%d" % k, reliable=False) == 2
        assert not scope.cancelled_caught
        # The first refusal parks that datagram and every later one (order kept) for the node's task.
        assert refusals == [1] and len(sender._unsent) >= 20
        want = [b"r%d" % k for k in range(20)]
        await wait_until(lambda: all(mesh.data(x).get(0) == want for x in nodes[1:]), 10)
        await trio.sleep(0.5)
        for x in nodes[1:]:
            assert mesh.data(x) == {0: want}
            # Unreliable data is not retransmitted: the refused ones still went out, in order.
            assert mesh.data(x, reliable=False) == {0: [b"u%d" % k for k in range(20)]}
        assert sender._unsent == []


@pytest.mark.parametrize("first_refused", ["unreliable", "reliable"])
async def test_send_nowait_keeps_order_behind_what_the_kernel_refused(
    first_refused: str, autojump_clock: trio.testing.MockClock
) -> None:
    """An unreliable message sealed at once (no queue) still goes behind
    datagrams the kernel refused before it; after the refusals clear, it goes
    straight out again."""
    async with simulated_mesh("5.18") as mesh:
        nodes = await form(mesh, 3)
        sender, receiver = nodes[0], nodes[1]
        target = receiver.station_index
        assert target is not None
        refusals = refuse_sends(sender, 1)
        with trio.CancelScope() as scope:
            scope.cancel()  # any checkpoint below would raise Cancelled
            for k in range(10):
                if first_refused == "reliable":
                    sender.send_nowait(target, b"r%d" % k)
                sender.send_nowait(target, b"u%d" % k, reliable=False)
                if first_refused == "unreliable":
                    sender.send_nowait(target, b"r%d" % k)
        assert not scope.cancelled_caught
        # Everything after the refusal waits behind it for the node's task, the kernel's room notwithstanding.
        assert refusals == [1] and len(sender._unsent) >= 19
        await wait_until(lambda: sender._unsent == [] and len(mesh.data(receiver).get(0, [])) == 10, 10)
        sender.send_nowait(target, b"u-after", reliable=False)
        assert sender._unsent == []
        await trio.sleep(0.5)
        assert mesh.data(receiver) == {0: [b"r%d" % k for k in range(10)]}
        assert mesh.data(receiver, reliable=False) == {0: [b"u%d" % k for k in range(10)] + [b"u-after"]}
        assert mesh.data(nodes[2]) == {} and mesh.data(nodes[2], reliable=False) == {}


@pytest.mark.parametrize("version", ["5.18", "5.29"])
async def test_data_handler_takes_the_data_instead_of_events(
    version: str, autojump_clock: trio.testing.MockClock
) -> None:
    """With a data handler, every message reaches it once, in order, and no
    DataReceived event is made; other events still flow; None goes back to events."""
    async with simulated_mesh(version) as mesh:
        nodes = await form(mesh, 3)
        sender, receiver = nodes[0], nodes[1]
        got: list[tuple[int, bytes, bool]] = []
        receiver.set_data_handler(lambda index, data, reliable: got.append((index, data, reliable)))
        for k in range(10):
            await sender.broadcast(b"r%d" % k)
            await sender.broadcast(b"u%d" % k, reliable=False)
        await wait_until(lambda: len(got) == 20, 10)
        assert [d for _, d, r in got if r] == [b"r%d" % k for k in range(10)]
        assert [d for _, d, r in got if not r] == [b"u%d" % k for k in range(10)]
        assert {i for i, _, _ in got} == {sender.station_index}
        assert mesh.data(receiver) == {} and mesh.data(receiver, reliable=False) == {}
        assert mesh.data(nodes[2]) == {0: [b"r%d" % k for k in range(10)]}  # no handler: events as before
        receiver.set_data_handler(None)
        await sender.broadcast(b"after")
        await wait_until(lambda: mesh.data(receiver).get(0) == [b"after"], 10)
        assert len(got) == 20
        # A newcomer's StationJoined still arrives as an event at a node with a handler.
        receiver.set_data_handler(lambda index, data, reliable: got.append((index, data, reliable)))
        newcomer = await mesh.start()
        await newcomer.join(sender.address)
        await wait_until(lambda: any(e.station_index == newcomer.station_index for e in mesh.of(receiver, StationJoined)), 10)
        await newcomer.broadcast(b"hello")
        await wait_until(lambda: (newcomer.station_index, b"hello", True) in got, 10)


@pytest.mark.parametrize("version", ["5.18", "5.29"])
async def test_an_earlier_timer_moves_the_sleeping_drivers_deadline(
    version: str, autojump_clock: trio.testing.MockClock
) -> None:
    """The driver sleeps until the session's next timer, seconds away between
    keep-alives.  A send that sets an earlier timer (the retransmission of a
    lost reliable message) must bring its wake-up forward, without a wake-up
    by cancellation: the message arrives after a retransmission delay, not at
    the next keep-alive."""
    quiet = {"keepalive_interval": 3.0, "rtt_interval": 3.0, "station_timeout": 20.0}
    async with simulated_mesh(version, **quiet) as mesh:
        sender, receiver = await form(mesh, 2)
        await trio.sleep(4.0)  # handshake retransmissions and first probes are over
        assert sender._waiting
        asleep_until = sender._scope.deadline
        real_route = mesh.net._route
        dropped: list[bytes] = []

        def lose_the_next_one(sock: object, data: bytes, ip: str, port: int) -> None:
            if not dropped and (ip, port) == receiver.address:
                dropped.append(data)
                return
            real_route(sock, data, ip, port)  # type: ignore[arg-type]

        mesh.net._route = lose_the_next_one  # type: ignore[method-assign]
        sent_at = trio.current_time()
        await sender.send(receiver.station_index or 0, b"lost once")
        assert dropped, "the first copy went nowhere"
        retransmit_at = sender.session.get_timer()  # type: ignore[union-attr]
        assert retransmit_at is not None and retransmit_at < asleep_until - 0.5
        assert sender._waiting and sender._scope.deadline == retransmit_at  # moved, not cancelled
        await wait_until(lambda: mesh.data(receiver).get(sender.station_index or 0) == [b"lost once"], 10)
        assert trio.current_time() - sent_at < (asleep_until - sent_at) / 2


@pytest.mark.parametrize("version", ["5.18", "5.29"])
async def test_a_data_handler_answers_with_send_nowait(version: str, autojump_clock: trio.testing.MockClock) -> None:
    """send_nowait is not a checkpoint, so a data handler (run inside the node's task)
    can answer the station it heard from; the answers arrive in order, reliable or not."""
    async with simulated_mesh(version) as mesh:
        nodes = await form(mesh, 3)
        asker, echo = nodes[0], nodes[1]

        def answer(index: int, data: bytes, reliable: bool) -> None:
            with trio.CancelScope() as scope:
                scope.cancel()  # a checkpoint here would raise Cancelled
                echo.send_nowait(index, b"re:" + data, reliable=reliable)
            assert not scope.cancelled_caught

        echo.set_data_handler(answer)
        for k in range(10):
            await asker.send(echo.station_index or 0, b"q%d" % k)
            await asker.send(echo.station_index or 0, b"u%d" % k, reliable=False)
        await wait_until(lambda: len(mesh.data(asker).get(echo.station_index or 0, [])) == 10, 10)
        assert mesh.data(asker) == {echo.station_index: [b"re:q%d" % k for k in range(10)]}
        assert mesh.data(asker, reliable=False) == {echo.station_index: [b"re:u%d" % k for k in range(10)]}
        assert mesh.data(nodes[2]) == {}  # answered to the asker only
        with pytest.raises(KeyError):
            echo.send_nowait(99, b"nobody")
