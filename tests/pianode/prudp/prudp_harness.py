"""A sans-IO link between PRUDP endpoints: explicit time, deterministic loss, reordering and duplication.

Each loss/delay decision is a pure function of (seed, sender, receiver, how
many datagrams the sender had sent to that receiver before), not of the bytes
(session ids, keys and IVs are random), so runs are reproducible and a
retransmitted datagram gets a fresh decision (../shared/STYLE.md practice 16).
"""

from __future__ import annotations

import hashlib
import heapq
import itertools
from collections import Counter
from collections.abc import Callable

import attrs

from pianode.prudp import EndpointCore, Settings
from protocols.prudp.rendezvous import generate_key
from pianode.prudp.events import Address, Event

Hook = Callable[[bytes, Address, Address], bytes | None]


@attrs.define
class Link:
    loss: float = 0.0
    reorder: float = 0.0  # probability of an extra random delay
    duplicate: float = 0.0
    latency: float = 0.005
    seed: int = 0
    down: bool = False


class Net:
    def __init__(self, link: Link | None = None) -> None:
        self.link = link or Link()
        self.nodes: dict[Address, EndpointCore] = {}
        self.events: dict[Address, list[Event]] = {}
        self.now = 0.0
        self._queue: list[tuple[float, int, bytes, Address, Address]] = []
        self._order = itertools.count()
        self._count: Counter[tuple[Address, Address]] = Counter()
        self.sent: list[tuple[float, Address, bytes]] = []
        self.delivered = 0
        self.hook: Hook | None = None  # may rewrite or drop (return None) a datagram in flight
        self.on_event: Callable[[Address, Event], None] | None = None

    def add(self, address: Address, core: EndpointCore) -> EndpointCore:
        self.nodes[address] = core
        self.events[address] = []
        return core

    def _rand(self, key: str, salt: str) -> float:
        h = hashlib.sha256(f"{self.link.seed}|{salt}|{key}".encode()).digest()
        return int.from_bytes(h[:8], "big") / 2**64

    def _flush(self) -> None:
        for src, core in self.nodes.items():
            for data, dst in core.datagrams_to_send(self.now):
                self.sent.append((self.now, src, data))
                key = f"{src}|{dst}|{self._count[(src, dst)]}"
                self._count[(src, dst)] += 1
                if self.link.down or self._rand(key, "loss") < self.link.loss:
                    continue
                copies = 2 if self._rand(key, "dup") < self.link.duplicate else 1
                for c in range(copies):
                    delay = self.link.latency
                    if self._rand(key, f"reorder{c}") < self.link.reorder:
                        delay += 0.05 * self._rand(key, f"delay{c}")
                    heapq.heappush(self._queue, (self.now + delay, next(self._order), data, src, dst))
            while (e := core.next_event()) is not None:
                self.events[src].append(e)
                if self.on_event is not None:
                    self.on_event(src, e)

    def step(self) -> bool:
        """Advance to the next arrival or timer; False when nothing is left to do."""
        self._flush()
        timers = [t for c in self.nodes.values() if (t := c.get_timer()) is not None]
        candidates = timers + ([self._queue[0][0]] if self._queue else [])
        if not candidates:
            return False
        self.now = max(self.now, min(candidates))
        while self._queue and self._queue[0][0] <= self.now:
            _, _, data, src, dst = heapq.heappop(self._queue)
            if self.hook is not None:
                rewritten = self.hook(data, src, dst)
                if rewritten is None:
                    continue
                data = rewritten
            if dst in self.nodes:
                self.nodes[dst].receive_datagram(data, src, self.now)
                self.delivered += 1
        for c in self.nodes.values():
            t = c.get_timer()
            if t is not None and t <= self.now:
                c.handle_timer(self.now)
        self._flush()
        return True

    def run_until(self, predicate: Callable[[], bool], *, max_time: float = 600.0, max_steps: int = 2_000_000) -> None:
        for _ in range(max_steps):
            if predicate():
                return
            if self.now > max_time or not self.step():
                break
        if not predicate():
            raise AssertionError(f"condition not reached by t={self.now:.2f}")


# The endpoints and settings the connection tests share: a host and a client on loopback, every variant,
# and one Rendez-Vous certificate (its key exchange), the host's private and the client's public.
HOST = ("127.0.0.1", 5000)
CLIENT = ("127.0.0.2", 6000)
VARIANTS = ["nintendo-v0", "nintendo-v0-friends", "nintendo-v1", "quazal-v0", "rendezvous"]
CERT = generate_key()


def make_settings(variant: str, *, host: bool, **kw: object) -> Settings:
    cert = CERT if host else CERT.public_key()
    return Settings(variant, access_key="12345678", certificate=cert, **kw)  # type: ignore[arg-type]
