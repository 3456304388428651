"""Simulated LDN networks on one machine: host, scanner and joining station above a pretend 802.11 (spec §7).

Theory of operation
-------------------
A real LDN host is the access point of a hidden 802.11 network; it hands out
``169.254.X.Y`` addresses and announces the network in advertisement action
frames that carry Pia's application data and the participant list (spec
§7.1).  Without a radio, this module simulates that layer and runs unmodified
Pia above it (spec §7.4):

* **Address plan.**  An LDN network is ``169.254.X.0/24`` with the host at
  ``.1`` (§7.1).  On one machine LDN address ``169.254.X.Y`` *is* loopback
  address ``127.254.X.Y`` (:func:`ldn_to_loopback`, :func:`loopback_to_ldn`):
  every station's Pia socket is bound there.  The host draws X (1..254) per
  network, so several networks coexist; it assigns Y = 2, 3, ... to stations.
  On a real link (separate machines, or network namespaces joined by a
  bridge) the *direct* plan binds the LDN addresses themselves: the host is
  given its ``169.254.X.1`` and each station asks for the address its
  interface already has (the connect request's requested address).
  Through a relay hub (:mod:`pianode.relay`) the *relay plan* binds each
  site's virtual address, which the hub gave it: the LDN network keeps its
  own ``169.254.X.Y`` in the advertisement and the connect reply, as a
  console's LDN layer would show them, and the host notes each station's
  socket address as the one its connect request came from.  (Why not give
  the room the LDN subnet instead: a hub's room stands for any LAN or LDN
  network and its addresses come from the hub, in join order, so a hub would
  have to know LDN's rule that the host is ``.1`` and assign in the LDN host's
  order; mapping addresses at the LDN layer, as the loopback plan already
  does, works with any hub and leaves it LDN-agnostic.  The MAC rule still
  holds: a MAC is 02:00 + the socket address, so a recording decodes as usual.)
* **MACs.**  A station's MAC is ``02:00`` (locally administered) followed by
  its loopback IPv4 bytes (:func:`pianode.mesh.wire.mac_for`), e.g.
  ``02:00:7f:fe:X:Y``.  The node derives its LDN constant id, service variable
  id and nonces from the same rule, and :class:`pianode.capture.pcap.PcapWriter`
  writes the same MACs in a recording's link layer.
* **Discovery channel and advertisement** (:mod:`protocols.ldn_link`).  The
  host broadcasts an advert (the plaintext §7.1 advertisement payload: session
  info with the SSID, participant list, Pia application data) to
  ``127.255.255.255:30400`` every 100 ms.  Scanners bind ``0.0.0.0:30400``
  with SO_REUSEADDR (and SO_REUSEPORT), so every scanner on the machine hears
  every advert.  A station sends a connect request to the host's control
  socket (its own address, port in the advert) and gets an address and MAC
  back, retrying three times 0.7 s apart like the §7.1 authentication
  request; it sends a leave notice when it goes.  Joined stations keep
  listening and learn every participant's MAC from later adverts (§7.1).
* **Keys.**  The host draws the network id and session param (5.9+) and the
  SSID; a joining station derives the session key and network id from the
  advertisement exactly as a console does (:func:`derive_session`, §7.3,
  §11), then joins the host's mesh with :meth:`pianode.mesh.node.Node.join`.

The codecs and :class:`LdnHostState` are pure (bytes and ``now`` in, values
out); :class:`LdnHost`, :func:`scan` and :func:`open_ldn_station` drive them on
Trio sockets, so everything also runs on :mod:`pianode.sim.netsim` under
``MockClock``.  The Pia port inside an LDN network is undocumented (§7.3); ours
defaults to :data:`PIA_PORT` and travels in the advert frame.
"""

from __future__ import annotations

import collections
import errno
import ipaddress
import logging
import random
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio

from pianode.mesh.config import NodeConfig
from protocols.ldn_link import (
    DISCOVERY_PORT,
    MAX_PARTICIPANTS,
    REJECTED,
    AdvertFrame,
    Advertisement,
    ConnectReply,
    ConnectRequest,
    Frame,
    LdnParticipant,
    LeaveNotice,
    decode_frame,
    encode_frame,
    is_ldn_address,
    ldn_to_loopback,
    loopback_to_ldn,
    mac_text,
)
from pianode.ldn.local import HostIdentity, UpdateSessionAnnouncer, answer_update_session
from pianode.ldn.recorder import LdnRecorder
from pianode.mesh.wire import mac_for
from pianode.mesh.node import Node, open_node
from protocols.errors import ConfigError, DecodeError
from protocols.pia.keys import ldn_session_key_for
from protocols.pia.ldn import LdnApplicationData, LdnSystemProperty, decode_application_data
from protocols.pia.local import UpdateSession
from protocols.pia.versions import Cipher, NetworkType, Proto, VersionProfile

__all__ = [
    "DEFAULT_BROADCAST",
    "DISCOVERY_PORT",
    "MAX_PARTICIPANTS",
    "MAX_SCAN_NETWORKS",
    "PIA_PORT",
    "REJECTED",
    "AdvertFrame",
    "Advertisement",
    "ConnectReply",
    "ConnectRequest",
    "FoundNetwork",
    "Frame",
    "JoinRefused",
    "LdnHost",
    "LdnHostConfig",
    "LdnHostState",
    "LdnParticipant",
    "LdnRecorder",
    "LdnSession",
    "LdnStation",
    "LeaveNotice",
    "decode_frame",
    "derive_session",
    "encode_frame",
    "ldn_to_loopback",
    "loopback_to_ldn",
    "open_ldn_host",
    "open_ldn_station",
    "scan",
]

log = logging.getLogger(__name__)

PIA_PORT = 49152
DEFAULT_BROADCAST = "127.255.255.255"
ADVERTISE_INTERVAL = 0.1  # advertisement frames every 100 ms (spec §7.1)
CONNECT_TIMEOUT = 0.7  # authentication response awaited 700 ms, 3 attempts (spec §7.1)
CONNECT_ATTEMPTS = 3
_MAX_DATAGRAM = 2048
#: Networks one scan keeps: adverts of more (a flood of new SSIDs) are counted as ``too_many_networks``, so a
#: scan's memory stays bounded.  A real channel carries a few networks.
MAX_SCAN_NETWORKS = 64

Address = tuple[str, int]
Tap = Callable[[bytes, Address, Address, float], None]


# ---------------------------------------------------------------------- keys as a console derives them


@attrs.frozen
class LdnSession:
    """What a console derives from an advertisement (spec §7.3, §11)."""

    network_id: int
    session_key: bytes = attrs.field(repr=False)
    pia: LdnApplicationData | LdnSystemProperty


def derive_session(
    profile: VersionProfile, game_key: bytes, advertisement: Advertisement, *, session_key: bytes | None = None
) -> LdnSession:
    """Network id and session key of an LDN network, from the game key and the advertisement.

    * 5.9-5.45: network id = the little-endian u32 at 0x0 of the application
      data, session key = SEAD(session param at 0xC) → AES-ECB(game key) (§11);
    * 5.7-5.8: the game supplies the key (*session_key*), the network id is
      still the application data's (§3.3);
    * 6.x: network id = CRC-32(``ssid[1:16]``), key = AES-ECB(game key, SSID) (§11).

    Raises:
        ConfigError: Pia <= 5.6 (LDN unencrypted), a 5.7/5.8 network without
            *session_key*, or an application data system communication version
            that is not the one *profile* speaks.
        DecodeError: the application data does not decode for *profile*.
    """
    pia = decode_application_data(advertisement.application_data, profile)
    if profile.cipher is Cipher.ECB_HMAC:
        # 5.2-5.6: not encrypted (§3.3); the packets are signed with the game's key, as the only real
        # local traffic of this generation is (pianode.mesh.legacy: the 3DS frames, key "PokemonSIO").
        if len(game_key) != 16:
            raise ConfigError(f"Pia {profile.name} local play signs with the game key: it must be 16 bytes here")
        return LdnSession(pia.network_id, game_key, pia)
    want = profile.ldn_system_version
    if want is not None and pia.system_communication_version != want:
        raise ConfigError(
            f"the network speaks LDN system communication version {pia.system_communication_version}; "
            f"Pia {profile.name} uses {want}"
        )
    if isinstance(pia, LdnSystemProperty):
        key = ldn_session_key_for(profile, game_key, ssid=advertisement.ssid)
        return LdnSession(LdnSystemProperty.network_id_for(advertisement.ssid), key, pia)
    if key_is_supplied(profile, pia):
        if session_key is None:
            raise ConfigError(f"Pia {profile.name} LDN keys are supplied by the game: give the session key")
        return LdnSession(pia.network_id, session_key, pia)
    return LdnSession(pia.network_id, pia.session_key(game_key), pia)


def key_is_supplied(profile: VersionProfile, pia: LdnApplicationData | LdnSystemProperty) -> bool:
    """Whether the game supplies the network's session key rather than a rule deriving it (5.7-5.8, or
    application data without a session param; spec §3.3): a recording's session file must then carry it."""
    if profile.cipher is Cipher.ECB_HMAC or isinstance(pia, LdnSystemProperty):
        return False
    return pia.session_param is None or profile.version < (5, 9)


def has_local_protocol(profile: VersionProfile) -> bool:
    """Whether the version runs LDN session management in the Local protocol (5.x; spec §5.10)."""
    return Proto.LOCAL in profile.protocol_ids


# ---------------------------------------------------------------------- host state (sans-IO)


@attrs.define
class _Slot:
    participant: LdnParticipant
    token: bytes
    assigned_at: float
    seen_in_mesh: bool = False


class LdnHostState:
    """The host's LDN network: identity, keys, address assignment and the advertisement.

    Pure: the driver passes ``now`` and the loopback addresses currently in the
    Pia mesh (:meth:`prune`).
    """

    def __init__(
        self,
        profile: VersionProfile,
        game_key: bytes,
        *,
        rng: random.Random,
        max_participants: int = MAX_PARTICIPANTS,
        name: str = "pianode",
        local_communication_id: int = 0x0100_0000_0000_1000,
        game_mode: int = 0,
        subnet: int | None = None,
        session_key: bytes | None = None,
        app_version: int = 0,
        game_data: bytes = b"",
        join_grace: float = 15.0,
        direct: bool = False,
        socket_address: str | None = None,
    ) -> None:
        if not 2 <= max_participants <= MAX_PARTICIPANTS:
            raise ConfigError(f"an LDN network has 2..{MAX_PARTICIPANTS} participants, not {max_participants}")
        self.profile = profile
        self.x = subnet if subnet is not None else rng.randrange(1, 255)
        if not 1 <= self.x <= 254:
            raise ConfigError(f"subnet octet must be 1..254, got {self.x}")
        self.max_participants = max_participants
        self.local_communication_id = local_communication_id
        self.game_mode = game_mode
        self.join_grace = join_grace
        #: Direct plan: sockets use the LDN addresses themselves (a real link), not 127.254.X.Y.
        self.direct = direct
        #: Relay plan: LDN address → socket address (the host's given, each station's from its connect request).
        self.sockets: dict[str, str] = {}
        self.ssid = rng.randbytes(16)  # 16 random bytes (spec §7.1)
        self.network_key = rng.randbytes(16)
        self.auth_token = rng.getrandbits(64)
        app: LdnApplicationData | LdnSystemProperty
        if profile.version >= (6, 0):
            app = LdnSystemProperty(
                profile.ldn_system_version or 0, app_version, player_count=1,
                player_name_size=len(name.encode()[:64]), encoding=1,
                player_name_raw=name.encode()[:64].ljust(64, b"\0"), game_data=game_data,
            )  # fmt: skip
        else:
            param = rng.getrandbits(32) if profile.version >= (5, 9) else None
            app = LdnApplicationData.build(
                profile, network_id=rng.getrandbits(32), session_param=param, game_data=game_data
            )
        self.application_data = app.encode(profile)
        host_ip = f"169.254.{self.x}.1"
        if socket_address is not None:
            self.sockets[host_ip] = socket_address
        host = LdnParticipant(host_ip, mac_for(self.socket_ip(host_ip)), name, app_version=app_version)
        self._slots: dict[int, _Slot] = {1: _Slot(host, b"", 0.0, True)}
        #: Every participant that ever held an address (LDN IP → MAC), for a recording's session file.
        self.history: dict[str, bytes] = {host.ip: host.mac}
        self.session = derive_session(profile, game_key, self.advertisement(), session_key=session_key)

    @property
    def host(self) -> LdnParticipant:
        return self._slots[1].participant

    def socket_ip(self, ldn_ip: str) -> str:
        """Where a participant's sockets are: its LDN address (direct plan), the site's virtual
        address (relay plan) or 127.254.X.Y (loopback plan)."""
        mapped = self.sockets.get(ldn_ip)
        if mapped is not None:
            return mapped
        return ldn_ip if self.direct else ldn_to_loopback(ldn_ip)

    @property
    def relayed(self) -> bool:
        """The relay plan: sockets on virtual addresses, learnt from where connect requests come from."""
        return bool(self.sockets)

    @property
    def participants(self) -> tuple[LdnParticipant, ...]:
        return tuple(self._slots[y].participant for y in sorted(self._slots))

    def advertisement(self) -> Advertisement:
        return Advertisement(
            local_communication_id=self.local_communication_id,
            ssid=self.ssid,
            application_data=self.application_data,
            max_participants=self.max_participants,
            participants=self.participants,
            game_mode=self.game_mode,
            network_key=self.network_key,
            auth_token=self.auth_token,
        )

    def connect(self, request: ConnectRequest, now: float, source: str | None = None) -> ConnectReply:
        """Assign the next free ``169.254.X.Y`` (a repeated request gets the same answer).

        *source*: the address the request came from, the station's socket address in the relay plan."""
        for slot in self._slots.values():
            if slot.token == request.token and request.token:
                return ConnectReply(request.token, 0, slot.participant.ip, slot.participant.mac)
        if len(self._slots) >= self.max_participants:
            return ConnectReply(request.token, REJECTED)
        if request.requested_ip != "0.0.0.0":
            wanted = self._y(request.requested_ip)
            if wanted is None or not 2 <= wanted <= 254 or wanted in self._slots:
                return ConnectReply(request.token, REJECTED)
            y = wanted
        else:
            y = next(y for y in range(2, 255) if y not in self._slots)
        ip = f"169.254.{self.x}.{y}"
        if self.relayed:
            if source is None or any(self.socket_ip(sl.participant.ip) == source for sl in self._slots.values()):
                return ConnectReply(request.token, REJECTED)  # no socket address, or one already in the network
            self.sockets[ip] = source
        p = LdnParticipant(ip, mac_for(self.socket_ip(ip)), request.name, True, request.platform, request.app_version)
        self._slots[y] = _Slot(p, request.token, now)
        self.history[ip] = p.mac
        return ConnectReply(request.token, 0, ip, p.mac)

    def leave(self, ip: str, source: str | None = None) -> bool:
        """Free *ip*'s slot; with *source* (where the notice came from), only when that is the station's own
        socket address: a notice anyone else sends frees nothing."""
        y = self._y(ip)
        if y is None or y == 1 or y not in self._slots:
            return False
        if source is not None and source != self.socket_ip(ip):
            return False
        del self._slots[y]
        return True

    def prune(self, now: float, mesh_ips: set[str]) -> list[str]:
        """Drop stations that left the Pia mesh or never joined within the grace period."""
        gone = []
        for y, slot in list(self._slots.items()):
            if y == 1:
                continue
            in_mesh = self.socket_ip(slot.participant.ip) in mesh_ips
            if in_mesh:
                slot.seen_in_mesh = True
            elif slot.seen_in_mesh or now - slot.assigned_at > self.join_grace:
                del self._slots[y]
                gone.append(slot.participant.ip)
        return gone

    def _y(self, ip: str) -> int | None:
        try:
            a = ipaddress.IPv4Address(ip).packed
        except ValueError:
            return None
        return a[3] if a[:3] == bytes((169, 254, self.x)) else None

    def session_file(self, version: str, game_key_text: str) -> dict[str, Any]:
        """What a capture of this network lets a decoder use: game key, application data, MACs.

        ``macs`` is keyed by the addresses a recording shows (the sockets' ones).
        """
        out = {
            "version": version,
            "network": "ldn",
            "game_key": game_key_text,
            "application_data": self.application_data.hex(),
            "macs": {self.socket_ip(ip): mac_text(mac) for ip, mac in sorted(self.history.items())},
        }
        if self.profile.version >= (6, 0):
            out["ssid"] = self.ssid.hex()  # 6.x: the key and network id derive from it (spec §7.3)
        elif key_is_supplied(self.profile, self.session.pia):
            out["session_key"] = self.session.session_key.hex()  # 5.7-5.8: no rule derives it (spec §3.3)
        return out


# ---------------------------------------------------------------------- sockets


async def _udp_socket(bind: Address, *, reuse: bool = False, broadcast: bool = False) -> trio.socket.SocketType:
    sock = trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM)
    try:
        if reuse:
            sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_REUSEADDR, 1)
            if hasattr(trio.socket, "SO_REUSEPORT"):
                sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_REUSEPORT, 1)
        if broadcast:
            sock.setsockopt(trio.socket.SOL_SOCKET, trio.socket.SO_BROADCAST, 1)
        await sock.bind(bind)
    except BaseException:
        sock.close()
        raise
    return sock


# ---------------------------------------------------------------------- host driver


@attrs.frozen(kw_only=True)
class LdnHostConfig:
    """Settings of :func:`open_ldn_host` (the node settings come from *node*)."""

    node: NodeConfig
    game_key: bytes = attrs.field(repr=False)
    max_participants: int = 4
    name: str = "pianode"
    pia_port: int = PIA_PORT
    discovery: Address = (DEFAULT_BROADCAST, DISCOVERY_PORT)
    advertise_interval: float = ADVERTISE_INTERVAL
    local_communication_id: int = 0x0100_0000_0000_1000
    game_mode: int = 0
    subnet: int | None = None
    session_key: bytes | None = None
    #: Direct plan: the host's own ``169.254.X.1`` on a real link (its interface has it); None = loopback plan.
    address: str | None = None
    #: Relay plan: the host's sockets are on this address (its relay site's virtual address); the
    #: advertisement then goes to ``discovery``, the room's broadcast address.
    socket_address: str | None = None


class LdnHost:
    """A running LDN host: the network state, its Pia node (``node``) and the control socket."""

    def __init__(
        self, config: LdnHostConfig, state: LdnHostState, node: Node, control: trio.socket.SocketType,
        link_tap: Tap | None = None,
    ) -> None:
        self.config = config
        #: Sees every frame of the discovery channel the host sends or receives (a recording's LDN link frames).
        self.link_tap = link_tap
        self.state = state
        self.node = node
        self._control = control
        self.adverts_sent = 0
        self.dropped = 0
        #: Frames of the control socket dropped, by reason (``dropped`` is their total).
        self.drops: collections.Counter[str] = collections.Counter()
        s = node.session
        assert s is not None
        #: The Local protocol's update session (spec §5.10), sent to every station until acked.  6.x has
        #: no Local protocol (its successor, the Net protocol, is documented only in part: spec §5.11), so None.
        self.local: UpdateSessionAnnouncer | None = None
        if has_local_protocol(config.node.profile):
            self.local = UpdateSessionAnnouncer(
                config.node.profile,
                HostIdentity(s.variable_id, s.location.service_variable_id, s.constant_id),
                rng=random.Random(config.node.seed),
            )
            node.set_protocol_handler(Proto.LOCAL, self._on_local)

    @property
    def control_address(self) -> Address:
        host, port = self._control.getsockname()[:2]
        return (str(host), int(port))

    def session_file(self, game_key_text: str) -> dict[str, Any]:
        return self.state.session_file(self.config.node.profile.name, game_key_text)

    def _mesh_ips(self) -> set[str]:
        return {s.address[0] for s in self.node.stations()}

    async def _advertise(self) -> None:
        while True:
            self.state.prune(trio.current_time(), self._mesh_ips())
            frame = AdvertFrame(self.node.address[1], self.control_address[1], self.state.advertisement())
            data = encode_frame(frame)
            try:
                await self._control.sendto(data, self.config.discovery)
                self.adverts_sent += 1
                if self.link_tap is not None:
                    self.link_tap(data, self.control_address, self.config.discovery, trio.current_time())
            except OSError as exc:  # e.g. no route in a namespace being torn down
                log.debug("advertisement not sent: %s", exc)
            await trio.sleep(self.config.advertise_interval)

    def _on_local(self, index: int, port: int, payload: bytes) -> None:
        assert self.local is not None
        for row in self.node.stations():
            if row.index == index:
                try:
                    self.local.receive(row.address, payload)
                except DecodeError:
                    self._drop("bad_local_message", row.address)
                return

    async def _announce(self) -> None:
        if self.local is None:
            return
        while True:
            rows = sorted((r for r in self.node.stations() if r.index is not None), key=lambda r: r.index or 0)
            members = [r.address for r in rows if r.is_self] + [r.address for r in rows if not r.is_self and r.state == "connected"]
            now = trio.current_time()
            self.local.set_members(members, now)
            index = {r.address: r.index for r in rows}
            for address, payload in self.local.due(now):
                station = index.get(address)
                if station is not None:
                    self.node.send_protocol(station, Proto.LOCAL, 0, payload)
            await trio.sleep(0.02)

    def _drop(self, reason: str, sender: Address) -> None:
        self.dropped += 1
        self.drops[reason] += 1
        log.debug("LDN host dropped a frame from %s:%d: %s", sender[0], sender[1], reason)

    async def _serve(self) -> None:
        while True:
            data, addr = await self._control.recvfrom(_MAX_DATAGRAM)
            sender = (str(addr[0]), int(addr[1]))
            try:
                frame = decode_frame(data)
            except DecodeError:
                self._drop("not_a_frame", sender)
                continue
            tap = self.link_tap
            if isinstance(frame, ConnectRequest):
                if tap is not None:
                    tap(data, sender, self.control_address, trio.current_time())
                reply = self.state.connect(frame, trio.current_time(), source=sender[0])
                out = encode_frame(reply)
                try:
                    await self._control.sendto(out, sender)
                except OSError:  # a source no reply can reach (port 0, a forged request): the host goes on
                    self._drop("reply_not_sent", sender)
                    continue
                if tap is not None:
                    tap(out, self.control_address, sender, trio.current_time())
            elif isinstance(frame, LeaveNotice):
                if tap is not None:
                    tap(data, sender, self.control_address, trio.current_time())
                if frame.ip in (p.ip for p in self.state.participants) and not self.state.leave(frame.ip, sender[0]):
                    self._drop("leave_from_another_address", sender)  # only a station itself says it leaves
            else:
                self._drop("unexpected_frame", sender)


@asynccontextmanager
async def open_ldn_host(
    config: LdnHostConfig, *, tap: Tap | None = None, rng: random.Random | None = None, link_tap: Tap | None = None
) -> AsyncIterator[LdnHost]:
    """Create an LDN network, its host node and the advertisement, for the ``async with`` block.

    *tap* sees the Pia datagrams the host node sends, *link_tap* the discovery channel's frames
    (advertisements sent, connect requests and leave notices received, replies sent).

    Tries up to 20 subnets (X) when the chosen loopback address is taken
    (``config.pia_port`` 0 lets the system pick the Pia port).
    """
    rng = rng or random.Random(config.node.seed)
    state, control = await _claim_subnet(config, rng)
    with control:
        node_config = attrs.evolve(
            config.node, network=NetworkType.LDN, session_key=state.session.session_key,
            bind=(state.socket_ip(state.host.ip), config.pia_port), max_stations=config.max_participants,
            name=config.name,
        )  # fmt: skip
        async with open_node(node_config, tap=tap) as node:
            await node.create_mesh(network_id=state.session.network_id)
            host = LdnHost(config, state, node, control, link_tap)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(host._advertise)
                nursery.start_soon(host._serve)
                nursery.start_soon(host._announce)
                yield host
                nursery.cancel_scope.cancel()


async def _claim_subnet(config: LdnHostConfig, rng: random.Random) -> tuple[LdnHostState, trio.socket.SocketType]:
    """A network state whose host loopback address is free: control socket bound, Pia port probed."""
    last: OSError | None = None
    subnet = config.subnet
    if config.address is not None:
        packed = ipaddress.IPv4Address(config.address).packed
        if packed[:2] != b"\xa9\xfe" or packed[3] != 1:
            raise ConfigError(f"an LDN host address is 169.254.X.1, not {config.address}")
        subnet = packed[2]
    for _ in range(1 if subnet is not None else 20):
        state = LdnHostState(
            config.node.profile, config.game_key, rng=rng, max_participants=config.max_participants,
            name=config.name, local_communication_id=config.local_communication_id, game_mode=config.game_mode,
            subnet=subnet, session_key=config.session_key, direct=config.address is not None,
            socket_address=config.socket_address,
        )  # fmt: skip
        loopback = state.socket_ip(state.host.ip)
        try:
            probe = await _udp_socket((loopback, config.pia_port))
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE:
                raise
            last = exc
            continue
        with probe:  # held while the control socket takes a port, so that port is never the Pia port
            return state, await _udp_socket((loopback, 0), broadcast=True)
    raise OSError(errno.EADDRINUSE, f"no free simulated LDN subnet on loopback ({last})")


# ---------------------------------------------------------------------- scanner


@attrs.frozen
class FoundNetwork:
    """An advertisement heard on the discovery channel."""

    advertisement: Advertisement
    pia_port: int
    control: Address
    last_seen: float
    #: The discovery-channel port it was heard on.
    discovery_port: int = DISCOVERY_PORT

    @property
    def host_address(self) -> Address:
        """The host's Pia socket: on the address its advertisements came from."""
        return (self.control[0], self.pia_port)


async def scan(
    timeout: float,
    *,
    port: int = DISCOVERY_PORT,
    bind_ip: str = "0.0.0.0",
    local_communication_id: int | None = None,
    ssid: bytes | None = None,
    first: bool = False,
    link_tap: Tap | None = None,
    ignored: collections.Counter[str] | None = None,
) -> list[FoundNetwork]:
    """Listen for advertisements for *timeout* seconds; one entry per SSID, newest advert kept.

    *first*: return as soon as one matching network is heard.  *link_tap* sees each advertisement kept.
    *ignored* counts what was heard and not kept, by reason (``not_a_frame``, ``not_an_advertisement``,
    ``bad_port``: a Pia or control port 0, ``other_local_communication_id``, ``other_ssid``, ``no_ldn_host``,
    ``other_source``: an advert of a network
    already heard, from another address than its host's; ``too_many_networks``: past :data:`MAX_SCAN_NETWORKS`).
    """
    skipped: collections.Counter[str] = collections.Counter() if ignored is None else ignored
    found: dict[bytes, FoundNetwork] = {}
    with await _udp_socket((bind_ip, port), reuse=True) as sock:
        with trio.move_on_after(timeout):
            while True:
                data, addr = await sock.recvfrom(_MAX_DATAGRAM)
                try:
                    frame = decode_frame(data)
                except DecodeError:
                    skipped["not_a_frame"] += 1
                    continue
                if not isinstance(frame, AdvertFrame):
                    skipped["not_an_advertisement"] += 1
                    continue
                if frame.pia_port == 0 or frame.control_port == 0:
                    skipped["bad_port"] += 1  # names no socket: nothing could be sent there
                    continue
                adv = frame.advertisement
                if local_communication_id is not None and adv.local_communication_id != local_communication_id:
                    skipped["other_local_communication_id"] += 1
                    continue
                if ssid is not None and adv.ssid != ssid:
                    skipped["other_ssid"] += 1
                    continue
                if not adv.participants or not is_ldn_address(adv.host.ip):
                    skipped["no_ldn_host"] += 1
                    continue
                control = (str(addr[0]), frame.control_port)
                known = found.get(adv.ssid)
                if known is not None and known.control != control:
                    skipped["other_source"] += 1  # the network stays at the host first heard (a fake one takes nothing)
                    continue
                if known is None and len(found) >= MAX_SCAN_NETWORKS:
                    skipped["too_many_networks"] += 1
                    continue
                found[adv.ssid] = FoundNetwork(adv, frame.pia_port, control, trio.current_time(), port)
                if link_tap is not None:
                    link_tap(data, (str(addr[0]), int(addr[1])), (DEFAULT_BROADCAST, port), trio.current_time())
                if first:
                    break
    return list(found.values())


# ---------------------------------------------------------------------- station


class LdnStation:
    """A station inside a simulated LDN network: its address, MAC, derived keys and Pia node.

    Like a console it keeps listening to the network's advertisements and
    learns every participant's address and MAC from them (spec §7.1):
    ``advertisement`` is the newest one heard, ``seen`` every participant
    (LDN address → MAC) any advertisement listed.
    """

    def __init__(
        self, network: FoundNetwork, ip: str, mac: bytes, session: LdnSession, node: Node, *, direct: bool,
        relayed: bool = False,
    ) -> None:
        self.network = network
        self.advertisement = network.advertisement
        self.ip = ip
        self.mac = mac
        self.session = session
        self.node = node
        self.direct = direct
        self.relayed = relayed
        #: The newest Local protocol update session from the host (spec §5.10).
        self.update_session: UpdateSession | None = None
        if has_local_protocol(node.config.profile):
            node.set_protocol_handler(Proto.LOCAL, self._on_local)
        self.seen: dict[str, bytes] = {}
        #: Frames of the discovery channel not learnt from, by reason (``other_source``: this network's SSID
        #: from another address than its host's control socket; ``other_network``: another SSID's advert;
        #: ``not_an_advertisement``; ``not_a_frame``).
        self.ignored: collections.Counter[str] = collections.Counter()
        self._learn(network.advertisement)

    def _on_local(self, index: int, port: int, payload: bytes) -> None:
        try:
            update, ack = answer_update_session(self.node.config.profile, payload)
        except DecodeError:
            return
        self.update_session = update
        self.node.send_protocol(index, Proto.LOCAL, port, ack)

    def _learn(self, advertisement: Advertisement) -> None:
        self.advertisement = advertisement
        self.seen.update((p.ip, p.mac) for p in advertisement.participants if is_ldn_address(p.ip))

    def macs(self) -> dict[str, bytes]:
        """Socket address → MAC of every participant any advertisement listed (relay plan: the
        socket address is in the MAC, 02:00 + its IPv4 bytes, see :func:`pianode.mesh.wire.mac_for`)."""
        if self.relayed:
            return {str(ipaddress.IPv4Address(mac[2:6])): mac for mac in self.seen.values() if len(mac) == 6}
        return {(ip if self.direct else ldn_to_loopback(ip)): mac for ip, mac in self.seen.items()}

    def session_file(self, game_key_text: str) -> dict[str, Any]:
        """Decode inputs as this station knows them (see :meth:`LdnHostState.session_file`)."""
        out = {
            "version": self.node.config.profile.name,
            "network": "ldn",
            "game_key": game_key_text,
            "application_data": self.advertisement.application_data.hex(),
            "macs": {ip: mac_text(mac) for ip, mac in sorted(self.macs().items())},
        }
        if self.node.config.profile.version >= (6, 0):
            out["ssid"] = self.advertisement.ssid.hex()  # 6.x: the key and network id derive from it (spec §7.3)
        elif key_is_supplied(self.node.config.profile, self.session.pia):
            out["session_key"] = self.session.session_key.hex()  # 5.7-5.8: no rule derives it (spec §3.3)
        return out

    async def _follow(self) -> None:
        with await _udp_socket(("0.0.0.0", self.network.discovery_port), reuse=True) as sock:
            while True:
                data, addr = await sock.recvfrom(_MAX_DATAGRAM)
                try:
                    frame = decode_frame(data)
                except DecodeError:
                    self.ignored["not_a_frame"] += 1
                    continue
                if not isinstance(frame, AdvertFrame) or frame.advertisement.ssid != self.advertisement.ssid:
                    self.ignored["not_an_advertisement" if not isinstance(frame, AdvertFrame) else "other_network"] += 1
                    continue  # not ours to learn from
                # only the host's adverts tell who is in the network (another's table would split our MACs, nonces)
                if (str(addr[0]), frame.control_port) != self.network.control:
                    self.ignored["other_source"] += 1
                    log.debug("LDN station ignored an advert of its network from %s:%d", addr[0], addr[1])
                    continue
                self._learn(frame.advertisement)


def _station_address_of(network: FoundNetwork, ip: str) -> bool:
    """Whether *ip* is a station's address in *network*: in its host's 169.254.X.0/24, neither the host's (.1,
    spec §7.1) nor the subnet's or broadcast address; a host's reply naming another is not taken."""
    host = ipaddress.IPv4Address(network.advertisement.host.ip).packed
    a = ipaddress.IPv4Address(ip).packed
    return a[:3] == host[:3] and a != host and 1 <= a[3] <= 254


class JoinRefused(Exception):
    """The LDN host did not give this station an address."""


async def _associate(
    network: FoundNetwork, request: ConnectRequest, bind_ip: str, link_tap: Tap | None = None
) -> ConnectReply:
    with await _udp_socket((bind_ip, 0)) as sock:
        here = sock.getsockname()[:2]
        for _ in range(CONNECT_ATTEMPTS):
            data = encode_frame(request)
            await sock.sendto(data, network.control)
            if link_tap is not None:
                link_tap(data, here, network.control, trio.current_time())
            with trio.move_on_after(CONNECT_TIMEOUT):
                while True:
                    data, addr = await sock.recvfrom(_MAX_DATAGRAM)
                    try:
                        frame = decode_frame(data)
                    except DecodeError:
                        continue
                    from_host = (str(addr[0]), int(addr[1])) == network.control  # a reply from elsewhere is forged
                    if from_host and isinstance(frame, ConnectReply) and frame.token == request.token:
                        if link_tap is not None:
                            link_tap(data, network.control, here, trio.current_time())
                        return frame
    raise JoinRefused("the LDN host did not answer the connect request")


@asynccontextmanager
async def open_ldn_station(
    network: FoundNetwork,
    node_config: NodeConfig,
    game_key: bytes,
    *,
    name: str = "pianode",
    session_key: bytes | None = None,
    tap: Tap | None = None,
    rng: random.Random | None = None,
    address: str | None = None,
    socket_address: str | None = None,
    link_tap: Tap | None = None,
) -> AsyncIterator[LdnStation]:
    """Connect to the LDN network, derive its keys as a console does, and join its Pia mesh.

    *tap* sees the Pia datagrams the station's node sends, *link_tap* its connect request and the reply.

    *address*: the direct plan on a real link: the station's own ``169.254.X.Y``
    (its interface has it), requested from the host and bound.  None: the
    loopback plan, the host assigns an address and the station binds
    ``127.254.X.Y``.  *socket_address*: the relay plan, the station's sockets on
    this address (its relay site's virtual address); the host assigns the LDN address.

    Raises:
        ConfigError: the advertisement does not fit this version (see :func:`derive_session`).
        JoinRefused: no address from the host (full, or no answer).
        pianode.mesh.node.JoinError: the Pia mesh join failed.
    """
    rng = rng or random.Random(node_config.seed)
    try:
        session = derive_session(node_config.profile, game_key, network.advertisement, session_key=session_key)
    except DecodeError as exc:  # what a network advertises is not a setting of ours: it does not fit them (§7.2)
        raise ConfigError(f"its advertisement's application data does not decode for Pia "
                          f"{node_config.profile.name}: {exc}") from None  # fmt: skip
    request = ConnectRequest(rng.randbytes(8), name, requested_ip=address or "0.0.0.0")
    if address is not None and socket_address is not None:
        raise ConfigError("an LDN station takes a real link's address or a relay site's, not both")
    local = address or socket_address or "127.0.0.1"
    reply = await _associate(network, request, local, link_tap)
    if reply.result != 0:
        raise JoinRefused(f"the LDN host rejected the connection (reason {reply.result})")
    if address is not None and reply.ip != address:
        raise JoinRefused(f"the LDN host assigned {reply.ip}, not the requested {address}")
    if not _station_address_of(network, reply.ip):
        host_ip = network.advertisement.host.ip
        raise JoinRefused(f"the LDN host assigned {reply.ip}, not a station address of its network "
                          f"{ipaddress.IPv4Network(host_ip + '/24', strict=False)}")  # fmt: skip
    loopback = reply.ip if address is not None else socket_address or ldn_to_loopback(reply.ip)
    config = attrs.evolve(
        node_config,
        network=NetworkType.LDN,
        session_key=session.session_key,
        bind=(loopback, network.pia_port),
        name=name,
    )
    try:
        async with open_node(config, tap=tap) as node:
            await node.join(network.host_address, network_id=session.network_id)
            station = LdnStation(network, reply.ip, reply.mac, session, node, direct=address is not None,
                                 relayed=socket_address is not None)  # fmt: skip
            async with trio.open_nursery() as nursery:
                nursery.start_soon(station._follow)
                yield station
                nursery.cancel_scope.cancel()
    finally:
        with trio.CancelScope(shield=True), trio.move_on_after(1):
            # from the station's own socket address: the host frees a slot only for a notice from there
            with await _udp_socket((loopback, 0)) as sock:
                await sock.sendto(encode_frame(LeaveNotice(reply.ip)), network.control)
