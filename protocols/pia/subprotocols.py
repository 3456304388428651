"""Dispatch a message payload to the codec of its sub-protocol.

Theory of operation: the capture decoder (and the node's tracing) knows a
message's protocol (as :class:`~protocols.pia.versions.Proto`, via
``profile.protocol_name``/``protocol_ids``), its port and its payload;
:func:`decode_payload` returns the decoded value for protocols with a codec
here, or ``None`` when there is none (game data, undocumented protocols).
Bad bytes for a known protocol raise :class:`~protocols.errors.DecodeError`
like every decoder.

Coverage (spec/pia.md §5.3-§5.10): Station port 0, Mesh port 0 and port 1
(the reliable sliding window of protocols/pia/reliable.py, then the mesh
message when the segment is one whole application message), Keep Alive, RTT
(any port: the wiki says 1, real 3DS traffic uses 0) and Local.
"""

from __future__ import annotations

import attrs

from protocols.errors import DecodeError

from protocols.pia.keepalive import KeepAlive, decode_keep_alive
from protocols.pia.local import LocalMessage, decode_local_message
from protocols.pia.mesh import MeshMessage, decode_mesh_message
from protocols.pia.reliable import Segment, WindowFlag, decode_segment
from protocols.pia.rtt import RttMessage, decode_rtt
from protocols.pia.station import StationMessage, decode_station_message
from protocols.pia.versions import Proto, VersionProfile

__all__ = ["DecodedPayload", "WindowedMesh", "decode_payload"]

@attrs.frozen
class WindowedMesh:
    """A mesh port-1 payload: the sliding-window segment and, when its payload
    is one whole uncompressed mesh message, that message (else ``None``)."""

    segment: Segment
    message: MeshMessage | None


DecodedPayload = StationMessage | MeshMessage | WindowedMesh | KeepAlive | RttMessage | LocalMessage


def decode_payload(protocol: Proto, port: int, payload: bytes, profile: VersionProfile) -> DecodedPayload | None:
    """Decode *payload* of *protocol*/*port*, or return None if no codec covers it."""
    if protocol is Proto.STATION:
        # Port 1 (reliable station protocol, removed in 5.6) was never used.
        return decode_station_message(payload, profile) if port == 0 else None
    if protocol is Proto.MESH:
        if port == 0:
            return decode_mesh_message(payload, profile)
        if port == 1:
            segment = decode_segment(payload, profile)
            message = None
            flags = segment.header.flags
            if flags & WindowFlag.HAS_PAYLOAD and not flags & WindowFlag.ZLIB and segment.payload:
                # Which flags mark a whole (unfragmented) message is disputed
                # (spec §10.1 item 8; real 3.x/4.x traffic sends flags 3), so
                # a segment that does not parse is taken to be a fragment.
                try:
                    message = decode_mesh_message(segment.payload, profile)
                except DecodeError:
                    message = None
            return WindowedMesh(segment, message)
        return None
    if protocol is Proto.KEEP_ALIVE:
        return decode_keep_alive(payload, profile)
    if protocol is Proto.RTT:
        return decode_rtt(payload, profile)
    if protocol is Proto.LOCAL:
        return decode_local_message(payload, profile)
    return None
