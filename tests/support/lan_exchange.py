"""A LAN browse and what follows it, built from the spec for the decoder's tests (pia.md §6.2-§6.4, §3.2).

A browser at 192.168.1.10 broadcasts a browse request with the crypto challenge (SMM2's game key); each host
answers with its LanSessionInfo and its own session key param, and sends the browser one unreliable message
sealed with the session key that param gives.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from protocols.pia.header import PacketHeader
from protocols.pia.keys import lan_session_key
from protocols.pia.lan import (
    BrowseReply,
    BrowseRequest,
    LanHostAddress,
    LanSessionInfo,
    seal_challenge_reply,
    seal_challenge_request,
)
from protocols.pia.lan_criteria import LanSessionSearchCriteria
from protocols.pia.message import Message
from protocols.pia.nonce import nonce_builder
from protocols.pia.packet import Packet, PacketCodec
from protocols.pia.versions import NetworkType, Proto, profile_for

SMM2 = "667c18475889faab61f93ef1da180971"
BROWSER = "192.168.1.10:49152"
Row = tuple[bytes, str, str]  # datagram, source, destination


class LanHost(NamedTuple):
    ip: str
    key_fill: int  # its challenge reply key: 16 times this byte
    network_id: int
    payload: bytes  # what it sends the browser
    header_nonce: bytes


class LanExchange(NamedTuple):
    request: Row
    replies: list[Row]
    data: list[Row]  # one per host, in the hosts' order
    params: list[bytes]  # each host's session key param


def lan_exchange(version: str, hosts: Sequence[LanHost]) -> LanExchange:
    p = profile_for(version)
    gk = bytes.fromhex(SMM2)
    chal_pt = bytes(range(256))
    req_chal = seal_challenge_request(gk, version=p.lan_challenge_version or 0, key=b"\x11" * 16, plaintext=chal_pt,
                                      counter=1, broadcast_ip="192.168.1.255")
    request = (BrowseRequest(LanSessionSearchCriteria.build(game_mode=1), req_chal).encode(p),
               BROWSER, "192.168.1.255:30000")
    replies, data, params = [], [], []
    for host in hosts:
        rep_chal, param = seal_challenge_reply(gk, req_chal, chal_pt, key=bytes([host.key_fill]) * 16, counter=2,
                                               broadcast_ip="192.168.1.255")
        info = LanSessionInfo(
            game_mode=1, network_id=host.network_id, host=LanHostAddress(host.ip, 49152, 1, 2, 3),
            current_participants=1, min_participants=1, max_participants=4,
            system_communication_version=p.lan_system_version,
            application_communication_version=3, session_type=1, session_key_param=param,
        )
        replies.append((BrowseReply(info, rep_chal).encode(p), f"{host.ip}:30000", BROWSER))
        codec = PacketCodec(p, lan_session_key(gk, param), nonce_builder(p, NetworkType.LAN))
        msg = Message(p.protocol_id(Proto.UNRELIABLE), 0, host.payload, flags=p.bitmap_flag, destination=1,
                      source_constant_id=None if p.message_format.value == "M-F" else 5)
        header = (PacketHeader(True, 1, connection_id=3, nonce=host.header_nonce) if p.has_connection_id else
                  PacketHeader(True, 1, destination_variable_id=2, source_variable_id=7, nonce=host.header_nonce))
        data.append((codec.encode(Packet(header, (msg,)), host.ip), f"{host.ip}:49152", BROWSER))
        params.append(param)
    return LanExchange(request, replies, data, params)
