"""The PRUDP runtime: a sans-IO connection state machine and endpoint, and a thin Trio driver.

* :mod:`pianode.prudp.connection`: one connection (handshake, acks, windows,
  retransmission, keep-alive, fragmentation, payload transforms).
* :mod:`pianode.prudp.core`: :class:`EndpointCore`, many connections over one socket.
* :mod:`pianode.prudp.endpoint`: :class:`PrudpEndpoint`, the Trio driver.
"""

from __future__ import annotations

from pianode.prudp.core import EndpointCore
from pianode.prudp.events import (
    Connected,
    ConnectionFailed,
    ConnectionId,
    Disconnected,
    MessageReceived,
    Settings,
)

__all__ = [
    "Connected",
    "ConnectionFailed",
    "ConnectionId",
    "Disconnected",
    "EndpointCore",
    "MessageReceived",
    "Settings",
]
