"""Round-trip time: the estimator, the RTT-protocol probe, and the header timers of old profiles.

Theory of operation
-------------------
:class:`RttEstimator` keeps a smoothed RTT and its variance from samples in the
style of RFC 6298 (alpha 1/8, beta 1/4, K 4) and derives a retransmission timeout
clamped to a floor and a ceiling, plus the minimum, latest and count of samples.

Two mechanisms feed it, depending on the Pia version:

* **RTT protocol** (spec §5.6, the only mechanism from 5.11): a request carries the
  requester's own system time as a u64; the peer echoes that value in a response
  (payload codec: :mod:`protocols.pia.rtt`, whose kind constants are re-exported);
  the requester's RTT is its clock now minus the time it sent.  :class:`RttProbe`
  keeps the requests in flight, so a response is matched by its echoed time and
  counted once: a duplicate, forged or stale echo yields no sample.  The time unit
  is ours alone (the peer only echoes it); we use ticks of the Switch system clock
  (19.2 MHz) so values look like a console's.
* **Header timers** (spec §1.5, H-A/H-B headers up to 5.10): every packet carries
  the sender's 16-bit millisecond session clock (source timer) and its estimate of
  the receiver's clock (destination timer = last source timer received from that
  peer + milliseconds elapsed since).  The receiver's RTT is its own clock minus the
  destination timer, mod 2^16.  A destination timer of 0 means "nothing received
  yet"; a computed 0 is sent as 0xFFFF (KW) and read back as is (1 ms error at
  most).  :class:`HeaderTimers` keeps that per-peer state.  The rule was checked on
  the shared nDPI capture: the console's clock minus every peer's destination
  timer is a plausible Internet RTT (60-200 ms), also across the 16-bit wrap.

All times are seconds on the caller's clock (``trio.current_time()`` in the node).
"""

from __future__ import annotations

import math
from collections import OrderedDict

import attrs

from protocols.pia.rtt import RTT_REQUEST, RTT_RESPONSE

__all__ = [
    "RTT_REQUEST",
    "RTT_RESPONSE",
    "SWITCH_TICK_HZ",
    "HeaderTimers",
    "RttEstimator",
    "RttProbe",
    "RttStatistics",
    "estimate_peer_timer",
    "rtt_from_timers",
    "session_timer",
    "ticks",
]

#: nn::os system tick frequency on the Switch; the unit of our RTT request times.
SWITCH_TICK_HZ = 19_200_000

_U64 = (1 << 64) - 1
_EPS_MS = 1e-6  # guards floor() of a float millisecond count against 247.99999…


@attrs.frozen
class RttStatistics:
    samples: int
    smoothed: float | None
    variance: float | None
    minimum: float | None
    latest: float | None
    rto: float


class RttEstimator:
    """Smoothed RTT, variance and retransmission timeout (RFC 6298 style).

    Args:
        initial_rto: the timeout before the first sample.
        min_rto / max_rto: floor and ceiling of the timeout.
        granularity: clock granularity G in the ``SRTT + max(G, K·RTTVAR)`` rule.
    """

    ALPHA = 1 / 8
    BETA = 1 / 4
    K = 4

    def __init__(
        self, *, initial_rto: float = 1.0, min_rto: float = 0.2, max_rto: float = 60.0, granularity: float = 0.001
    ) -> None:
        if not 0 < min_rto <= max_rto or not min_rto <= initial_rto <= max_rto:
            raise ValueError("RTO bounds must satisfy 0 < min_rto <= initial_rto <= max_rto")
        self.initial_rto = initial_rto
        self.min_rto = min_rto
        self.max_rto = max_rto
        self.granularity = granularity
        self.smoothed: float | None = None
        self.variance: float | None = None
        self.minimum: float | None = None
        self.latest: float | None = None
        self.samples = 0
        self.last_sample_time: float | None = None

    def on_sample(self, rtt: float, now: float | None = None) -> None:
        """Add one RTT measurement in seconds (must be finite and >= 0)."""
        if not (math.isfinite(rtt) and rtt >= 0):
            raise ValueError(f"RTT sample must be a finite non-negative number, not {rtt!r}")
        if self.smoothed is None or self.variance is None:
            self.smoothed, self.variance = rtt, rtt / 2
        else:
            # RFC 6298 §2.3: the variance uses the old smoothed value.
            self.variance = (1 - self.BETA) * self.variance + self.BETA * abs(self.smoothed - rtt)
            self.smoothed = (1 - self.ALPHA) * self.smoothed + self.ALPHA * rtt
        self.minimum = rtt if self.minimum is None else min(self.minimum, rtt)
        self.latest = rtt
        self.samples += 1
        self.last_sample_time = now

    @property
    def rto(self) -> float:
        """Current retransmission timeout in seconds, within ``[min_rto, max_rto]``."""
        if self.smoothed is None or self.variance is None:
            return self.initial_rto
        rto = self.smoothed + max(self.granularity, self.K * self.variance)
        return min(self.max_rto, max(self.min_rto, rto))

    def statistics(self) -> RttStatistics:
        return RttStatistics(
            samples=self.samples,
            smoothed=self.smoothed,
            variance=self.variance,
            minimum=self.minimum,
            latest=self.latest,
            rto=self.rto,
        )


# -- RTT protocol (spec §5.6) -----------------------------------------------------


def ticks(now: float, tick_hz: int = SWITCH_TICK_HZ) -> int:
    """*now* (seconds) as a u64 system-tick value."""
    return math.floor(now * tick_hz) & _U64


class RttProbe:
    """Requests in flight to one peer, matched by the echoed time (spec §5.6).

    ``request(now)`` returns the u64 time to put in an RTT request;
    ``on_response(echoed, now)`` returns the RTT in seconds when the echo matches
    a request in flight (and feeds :attr:`estimator`), else None.  At most
    ``max_outstanding`` requests are remembered; requests older than ``timeout``
    are forgotten.  :meth:`respond` is the other side: it returns what to echo.
    """

    def __init__(
        self,
        estimator: RttEstimator | None = None,
        *,
        tick_hz: int = SWITCH_TICK_HZ,
        max_outstanding: int = 16,
        timeout: float = 10.0,
    ) -> None:
        self.estimator = estimator if estimator is not None else RttEstimator()
        self.tick_hz = tick_hz
        self.max_outstanding = max_outstanding
        self.timeout = timeout
        self._pending: OrderedDict[int, float] = OrderedDict()
        self.unmatched = 0  # responses that matched no request (duplicate, stale, forged)

    def request(self, now: float) -> int:
        stamp = ticks(now, self.tick_hz)
        self._expire(now)
        self._pending[stamp] = now
        self._pending.move_to_end(stamp)
        while len(self._pending) > self.max_outstanding:
            self._pending.popitem(last=False)
        return stamp

    def on_response(self, echoed: int, now: float) -> float | None:
        self._expire(now)
        sent = self._pending.pop(echoed, None)
        if sent is None or now < sent:
            self.unmatched += 1
            return None
        rtt = now - sent
        self.estimator.on_sample(rtt, now)
        return rtt

    @staticmethod
    def respond(request_time: int) -> int:
        """The value a response carries: the request's time, unchanged (spec §5.6)."""
        return request_time

    @property
    def outstanding(self) -> int:
        return len(self._pending)

    def _expire(self, now: float) -> None:
        while self._pending:
            stamp, sent = next(iter(self._pending.items()))
            if now - sent <= self.timeout:
                break
            del self._pending[stamp]


# -- header timers (spec §1.5, H-A/H-B) ---------------------------------------------


def session_timer(now: float, session_start: float) -> int:
    """Milliseconds since *session_start*, truncated to 16 bits (the source timer)."""
    return math.floor((now - session_start) * 1000 + _EPS_MS) & 0xFFFF


def estimate_peer_timer(last_source_timer: int, elapsed_ms: int) -> int:
    """The destination timer: the peer's last source timer plus elapsed ms, mod 2^16.

    A result of 0 is sent as 0xFFFF, because 0 means "nothing received yet" (KW).
    """
    value = (last_source_timer + elapsed_ms) & 0xFFFF
    return 0xFFFF if value == 0 else value


def rtt_from_timers(own_timer: int, destination_timer: int) -> int:
    """RTT in ms: our own clock minus the destination timer the peer sent, mod 2^16."""
    return (own_timer - destination_timer) & 0xFFFF


class HeaderTimers:
    """Source/destination timer state for one peer (spec §1.5).

    Args:
        session_start: our session's start on the caller's clock (shared by all peers).
        max_rtt: samples above this (seconds) are rejected as bogus, e.g. an estimate
            built from a packet received long ago that was only just answered.
    """

    def __init__(self, session_start: float, *, max_rtt: float = 10.0) -> None:
        self.session_start = session_start
        self.max_rtt = max_rtt
        self._last: tuple[int, float] | None = None  # (peer's source timer, our time of receipt)
        #: The round trip the last packet's destination timer gives, in ms, believable or not (None: timer 0).
        self.last_rtt_ms: int | None = None

    def source_timer(self, now: float) -> int:
        return session_timer(now, self.session_start)

    def destination_timer(self, now: float) -> int:
        """Our estimate of the peer's clock, or 0 if nothing was received from it."""
        if self._last is None:
            return 0
        timer, received = self._last
        elapsed = max(0, math.floor((now - received) * 1000 + _EPS_MS))
        return estimate_peer_timer(timer, elapsed)

    def on_receive(self, source_timer: int, destination_timer: int, now: float) -> float | None:
        """Record a packet's timers; return the RTT sample in seconds, or None.

        None when the peer has not heard from us yet (destination timer 0) or the
        value is not believable (above ``max_rtt``).
        """
        self._last = (source_timer & 0xFFFF, now)
        if destination_timer == 0:
            self.last_rtt_ms = None
            return None
        rtt_ms = self.last_rtt_ms = rtt_from_timers(self.source_timer(now), destination_timer)
        if rtt_ms > self.max_rtt * 1000:
            return None
        return rtt_ms / 1000
