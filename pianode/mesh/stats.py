"""What a session counts: its counters and its drops by reason (``node.statistics()``).

One :class:`Tally` per session, handed to every part of it: each part bumps
the counters of what it does, and every datagram or message it refuses is a
drop with a :class:`DropReason`, never an exception.
"""

from __future__ import annotations

import collections
import enum
import logging

__all__ = ["COUNTERS", "DropReason", "Tally"]

_log = logging.getLogger("pianode.mesh")  # -v: drops of authenticated messages; -vv: every drop

#: Every counter a session keeps (``statistics()['counters']`` lists the non-zero ones).
COUNTERS = (
    "after_leave",
    "connect_glare_won",
    "connect_glare_yielded",
    "connections",
    "group_messages_for_others",
    "group_packets_sent",
    "join_requests_repeated",
    "joins_denied",
    "keepalives_received",
    "packets_received",
    "packets_sent",
    "reconnects",
    "rejoins",
    "reliable_delivered",
    "reliable_sent",
    "restart_probes",
    "restarts",
    "retransmissions",
    "stale_updates",
    "rtt_requests_received",
    "short_join_requests",
    "successor_updates_held",
    "trailing_bytes",
    "unreliable_delivered",
    "unreliable_sent",
    "version_denials",
    "window_full",
)


class DropReason(str, enum.Enum):
    MALFORMED = "malformed"
    BAD_TAG = "bad_tag"
    REPLAYED = "replayed"
    NOT_MEMBER = "not_member"
    IDENTITY_MISMATCH = "identity_mismatch"
    UNEXPECTED = "unexpected"
    QUEUE_FULL = "queue_full"
    UNENCRYPTED = "unencrypted"
    NOT_ADDRESSED = "not_addressed"
    CLOSED = "closed"
    NOT_HOST = "not_host"
    OTHER_VERSION = "other_version"
    UNCONFIRMED_RESTART = "unconfirmed_restart"
    OVERSIZED = "oversized"
    OWN_ADDRESS = "own_address"


#: Drops decided before a datagram authenticated: noise anyone can send, so only at -vv.
UNAUTHENTICATED = frozenset({DropReason.BAD_TAG, DropReason.UNENCRYPTED, DropReason.OTHER_VERSION})
#: Drops decided before authentication or after it, whichever came first (bytes that do not
#: decode, a datagram while the session has no mesh or has left it, one larger than any Pia
#: packet): at -v too, but not called authenticated, which anyone could make them look.
UNPROVEN = frozenset({DropReason.MALFORMED, DropReason.NOT_MEMBER, DropReason.CLOSED, DropReason.OVERSIZED})

#: What each drop means, for the log line.
EXPLAINED = {
    DropReason.MALFORMED: "its bytes do not follow the layout of this version",
    DropReason.BAD_TAG: "it does not authenticate with the session key",
    DropReason.REPLAYED: "its nonce was seen before",
    DropReason.NOT_MEMBER: "its sender is not a member of the mesh",
    DropReason.IDENTITY_MISMATCH: "it names another station than the one at its address",
    DropReason.UNEXPECTED: "it makes no sense in the current state",
    DropReason.QUEUE_FULL: "the application's queue is full",
    DropReason.UNENCRYPTED: "it is not encrypted and this session is",
    DropReason.NOT_ADDRESSED: "it is addressed to other stations",
    DropReason.CLOSED: "the session is closed",
    DropReason.NOT_HOST: "only the host may send it",
    DropReason.OTHER_VERSION: "it is in another Pia version's format",
    DropReason.UNCONFIRMED_RESTART: "a restart its old identity has not confirmed by silence",
    DropReason.OVERSIZED: "it is larger than the node takes",
    DropReason.OWN_ADDRESS: "it comes from this node's own address (a node is not a station of its own mesh)",
}


class Tally:
    """A session's counters and drops."""

    __slots__ = ("counters", "departures", "drops")

    def __init__(self) -> None:
        # A plain dict (exact dicts have the interpreter's fast item path; a
        # Counter does not): some of these are bumped for every datagram.
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.drops: collections.Counter[str] = collections.Counter()
        #: Stations that left, by reason (:mod:`pianode.mesh.departure`).
        self.departures: collections.Counter[str] = collections.Counter()

    def report(self) -> dict[str, object]:
        """The non-zero counters, the drops and the departures by reason, for ``statistics()``."""
        return {
            "counters": {k: v for k, v in self.counters.items() if v},
            "drops": dict(self.drops),
            "departures": dict(self.departures),
        }

    def drop(self, reason: DropReason) -> None:
        drops = self.drops
        drops[reason.value] += 1
        if _log.isEnabledFor(logging.INFO):
            self._explain(reason, drops[reason.value])

    @staticmethod
    def _explain(reason: DropReason, count: int) -> None:
        """Log a drop: every one at -vv; at -v an authenticated one, the 1st, 10th, 100th, ...
        of each reason, so a flood cannot flood the log."""
        text = EXPLAINED[reason]
        if reason not in UNAUTHENTICATED and count == 10 ** (len(str(count)) - 1):
            what = "a datagram" if reason in UNPROVEN else "an authenticated message"
            _log.info("dropped %s (%s, %d so far): %s", what, reason.value, count, text)
        elif _log.isEnabledFor(logging.DEBUG):
            _log.debug("dropped a datagram (%s): %s", reason.value, text)
