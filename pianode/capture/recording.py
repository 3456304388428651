"""A run's recording: the frames its stations sent, as a pcap, and the session file ``pianode decode`` reads with it.

Theory of operation: the runs (``pianode mesh --record``, ``pianode ldn host|join --record``)
collect ``(bytes, source, destination, wall time)`` records through their taps and
hand them to :func:`write_recording`.  Pia and LAN browse datagrams are UDP and go
into the pcap as Ethernet + IP + UDP frames.  The simulated LDN link's frames
(advertisement, connect, reply, leave: :mod:`protocols.ldn_link`, starting
``"PNLD"``) stand for what a console sends as 802.11 frames below IP (the
advertisement is an action frame), so they go in as non-IP Ethernet frames of the
local experimental EtherType :data:`~pianode.capture.frames.LDN_LINK_ETHERTYPE`,
from the sender's synthetic MAC to the receiver's (broadcast: ff:ff:ff:ff:ff:ff).
A reader that walks Ethernet → IPv4 → UDP skips them and finds the same Pia
datagrams as before; :mod:`pianode.capture.pcap` yields them whole, and
``pianode decode`` lists them as ``ldn-discovery``.
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Iterable
from typing import Any

from pianode.capture.output import is_special, output_file
from pianode.capture.pcap import PcapWriter
from pianode.capture.session_file import session_path_for
from protocols.ldn_link import MAGIC as LDN_LINK_MAGIC

__all__ = ["Record", "session_path_for", "write_recording"]

Record = tuple[bytes, tuple[str, int], tuple[str, int], float]  # data, source, destination, wall time

_BROADCAST_MAC = b"\xff" * 6


def _link_mac(ip: str, *, destination: bool) -> bytes:
    """The synthetic MAC of a simulated station (02:00 + its IPv4, as pianode.mesh.wire.mac_for and the
    pcap writer give); a broadcast destination gets the broadcast MAC."""
    address = ipaddress.ip_address(ip)
    if destination and (address.packed[-1] == 0xFF or address.is_multicast):
        return _BROADCAST_MAC
    return b"\x02\x00" + address.packed[-4:]


def write_recording(pcap_path: str, records: Iterable[Record], session: dict[str, Any]) -> dict[str, Any]:
    """Write the records to *pcap_path* and *session* to the session file beside it (none beside a device or a
    pipe); returns the summary's ``record`` entry (paths, ``session`` None when none was written,
    ``datagrams``: UDP datagrams written, ``link_frames``: LDN link frames written)."""
    datagrams = link_frames = 0
    # A device or a pipe (/dev/null, --record >(tshark -r -)) has nothing beside it: the pcap alone, session None.
    session_path = None if is_special(pcap_path) else session_path_for(pcap_path)
    # Both files whole or neither (pianode.capture.output): the session file is renamed into place inside
    # the pcap's block, so a failure of either leaves no new pcap.
    with output_file(pcap_path, "wb") as f:
        writer = PcapWriter(f)
        for data, src, dst, now in records:
            if data[:4] == LDN_LINK_MAGIC:
                writer.write_link(data, _link_mac(src[0], destination=False), _link_mac(dst[0], destination=True), now)
                link_frames += 1
            else:
                writer.write_udp(data, src, dst, now)
                datagrams += 1
        f.flush()
        if session_path is not None:
            with output_file(session_path, "w", encoding="utf-8") as g:
                json.dump(session, g, indent=2, sort_keys=True)
                g.write("\n")
    return {"pcap": pcap_path, "session": session_path, "datagrams": datagrams, "link_frames": link_frames}
