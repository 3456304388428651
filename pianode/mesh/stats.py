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

_log = logging.getLogger("pianode.mesh")  # -vv: every drop with its reason

#: Every counter a session keeps (``statistics()['counters']`` lists the non-zero ones).
COUNTERS = (
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
    "successor_updates_held",
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


class Tally:
    """A session's counters and drops."""

    __slots__ = ("counters", "drops")

    def __init__(self) -> None:
        # A plain dict (exact dicts have the interpreter's fast item path; a
        # Counter does not): some of these are bumped for every datagram.
        self.counters: dict[str, int] = dict.fromkeys(COUNTERS, 0)
        self.drops: collections.Counter[str] = collections.Counter()

    def drop(self, reason: DropReason) -> None:
        self.drops[reason.value] += 1
        if _log.isEnabledFor(logging.DEBUG):
            _log.debug("dropped a datagram: %s", reason.value)
