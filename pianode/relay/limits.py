"""Limits of the relay hub: token buckets (sans-IO: the caller gives ``now``) and the bulk bytes it holds.

A bucket holds up to *burst* tokens and regains *rate* per second; an action
costing *n* tokens may go when the bucket holds *n*.  A new bucket is full.

A bulk frame the hub forwards is one :class:`SharedFrame`, held by every
member's queue it goes to (a broadcast is not copied per member); the
:class:`BulkLedger` charges its size to its sender from when it is made until
the last queue is done with it, and refuses one that would take the sender
over its share, or the hub over its total.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Hashable

import attrs

__all__ = ["BulkLedger", "RateLimits", "SharedFrame", "TokenBucket"]


@attrs.define
class TokenBucket:
    rate: float  # tokens regained per second
    burst: float  # most tokens held
    tokens: float = attrs.field(default=attrs.Factory(lambda self: self.burst, takes_self=True))
    stamp: float | None = None  # when tokens was last brought up to date

    def level(self, now: float) -> float:
        """Tokens held at *now* (a clock going back regains nothing)."""
        if self.stamp is not None and now > self.stamp:
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
        if self.stamp is None or now > self.stamp:
            self.stamp = now
        return self.tokens

    def take(self, now: float, n: float = 1.0) -> bool:
        """Spend *n* tokens if the bucket holds them; False (nothing spent) when it does not."""
        if self.level(now) < n:
            return False
        self.tokens -= n
        return True


class RateLimits:
    """One :class:`TokenBucket` per key, made on first use.  Beyond *max_keys* buckets, those full
    again are forgotten (a full bucket is what a new one would be)."""

    def __init__(self, rate: float, burst: float, max_keys: int = 4096) -> None:
        self.rate, self.burst, self.max_keys = rate, burst, max_keys
        self._buckets: dict[Hashable, TokenBucket] = {}

    def ready(self, key: Hashable, now: float, n: float = 1.0) -> bool:
        bucket = self._buckets.get(key)
        return bucket is None or bucket.level(now) >= n

    def take(self, key: Hashable, now: float, n: float = 1.0) -> bool:
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self.max_keys:
                self._buckets = {k: b for k, b in self._buckets.items() if b.level(now) < b.burst}
            bucket = self._buckets[key] = TokenBucket(self.rate, self.burst)
        return bucket.take(now, n)


@attrs.define(eq=False)
class SharedFrame:
    """Bytes of one bulk frame, and how many hold them (its maker first: :meth:`release` when done)."""

    data: bytes
    ledger: BulkLedger | None = None
    sender: Hashable = None
    holders: int = 1

    def hold(self) -> None:
        self.holders += 1

    def release(self) -> None:
        self.holders -= 1
        if not self.holders and self.ledger is not None:
            self.ledger.queued -= len(self.data)
            self.ledger.by_sender[self.sender] -= len(self.data)
            if not self.ledger.by_sender[self.sender]:
                del self.ledger.by_sender[self.sender]


class BulkLedger:
    """Bulk bytes held for forwarding: at most *total* in all, *per_sender* for one sender."""

    def __init__(self, total: int, per_sender: int) -> None:
        self.total, self.per_sender = total, per_sender
        self.queued = 0
        self.by_sender: Counter[Hashable] = Counter()

    def frame(self, sender: Hashable, data: bytes) -> SharedFrame | str:
        """*data* charged to *sender*, or why it cannot be (one line)."""
        if self.by_sender[sender] + len(data) > self.per_sender:
            return "bulk over the sender's share"
        if self.queued + len(data) > self.total:
            return "bulk over the hub's limit"
        self.queued += len(data)
        self.by_sender[sender] += len(data)
        return SharedFrame(data, self, sender)
