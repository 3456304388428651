"""Typed events a node reports to its application (``async for event in node.events()``).

Frozen values, one class per kind; dispatch on ``type(event)`` or with ``match``.
Do not subclass them.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs

__all__ = [
    "DataReceived",
    "Event",
    "HostChanged",
    "MeshDestroyed",
    "MeshJoined",
    "StationJoined",
    "StationLeft",
    "data_received",
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
    """A station left the mesh. ``reason`` is ``"left"``, ``"timeout"`` or ``"removed"``."""

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


def _data_received_constructor() -> Callable[[int, bytes, bool], DataReceived]:
    """``make(source_index, data, reliable)``, equal to ``DataReceived(...)``.

    A frozen attrs ``__init__`` stores each field through ``object.__setattr__``;
    the session makes one of these per message per station, so this one stores
    through the slot descriptors directly (the value is the same frozen object).
    """
    names = [f.name for f in attrs.fields(DataReceived)]
    if names != ["source_index", "data", "reliable"] or "__slots__" not in DataReceived.__dict__:
        return DataReceived
    s0, s1, s2 = (DataReceived.__dict__[name].__set__ for name in names)
    new = object.__new__
    cls = DataReceived

    def make(source_index: int, data: bytes, reliable: bool) -> DataReceived:
        event = new(cls)
        s0(event, source_index)
        s1(event, data)
        s2(event, reliable)
        return event

    return make


#: Builds a :class:`DataReceived` without the frozen ``__init__``'s per-field lookups.
data_received = _data_received_constructor()


@attrs.frozen
class MeshDestroyed:
    """The mesh ended for this node (``reason``: "left", "destroyed", "join-failed", ...)."""

    reason: str


Event = MeshJoined | StationJoined | StationLeft | HostChanged | DataReceived | MeshDestroyed
