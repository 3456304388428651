"""Typed events a node reports to its application (``async for event in node.events()``).

Frozen values, one class per kind; dispatch on ``type(event)`` or with ``match``.
Do not subclass them.
"""

from __future__ import annotations

import attrs

__all__ = [
    "DataReceived",
    "Event",
    "HostChanged",
    "MeshDestroyed",
    "MeshJoined",
    "StationJoined",
    "StationLeft",
]


@attrs.frozen
class MeshJoined:
    """This node is a member of a mesh: it created it, or its join was accepted."""

    station_index: int
    host_index: int


@attrs.frozen
class StationJoined:
    """Another station is in the mesh and connected to this node."""

    station_index: int
    constant_id: int
    address: tuple[str, int]


@attrs.frozen
class StationLeft:
    """A station left the mesh.

    ``reason`` says why, in words (:mod:`pianode.mesh.departure`): ``"left"``,
    ``"silent for 5 s"``, ``"unacknowledged reliable data for 15 s"``, ``"restarted"``,
    ``"removed by the host"``, ...
    """

    station_index: int
    constant_id: int
    reason: str


@attrs.frozen
class HostChanged:
    """The mesh has a new host (host migration); station indexes are unchanged."""

    old_host_index: int
    new_host_index: int


@attrs.frozen
class DataReceived:
    """Application data from another station."""

    source_index: int
    data: bytes = attrs.field(repr=lambda b: f"<{len(b)} bytes>")
    reliable: bool


@attrs.frozen
class MeshDestroyed:
    """The mesh ended for this node (``reason``: "left", "destroyed", "join-failed", ...)."""

    reason: str


Event = MeshJoined | StationJoined | StationLeft | HostChanged | DataReceived | MeshDestroyed
