"""Rate limits of the relay hub: token buckets, alone or one per key (sans-IO: the caller gives ``now``).

A bucket holds up to *burst* tokens and regains *rate* per second; an action
costing *n* tokens may go when the bucket holds *n*.  A new bucket is full.
"""

from __future__ import annotations

from collections.abc import Hashable

import attrs

__all__ = ["RateLimits", "TokenBucket"]


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
