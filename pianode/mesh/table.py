"""The mesh membership table and the host-migration rule (pure logic).

Every member keeps the same table: station index -> (constant id, variable id,
address, join order).  The host assigns the lowest free index (spec §5.4) and
distributes the table with update-mesh messages; each update carries a counter
that only grows, so a member keeps the newest table it has seen.

Host migration (Nintendo's migration messages are undocumented, spec §5.4):
when the host leaves or stops answering, every remaining member applies the
same deterministic rule to the same table, so they agree without an extra round
trip: **the remaining station with the lowest station index becomes host.**
Because the host hands out the lowest free index, the lowest remaining index is
also (nearly always) the earliest remaining joiner.  The new host then sends an
update mesh with a higher counter so stations that missed the old host's last
update converge on its table.
"""

from __future__ import annotations

import attrs

__all__ = ["MeshFull", "MeshTable", "StationEntry"]


class MeshFull(Exception):
    """No free station index."""


@attrs.frozen
class StationEntry:
    index: int
    constant_id: int
    variable_id: int
    address: tuple[str, int]
    join_order: int


@attrs.define
class MeshTable:
    max_stations: int = 32
    host_index: int | None = None
    update_counter: int = 0
    _entries: dict[int, StationEntry] = attrs.field(factory=dict)
    _next_join_order: int = 0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, index: object) -> bool:
        return index in self._entries

    def get(self, index: int) -> StationEntry | None:
        return self._entries.get(index)

    def entries(self) -> list[StationEntry]:
        return [self._entries[i] for i in sorted(self._entries)]

    def by_address(self, address: tuple[str, int]) -> StationEntry | None:
        for e in self._entries.values():
            if e.address == address:
                return e
        return None

    def lowest_free_index(self) -> int:
        for i in range(self.max_stations):
            if i not in self._entries:
                return i
        raise MeshFull(f"mesh is full ({self.max_stations} stations)")

    def add(self, constant_id: int, variable_id: int, address: tuple[str, int], index: int | None = None) -> StationEntry:
        """Add a station (at the lowest free index unless one is given)."""
        if index is None:
            index = self.lowest_free_index()
        entry = StationEntry(index, constant_id, variable_id, address, self._next_join_order)
        self._next_join_order += 1
        self._entries[index] = entry
        return entry

    def remove(self, index: int) -> StationEntry | None:
        return self._entries.pop(index, None)

    def replace_all(self, entries: list[StationEntry], host_index: int, counter: int) -> None:
        self._entries = {e.index: e for e in entries}
        self.host_index = host_index
        self.update_counter = counter
        self._next_join_order = max((e.join_order for e in entries), default=-1) + 1

    def elect_host(self, exclude: set[int] = frozenset()) -> int | None:  # type: ignore[assignment]
        """The migration rule: lowest remaining station index (see module docstring)."""
        remaining = [i for i in self._entries if i not in exclude]
        return min(remaining) if remaining else None
