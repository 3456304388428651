"""Flows of a capture: connection and packet id progression per direction (spec §1.3, §1.4).

:class:`FlowTracker` reads the JSON-ready :class:`~pianode.capture.decode.DecodeResult` values of
``pianode decode --flows``.
"""

from __future__ import annotations

import itertools
from typing import Any, Protocol

import attrs


class DecodeResult(Protocol):
    """What a flow reads of :class:`pianode.capture.decode.DecodeResult` (which imports this module lazily)."""

    index: int
    src: str | None
    dst: str | None
    kind: str
    frame: int | None
    header: dict[str, Any] | None

__all__ = ["MAX_MISSING_LISTED", "FlowTracker"]

#: Missing packet ids listed per connection id; beyond it ``missing_count`` says how many there are.  Two packets
#: (ids 1 and 65535) would otherwise list 65,533, and a capture may hold a connection id per two packets.
MAX_MISSING_LISTED = 1000


@attrs.define
class _Run:
    connection_id: int
    first_frame: int | None
    count: int
    first_packet_id: int
    last_packet_id: int
    plus_one_steps: int = 0
    other_steps: list[list[int]] = attrs.Factory(list)


@attrs.define
class _Flow:
    src: str | None
    dst: str | None
    packets: int = 0
    encrypted: int = 0
    plain: int = 0
    first: dict[str, Any] | None = None
    last: dict[str, Any] | None = None
    #: (a dict for its order and a lookup that costs the same however many ids the flow had)
    connection_ids_in_order: dict[int, None] = attrs.Factory(dict)
    #: Per connection id: the packet ids seen (at most 65,536 however long the capture) and how many packets.
    ids: dict[int, set[int]] = attrs.Factory(dict)
    counts: dict[int, int] = attrs.Factory(dict)
    runs: list[_Run] = attrs.Factory(list)


class FlowTracker:
    """Per-direction summary of Pia headers: connection ids in order, packet id runs and gaps.

    A *run* is a stretch of consecutive packets with the same connection id (or,
    from H-E on, the same source variable id); inside it every step of the
    packet id is counted as +1 or listed as ``[previous, next]``.  Packet ids
    of each non-zero connection id are summarised with the ids missing between
    their minimum and maximum; packet id 0 (handshake, spec §1.4) is left out.
    """

    def __init__(self) -> None:
        self._flows: dict[tuple[str | None, str | None], _Flow] = {}

    def add(self, r: DecodeResult) -> None:
        if r.kind != "pia" or r.header is None:
            return
        h = r.header
        conn = h.get("connection_id", h.get("source_variable_id"))
        if conn is None:
            return
        pid = h["packet_id"]
        flow = self._flows.setdefault((r.src, r.dst), _Flow(r.src, r.dst))
        flow.packets += 1
        if h["encrypted"]:
            flow.encrypted += 1
        else:
            flow.plain += 1
        point = {"frame": r.frame if r.frame is not None else r.index, "connection_id": conn, "packet_id": pid}
        flow.first = flow.first or point
        flow.last = point
        flow.connection_ids_in_order[conn] = None
        if conn != 0 and pid != 0:
            flow.ids.setdefault(conn, set()).add(pid)
            flow.counts[conn] = flow.counts.get(conn, 0) + 1
        run = flow.runs[-1] if flow.runs else None
        if run is None or run.connection_id != conn:
            flow.runs.append(_Run(conn, point["frame"], 1, pid, pid))
            return
        if pid == (run.last_packet_id + 1) & 0xFFFF or (run.last_packet_id == 0xFFFF and pid == 1):
            run.plus_one_steps += 1
        elif not (pid == 0 and run.last_packet_id == 0):
            run.other_steps.append([run.last_packet_id, pid])
        run.count += 1
        run.last_packet_id = pid

    def flows(self) -> list[dict[str, Any]]:
        out = []
        for n, f in enumerate(self._flows.values()):
            ids = {}
            for conn, seen in f.ids.items():
                lo, hi = min(seen), max(seen)
                missing = (p for p in range(lo, hi + 1) if p not in seen)
                ids[str(conn)] = {
                    "count": f.counts[conn], "min": lo, "max": hi,
                    "missing": list(itertools.islice(missing, MAX_MISSING_LISTED)),
                }
                if hi - lo + 1 - len(seen) > MAX_MISSING_LISTED:  # (every id seen is within lo..hi)
                    ids[str(conn)]["missing_count"] = hi - lo + 1 - len(seen)
            out.append({
                "flow": n, "src": f.src, "dst": f.dst, "packets": f.packets, "encrypted": f.encrypted,
                "plain": f.plain, "first": f.first, "last": f.last,
                "connection_ids_in_order": list(f.connection_ids_in_order),
                "nonzero_connection_id_packet_ids": ids,
                "runs": [attrs.asdict(run) for run in f.runs],
            })
        return out
