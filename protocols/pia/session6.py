"""Pia 6.x as pianode runs it: which 6.x versions and networks the node runs, and the wire ids and layouts of its session management inside 6.x packets.

What the spec documents for 6.x (../shared/spec/pia.md) and what the node does with it:

* The packet layer is complete: headers H-F (6.16-6.30, u16 variable ids, plain
  footer) and H-G (6.32+, padding/flags byte, footer encrypted with the body),
  messages M-F and M-G without 4-byte alignment (§2.4, §11), AES-GCM with 8-byte
  tags, and the nonces of LAN and NPLN (6.16-6.30) and LDN (6.16-6.42) (§3.2).
  The codecs in :mod:`protocols.pia` read all of it from the version profile.
* Station and mesh management is not: 6.x merged both into the Session protocol
  (new) (§5.1, §5.11), of which the spec gives the message types and only the
  6.39 join request's layout.  A 6.x node therefore carries pianode's own
  session management, the 5.45 station and mesh messages (MeshStation 2, Mesh 3,
  §5.3-§5.4), inside 6.x packets under the 5.x protocol ids 0x14 and 0x18, which
  no 6.x protocol uses (§5.1: neither the 6.16-6.30 ids nor the 6.32+ numbering
  1-18 contain them).  Every byte outside those payloads follows the 6.x spec; a
  console will not join such a mesh (nor would it without the Session protocol).
* 6.32+ lists no Keep Alive protocol (§5.1): a 6.32+ node fills silence with an
  RTT request instead, which the peer answers.

The networks a 6.x node runs are those whose nonce (§3.2) and session key (§3.3)
the spec gives for the version: LAN 6.16-6.30 (key from the session key param,
found by the browse on port 35000 whose formats §6.2-§6.3 give for 6.16-6.30),
LDN 6.16-6.41 (key and network id from the SSID, §7.3), and NPLN 6.16-6.30 with
the session key and network id handed over by matchmaking (its own key source is
undocumented, §3.3).  NEX has no 6.x nonce.  :func:`refusal` names what is
missing for the rest.
"""

from __future__ import annotations

from protocols.pia.versions import NetworkType, Proto, VersionProfile, profile_for

__all__ = [
    "MESSAGE_PROFILE",
    "PIANODE_PROTOCOL_IDS",
    "default_network",
    "is_pia6",
    "protocol_ids",
    "refusal",
    "session_profile",
]

#: The version whose station and mesh messages a 6.x node carries (the last with both documented, §5.1).
MESSAGE_PROFILE = "5.45"

#: Protocol ids a 6.x node adds for its session management: the 5.x Station and Mesh ids, free in 6.x (§5.1).
PIANODE_PROTOCOL_IDS = {Proto.STATION: 0x14, Proto.MESH: 0x18}

# The spans of §3.2's nonce table and §6.2-§6.3's LAN browse formats.
_LAN = ((6, 16), (6, 30))
_NPLN = ((6, 16), (6, 30))
_LDN = ((6, 16), (6, 42))


def is_pia6(profile: VersionProfile) -> bool:
    return (6, 0) <= profile.version < (7, 0)


def _within(v: tuple[int, int], span: tuple[tuple[int, int], tuple[int, int]]) -> bool:
    return span[0] <= v <= span[1]


def refusal(profile: VersionProfile, network: NetworkType) -> str | None:
    """Why the node cannot run 6.x *profile* on *network*, in one line; None when it can."""
    v, name = profile.version, profile.name
    if network is NetworkType.NEX:
        others = "lan, ldn or npln" if _within(v, _LAN) else "ldn"
        return f"Pia {name} on nex: the spec gives no 6.x NEX nonce (§3.2 covers NEX 5.7-5.45); use --network {others}"
    if network is NetworkType.LAN and not _within(v, _LAN):
        return (
            f"Pia {name} on lan: the spec gives the 6.x LAN nonce (§3.2) and browse formats (§6.2-§6.3) "
            "for 6.16-6.30 only; use --network ldn"
        )
    if network is NetworkType.NPLN and not _within(v, _NPLN):
        return f"Pia {name} on npln: the spec gives the NPLN nonce (§3.2) for 6.16-6.30 only; use --network ldn"
    if network is NetworkType.LDN and not _within(v, _LDN):
        return f"Pia {name} on ldn: the spec gives the 6.x LDN nonce (§3.2) for 6.16-6.42 only"
    return None


def default_network(profile: VersionProfile) -> NetworkType:
    """The network a 6.x run uses when none is named: LAN where documented, else LDN."""
    return NetworkType.LAN if _within(profile.version, _LAN) else NetworkType.LDN


def session_profile(profile: VersionProfile) -> VersionProfile:
    """The profile whose station and mesh message layouts the node encodes: 5.45's for 6.x, else *profile*."""
    return profile_for(MESSAGE_PROFILE) if is_pia6(profile) else profile


def protocol_ids(profile: VersionProfile) -> dict[Proto, int]:
    """The protocol ids the node sends under: the profile's, plus pianode's session management for 6.x."""
    ids = dict(profile.protocol_ids)
    if is_pia6(profile):
        ids.update(PIANODE_PROTOCOL_IDS)
    return ids


def session_message_name(profile: VersionProfile, protocol_type: int) -> str | None:
    """How a recording names a 6.x message of pianode's session management ("station (pianode)"), else None."""
    if not is_pia6(profile):
        return None
    for proto, pid in PIANODE_PROTOCOL_IDS.items():
        if pid == protocol_type:
            return f"{proto.value} (pianode)"
    return None


def decode_session_message(profile: VersionProfile, protocol_type: int, port: int, payload: bytes) -> object | None:
    """Decode a 6.x message of pianode's session management as the node reads it, else None.

    Station messages and mesh messages on port 0 are 5.45 layouts; a mesh message on port 1
    sits in a reliable window segment of the 6.x version's layout (spec §5.8).
    """
    name = session_message_name(profile, protocol_type)
    if name is None:
        return None
    from protocols.pia.mesh import decode_mesh_message
    from protocols.pia.reliable import WindowFlag, decode_segment
    from protocols.pia.station import decode_station_message
    from protocols.pia.subprotocols import WindowedMesh

    inner = session_profile(profile)
    if protocol_type == PIANODE_PROTOCOL_IDS[Proto.STATION]:
        return decode_station_message(payload, inner) if port == 0 else None
    if port == 0:
        return decode_mesh_message(payload, inner)
    if port != 1:
        return None
    segment = decode_segment(payload, profile)
    flags = segment.header.flags
    message = None
    if flags & WindowFlag.HAS_PAYLOAD and not flags & WindowFlag.ZLIB and segment.payload:
        message = decode_mesh_message(segment.payload, inner)
    return WindowedMesh(segment, message)
