"""A sans-IO harness: N MeshSessions wired together by an in-memory router (no Trio).

Time is explicit; :meth:`MeshHarness.run_until` advances it to the next timer
or delivery, so retransmission, keep-alive and timeout paths run in
microseconds of wall time.  Loss, duplication and reordering are decided per
datagram from a keyed hash (deterministic whatever the order of processing).
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
from collections.abc import Callable

import attrs

from pianode.mesh.config import NodeConfig
from pianode.mesh.events import Event
from pianode.mesh.session import MeshSession


@attrs.define
class Link:
    loss: float = 0.0
    duplicate: float = 0.0
    reorder: float = 0.0
    delay: float = 0.001
    seed: int = 0


def check_group_view(session: MeshSession) -> None:
    """The session's cached group view (members, destination bitmap, footer) must
    equal one worked out afresh: every change of membership has to reset it."""
    cached = session.links.group_view
    if cached is not None:
        assert cached == session.links.work_out_group_view(), "stale group view after a membership change"
    session.links.members()  # cached from here on, so the next change must reset it


def _u(seed: int, tag: bytes, data: bytes, salt: int) -> float:
    h = hashlib.blake2b(tag + data, key=seed.to_bytes(8, "big"), digest_size=8, salt=salt.to_bytes(16, "big")).digest()
    return int.from_bytes(h, "big") / 2**64


class MeshHarness:
    def __init__(self, n: int, *, version: str = "5.18", network: str = "lan", link: Link | None = None,
                 key: bytes = bytes(range(16)), **config: object) -> None:
        self.now = 0.0
        self.link = link or Link()
        self.sessions: list[MeshSession] = []
        for i in range(n):
            cfg = NodeConfig(version=version, network=network, session_key=key, bind=(f"127.0.0.{i + 1}", 49152),
                             seed=1000 + i, **config)  # type: ignore[arg-type]
            self.sessions.append(MeshSession(cfg, (f"127.0.0.{i + 1}", 49152), now=0.0))
        self.by_addr = {s.local_address: s for s in self.sessions}
        group = config.get("group_broadcast")
        #: The broadcast address group packets go to: every other session hears them.
        self.group: tuple[str, int] | None = group  # type: ignore[assignment]
        self.queue: list[tuple[float, int, bytes, tuple[str, int], tuple[str, int]]] = []
        self._seq = itertools.count()
        self.events: dict[int, list[Event]] = {i: [] for i in range(n)}
        self.dead: set[tuple[str, int]] = set()
        self.delivered = 0
        self.dropped = 0
        self.hook: Callable[[bytes, tuple[str, int], tuple[str, int]], bytes | None] | None = None

    def _send_all(self) -> None:
        for s in self.sessions:
            if s.local_address in self.dead:
                continue
            for data, dst in s.datagrams_to_send(self.now):
                self._route(data, s.local_address, dst)
            check_group_view(s)
            while (ev := s.next_event()) is not None:
                self.events[self.sessions.index(s)].append(ev)

    def _route(self, data: bytes, src: tuple[str, int], dst: tuple[str, int]) -> None:
        tag = f"{src}{dst}".encode()
        link = self.link
        salt = next(self._seq) if False else 0
        if link.loss and _u(link.seed, tag, data, 1) < link.loss:
            self.dropped += 1
            return
        copies = 2 if link.duplicate and _u(link.seed, tag, data, 2) < link.duplicate else 1
        for c in range(copies):
            delay = link.delay
            if link.reorder and _u(link.seed, tag, data, 3 + c) < link.reorder:
                delay += 0.05
            heapq.heappush(self.queue, (self.now + delay, next(self._seq), data, src, dst))
        del salt

    def step(self) -> bool:
        """Advance to the next delivery or timer; False when nothing is left before `limit`."""
        self._send_all()
        timers = [t for s in self.sessions if s.local_address not in self.dead and (t := s.get_timer()) is not None]
        next_t = min(timers) if timers else None
        if self.queue and (next_t is None or self.queue[0][0] <= next_t):
            t, _, data, src, dst = heapq.heappop(self.queue)
            self.now = max(self.now, t)
            if dst not in self.dead and src not in self.dead:
                if self.hook is not None:
                    data = self.hook(data, src, dst)  # type: ignore[assignment]
                    if data is None:
                        return True
                self.deliver(data, src, dst)
            return True
        if next_t is None:
            return False
        self.now = max(self.now, next_t)
        for s in self.sessions:
            if s.local_address not in self.dead:
                t = s.get_timer()
                if t is not None and t <= self.now:
                    s.handle_timer(self.now)
                    check_group_view(s)
        return True

    def deliver(self, data: bytes, src: tuple[str, int], dst: tuple[str, int]) -> None:
        """Hand a datagram to its session, or a group packet to every other live session."""
        if dst == self.group:
            for target in self.sessions:
                if target.local_address != src and target.local_address not in self.dead:
                    target.receive_group_datagram(data, src, self.now)
                    check_group_view(target)
                    self.delivered += 1
            return
        target = self.by_addr.get(dst)
        if target is not None:
            target.receive_datagram(data, src, self.now)
            check_group_view(target)
            self.delivered += 1

    def run_until(self, predicate: Callable[[], bool], timeout: float, max_steps: int = 2_000_000) -> bool:
        end = self.now + timeout
        for _ in range(max_steps):
            if predicate():
                self._send_all()
                return True
            if self.now > end or not self.step():
                return predicate()
        raise AssertionError("harness step limit reached")

    def next_time(self) -> float | None:
        """When the next delivery or timer is due (None: nothing left)."""
        self._send_all()
        times = [t for s in self.sessions if s.local_address not in self.dead and (t := s.get_timer()) is not None]
        if self.queue:
            times.append(self.queue[0][0])
        return min(times) if times else None

    def run_to(self, when: float) -> None:
        """Run everything due up to *when*, then stop the clock exactly there."""
        while (t := self.next_time()) is not None and t <= when:
            self.step()
        self.now = max(self.now, when)

    def run_for(self, seconds: float) -> None:
        end = self.now + seconds
        self.run_until(lambda: self.now >= end, seconds + 1)

    def form(self, timeout: float = 30.0) -> bool:
        self.sessions[0].create(self.now)
        for s in self.sessions[1:]:
            s.join(self.sessions[0].local_address, self.now)
        return self.run_until(lambda: self.formed(), timeout)

    def formed(self, sessions: list[MeshSession] | None = None) -> bool:
        group = sessions if sessions is not None else self.sessions
        want = len(group) - 1
        return all(
            s.joined and sum(1 for row in s.stations() if row.state == "connected") == want for s in group
        )


STALL_LIMIT = 1000  # timer steps at one instant before the harness calls it a livelock


class BatchHarness(MeshHarness):
    """The harness with every datagram due at the same instant delivered in one step.

    The base class hands out one datagram per step and asks every session for
    output after each, which makes a 32-station formation take tens of seconds.
    Fates (loss, duplication, reordering) are decided when a datagram is routed,
    so batching the deliveries changes none of them.
    """

    _stalled = 0

    def step(self) -> bool:
        self._send_all()
        live = [s for s in self.sessions if s.local_address not in self.dead]
        timers = [t for s in live if (t := s.get_timer()) is not None]
        next_t = min(timers) if timers else None
        if self.queue and (next_t is None or self.queue[0][0] <= next_t):
            due = self.queue[0][0]
            self.now = max(self.now, due)
            while self.queue and self.queue[0][0] <= due:
                _, _, data, src, dst = heapq.heappop(self.queue)
                if dst in self.dead or src in self.dead:
                    continue
                if self.hook is not None:
                    hooked = self.hook(data, src, dst)
                    if hooked is None:
                        continue
                    data = hooked
                self.deliver(data, src, dst)
            return True
        if next_t is None:
            return False
        if next_t <= self.now:
            self._stalled += 1
            if self._stalled > STALL_LIMIT:
                raise AssertionError(f"a session's timer stays due at t={self.now!r} however often it is handled")
        else:
            self._stalled = 0
        self.now = max(self.now, next_t)
        for s in live:
            t = s.get_timer()
            if t is not None and t <= self.now:
                s.handle_timer(self.now)
        return True


def connected(s: MeshSession) -> int:
    """Stations this session sees in its table and is connected to."""
    return sum(1 for row in s.stations() if row.state == "connected")


def all_connected(group: list[MeshSession]) -> bool:
    want = len(group) - 1
    return all(s.joined and not s.closed and connected(s) == want for s in group)


def form(h: MeshHarness, members: list[int] | None = None, timeout: float = 30.0) -> list[MeshSession]:
    """Session members[0] creates, the others join it at once; returns the group once formed."""
    idx = members if members is not None else list(range(len(h.sessions)))
    group = [h.sessions[i] for i in idx]
    group[0].create(h.now)
    for s in group[1:]:
        s.join(group[0].local_address, h.now)
    assert h.run_until(lambda: all_connected(group), timeout), [connected(s) for s in group]
    return group


def recorder(
    into: list[bytes], src: tuple[str, int], dst: tuple[str, int] | None = None
) -> Callable[[bytes, tuple[str, int], tuple[str, int]], bytes]:
    """A hook (``h.hook``) that keeps a copy of each datagram from *src* (to *dst*, when given) in *into*
    and lets it through: what an attacker on the path records, to replay later."""

    def hook(data: bytes, s: tuple[str, int], d: tuple[str, int]) -> bytes:
        if s == src and (dst is None or d == dst):
            into.append(data)
        return data

    return hook


def events_of(h: MeshHarness, i: int, kind: type) -> list:
    return [e for e in h.events[i] if isinstance(e, kind)]
