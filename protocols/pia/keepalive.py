"""Keep Alive protocol payload (spec/pia.md §5.5): always empty.

Theory of operation: no wiki page documents it; the only evidence (NC-old) is
an empty payload on port 0, sent once per second to every joined station.  The
codec therefore accepts only the empty payload, so anything else shows up as a
decode error instead of being silently taken for a keep-alive.
"""

from __future__ import annotations

import attrs

from protocols.errors import TrailingData
from protocols.pia.types import Source
from protocols.pia.versions import VersionProfile
from protocols.wire import Reader

__all__ = ["KeepAlive", "decode_keep_alive"]


@attrs.frozen
class KeepAlive:
    def encode(self, profile: VersionProfile | None = None) -> bytes:
        return b""


def decode_keep_alive(payload: Source, profile: VersionProfile | None = None) -> KeepAlive:
    """Bytes must be empty; a Reader is left untouched (nothing to read)."""
    if isinstance(payload, Reader):
        return KeepAlive()
    if left := len(payload):
        raise TrailingData(f"a keep-alive payload is empty, got {left} bytes")
    return KeepAlive()
