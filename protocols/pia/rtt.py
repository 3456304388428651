"""RTT protocol payload (spec/pia.md §5.6): ``u32 kind · u32 padding · u64 time`` (16 bytes).

Theory of operation: a station sends a request carrying its own clock value;
the peer answers with a response echoing that value unchanged, and the
requester computes the round-trip time from its own clock.  The same 16-byte
layout is used by every documented version (RTT protocol versions 2-4 do not
change it as far as documented).  The wiki says port 1; real 3DS traffic
(captures/mgba-uds-frames, Pia 4.x) and NC-old use port 0 — the codec does not
care, the node picks the port.  The u32 after the kind is "Padding (always 0)"
(KW RTT-Protocol.md): any value is accepted and kept in ``reserved``.
"""

from __future__ import annotations

import attrs

from protocols.errors import BadValue
from protocols.pia.types import Source, read_source
from protocols.pia.versions import VersionProfile
from protocols.wire import Reader, Writer, reserved_field

__all__ = ["RTT_REQUEST", "RTT_RESPONSE", "RttMessage", "decode_rtt"]

RTT_REQUEST = 0
RTT_RESPONSE = 1


@attrs.frozen
class RttMessage:
    """An RTT request (``is_response=False``) or the response echoing its ``time``."""

    time: int
    is_response: bool = False
    reserved: bytes = reserved_field()

    def response(self) -> RttMessage:
        """The answer to this request: the same time, marked as a response."""
        return RttMessage(self.time, True)  # the node's own padding: zeros

    def encode(self, profile: VersionProfile | None = None) -> bytes:
        w = Writer()
        w.u32(RTT_RESPONSE if self.is_response else RTT_REQUEST)
        w.reserved(self.reserved, 4, "RTT padding")
        w.u64(self.time, "time")
        return w.getvalue()


def decode_rtt(payload: Source, profile: VersionProfile | None = None) -> RttMessage:
    def read(r: Reader) -> RttMessage:
        kind = r.u32("RTT kind")
        if kind not in (RTT_REQUEST, RTT_RESPONSE):
            raise BadValue(f"RTT kind must be 0 (request) or 1 (response), not {kind}")
        reserved = r.reserved(4, "RTT padding")
        return RttMessage(r.u64("time"), kind == RTT_RESPONSE, reserved)

    return read_source(payload, read, "RTT message")
