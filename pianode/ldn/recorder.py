"""A recording of a simulated LDN run: the datagrams nodes send and the discovery channel's frames (spec §7.4).

Re-exported by :mod:`pianode.ldn.network`, its first home.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["LdnRecorder"]

Address = tuple[str, int]


class LdnRecorder:
    """Collects the datagrams nodes send (their ``tap``) and the discovery channel's frames (a host's
    ``link_tap``), and writes a pcap plus a decode session file (:func:`pianode.capture.recording.write_recording`:
    the LDN link frames go in as non-IP Ethernet frames).

    The session file holds only what a console capture offers: version,
    network, game key, the advertisement's application data and the MACs.
    """

    def __init__(self) -> None:
        self.records: list[tuple[bytes, Address, Address, float]] = []
        self._wall_offset: float | None = None  # the run's clock → the wall clock (pcap timestamps)

    def tap(self, data: bytes, src: Address, dst: Address, now: float) -> None:
        if self._wall_offset is None:
            self._wall_offset = time.time() - now
        self.records.append((data, src, dst, now + self._wall_offset))

    def write(self, pcap_path: str, session: dict[str, Any]) -> dict[str, Any]:
        """Write *pcap_path* and ``<stem>.session.json`` beside it; returns the summary's ``record`` entry."""
        from pianode.capture.recording import write_recording

        return write_recording(pcap_path, self.records, session)
