"""Which LAN browse datagram a UDP payload is, by its sizes (spec ../shared/spec/pia.md §6.2, §6.3), and the LAN
profiles to read it with: the detection behind ``pianode decode`` (:mod:`pianode.capture.decode`), whose tables the
Wireshark dissector shares (:mod:`pianode.wireshark.tables`).
"""

from __future__ import annotations

from typing import Any

from protocols.pia.versions import DOCUMENTED_VERSIONS, VersionProfile, profile_for

__all__ = ["REPLY_TAILS", "REQUEST_SEARCH_SIZES", "REQUEST_TAILS", "lan_candidates", "lan_kind"]

# Search block sizes: LanSessionSearchCriteria (<= 5.45), LanSearchNetworkSetting
# 6.16-6.20 / 6.23-6.30, and 7.2's encrypted setting.
REQUEST_SEARCH_SIZES = (0x23A, 0x0E, 0x16, 0x20)
# Challenge (request) sizes after the search block: none (<= 5.6), 298, 299 (version 4), 315 (7.2).
REQUEST_TAILS = (0, 0x12A, 0x12B, 0x13B)
# Challenge reply sizes after the session: none (<= 5.6), 58, 59 (version 4).
REPLY_TAILS = (0, 58, 59)


def lan_kind(data: bytes) -> str | None:
    """``"lan-browse-request"``, ``"lan-browse-reply"`` or None, by the block size field and what follows it."""
    if len(data) < 5 or data[0] not in (0, 1):
        return None
    size = int.from_bytes(data[1:5], "big")
    rest = len(data) - 5 - size
    if data[0] == 0 and size in REQUEST_SEARCH_SIZES and rest in REQUEST_TAILS:
        return "lan-browse-request"
    if data[0] == 1 and size >= 0x100 and rest in REPLY_TAILS:
        return "lan-browse-reply"
    return None


def lan_candidates(data: bytes, kind: str) -> list[VersionProfile]:
    """LAN profiles to try: one per (system communication version, challenge version) pair."""
    seen: dict[tuple[Any, ...], VersionProfile] = {}
    for v in DOCUMENTED_VERSIONS:
        p = profile_for(v)
        if p.lan_system_version is None and not (5, 2) <= v <= (5, 45):
            continue
        seen[(p.lan_system_version, p.lan_challenge_version, v >= (6, 0), v >= (6, 23), v >= (5, 10), v >= (5, 3))] = p
    ordered = sorted(seen.values(), key=lambda p: p.version)
    size = int.from_bytes(data[1:5], "big")
    # The challenge (request or reply) starts with its version right after the block (spec §6.4).
    chal_ver = data[5 + size] if len(data) > 5 + size else None
    sys_ver = data[5 + 0x26] if kind == "lan-browse-reply" and len(data) > 5 + 0x27 else None
    # LanSessionInfo 5.3+: system communication version at 0x26 (spec §6.3).
    ordered.sort(
        key=lambda p: (p.lan_challenge_version != chal_ver, sys_ver is not None and p.lan_system_version != sys_ver)
    )
    return ordered
