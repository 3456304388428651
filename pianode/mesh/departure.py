"""Why a station left, in words: the ``reason`` of :class:`~pianode.mesh.events.StationLeft`,
the CLI's "station N left (...)" line and the session's ``departures`` statistics.

A reason says what happened, with the figure that decided it, so a user reading
"station 1 left (unacknowledged reliable data for 15 s)" knows where to look: a peer
that never acknowledges the reliable protocol, not a network that went quiet.
"""

from __future__ import annotations

__all__ = [
    "LEFT",
    "REMOVED",
    "RESTARTED",
    "never_joined",
    "silent",
    "unacknowledged",
    "unacknowledged_message",
]

#: It sent a leave request (spec §5.4).
LEFT = "left"
#: The host's update mesh no longer lists it.
REMOVED = "removed by the host"
#: A connection request with a new identity came from its address, and its old identity stayed silent.
RESTARTED = "restarted"


def silent(seconds: float) -> str:
    """Nothing heard from it for the station timeout."""
    return f"silent for {seconds:g} s"


def unacknowledged(seconds: float) -> str:
    """A reliable-window segment to it went unacknowledged until the window gave up."""
    return f"unacknowledged reliable data for {seconds:.0f} s"


def unacknowledged_message(kind: str, sends: int) -> str:
    """A message that carries an ack id (a connection or join response, say) was never acknowledged."""
    return f"unacknowledged {kind} message after {sends} sends"


def never_joined(seconds: float) -> str:
    """It connected to us but held no place in the mesh for a join and a station timeout."""
    return f"connected for {seconds:g} s without joining"
