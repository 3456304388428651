"""The answer to a station that asks in another Pia version's format: a connection denial it can
read (result 2 "version too low" / 3 "too high", spec §5.3), in its own header and message format."""

from __future__ import annotations

from collections.abc import Callable

from pianode.mesh.config import NodeConfig
from pianode.mesh.replay import receiver_bound_nonce, sender_bound_nonce
from pianode.mesh.wire import ConnectRequest, Location, decode_station, encode_connect_deny, is_connection_request, packet_codec
from protocols.errors import DecodeError
from protocols.pia import session6
from protocols.pia.header import PacketHeader
from protocols.pia.message import Message
from protocols.pia.packet_values import Packet
from protocols.pia.versions import MessageFormat, Proto, VersionProfile, profile_for

__all__ = ["profile_of_datagram", "version_denial"]


# A representative node profile per header version byte (5.11-6.41, spec §0.3).
_PROFILE_BY_HEADER_VERSION = {3: "5.11", 4: "5.18", 5: "5.26", 9: "5.29", 11: "6.20", 12: "6.26", 13: "6.30", 15: "6.34", 16: "6.41"}


def profile_of_datagram(data: bytes, own: VersionProfile) -> VersionProfile | None:
    """The profile of a Pia datagram in another version's header format (None: ours, or not Pia)."""
    if len(data) < 5 or data[:4] != b"\x32\xab\x98\x64" or not data[4] & 0x80:
        return None
    name = _PROFILE_BY_HEADER_VERSION.get(data[4] & 0x7F)
    if name is None or (own.header_version == data[4] & 0x7F):
        return None
    return profile_for(name)


def version_denial(
    config: NodeConfig,
    local: Location,
    session_key: bytes,
    network_id: int,
    other: VersionProfile,
    data: bytes,
    addr: tuple[str, int],
    result: int,
    next_header_nonce: Callable[[], bytes],
) -> bytes | None:
    """Encode, in *other*'s format, a denial of the connection request in *data*."""
    try:
        codec, _ = packet_codec(config, other, session_key, network_id)
        packet = codec.decode(data, addr[0])
        if not packet.messages or not is_connection_request(other, packet.messages[0]):
            return None
        try:  # the station it refuses, named in the denial (spec §5.3)
            request = decode_station(session6.session_profile(other), packet.messages[0].payload)
            requester = (request.location.constant_id, request.location.variable_id) if isinstance(request, ConnectRequest) else (0, 0)
        except (DecodeError, ValueError):
            requester = (0, 0)
        deny = encode_connect_deny(session6.session_profile(other), requester, result)
        h = packet.header
        hn = next_header_nonce()
        if other.message_format is MessageFormat.G:
            # A 6.32+ station takes only header nonces that name it or no one (receiver_bound_nonce):
            # no one, and our counter's low 40 bits, which repeat only after 2**40 packets of ours.
            hn = receiver_bound_nonce(0, int.from_bytes(hn, "big"))
        elif session6.is_pia6(other):
            # A 6.16-6.30 station takes only header nonces that name their sender (sender_bound_nonce): us.
            hn = sender_bound_nonce(local.variable_id, int.from_bytes(hn, "big"))
        header = PacketHeader(
            encrypted=True,
            packet_id=0,
            version=other.header_version,
            destination_variable_id=h.source_variable_id if other.variable_id_size else None,
            source_variable_id=(local.variable_id & ((1 << 8 * other.variable_id_size) - 1)) if other.variable_id_size else None,
            nonce=hn,
        )
        message = Message(protocol_type=session6.protocol_ids(other)[Proto.STATION], protocol_port=0, payload=deny)
        return codec.encode(Packet(header=header, messages=(message,)), local.address[0])
    except (DecodeError, ValueError):
        return None
