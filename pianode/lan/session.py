"""LAN sessions end to end: a hosting node that publishes itself, and the join flow a console follows.

Theory of operation (spec §6.6):

* **Host** (:func:`start_lan_host`): a :class:`~pianode.mesh.node.Node` creates a
  mesh on its Pia socket and a :class:`~pianode.lan.discovery.LanHost` answers browse
  requests with a LanSessionInfo describing it: host address = the node's
  socket, LAN identities of that address (spec §4), the node's variable id,
  and a session key param.  A small task re-reads ``node.stations()`` every
  ``refresh_interval`` seconds and republishes the participant count and the
  LanStationInfo list, so browsers see players come and go.  Once the node no longer hosts the mesh (it
  leaves it), the responder stops answering: no browser is sent to a host that has gone.
* **Joiner** (:func:`start_lan_join`): browse for opened sessions with a
  free slot (repeated until one answers or the time runs out) → pick the session by network id, or the first
  → session key from the *published* param (``HMAC-SHA256`` rule, spec §3.3;
  :class:`~pianode.lan.discovery.BrowseClient` derives it) → open a node with that key →
  station connect + mesh join to the host address taken from the info.
* **Scripted meshes** (:func:`form_lan_mesh`): the same two steps for N node
  configurations in one Trio run; ``pianode mesh --network lan`` uses it.

The session key param.  Consoles fix it from the first valid browse request
(``reply key ‖ request key``, spec §6.4 step 3).  A node's session key is
fixed when its mesh is created, before anyone browses, so the host draws its
param up front in the same form (16 random bytes ‖ 16 random bytes) and
publishes it from the start.  Browsers cannot tell the difference: every
joiner takes the key from the param found in the LanSessionInfo, never from
its own challenge (spec §6.4 step 3).

Pia sockets: without an explicit port a node takes the first free port of
49152-49155 on its address (spec §6.1, the ports consoles use), then any free
port.  LAN ids derive from IP and port, so nodes on one machine each sit on
their own 127.0.0.x (or in their own network namespace).

Pia 5.7-5.45 publish a LanSessionInfo; 6.16-6.30 a LanNetworkProperty on port 35000
(:mod:`pianode.lan.property6`).  Time comes only from Trio.
"""

from __future__ import annotations

import ipaddress
import secrets
import sys
from collections.abc import Callable, Sequence

import attrs
import trio

if sys.version_info < (3, 11):  # pragma: no cover
    from exceptiongroup import BaseExceptionGroup

from pianode.mesh import legacy
from pianode.mesh.config import NodeConfig
from pianode.lan import property6
from pianode.lan.discovery import DEFAULT_BROADCAST, PIA_PORT, FoundSession, LanHost, browse, make_session_info
from pianode.mesh.node import JoinError, Node, open_node
from protocols.errors import ConfigError
from protocols.pia.keys import lan_network_id
from protocols.pia.lan import (
    LanHostAddress,
    LanNetworkProperty,
    LanSessionInfo,
    LanStationInfo,
    browse_port,
    lan_session_key,
)
from protocols.pia.lan_criteria import LanSearchNetworkSetting, LanSessionSearchCriteria
from protocols.pia.versions import NetworkType, VersionProfile

__all__ = [
    "LanJoin",
    "LanJoinError",
    "LanMesh",
    "LanSession",
    "console_port",
    "draw_session_key_param",
    "find_session",
    "form_lan_mesh",
    "join_found",
    "no_answer",
    "start_lan_host",
    "start_lan_join",
]

Address = tuple[str, int]
Tap = Callable[[bytes, Address, Address, float], None]

CONSOLE_PORTS = range(PIA_PORT, PIA_PORT + 4)  # 49152-49155 (spec §6.1)
MAX_LAN_STATIONS = 16  # LanSessionInfo holds 16 LanStationInfo slots (spec §6.3)


class LanJoinError(JoinError):
    """No LAN session answered the browse, or the chosen one could not be joined."""


def draw_session_key_param(random: Callable[[int], bytes] = secrets.token_bytes) -> bytes:
    """A fresh 32-byte session key param shaped like the challenge's (reply key ‖ request key, spec §6.4)."""
    return random(16) + random(16)


async def console_port(ip: str) -> int:
    """The first of 49152-49155 free on *ip* (spec §6.1), else 0 (any free port).

    The probe socket is closed before the node binds, so another process may
    take the port in between; the node's bind then fails loudly.
    """
    for port in CONSOLE_PORTS:
        with trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as probe:
            try:
                await probe.bind((ip, port))
            except OSError:
                continue
            return port
    return 0


def _check_config(config: NodeConfig) -> VersionProfile:
    if config.network is not NetworkType.LAN:
        raise ConfigError(f"a LAN session needs network 'lan', not {config.network.value!r}")
    if config.bind[0] == "0.0.0.0":
        raise ConfigError("a LAN node needs a specific IPv4 address: its LAN ids derive from it (spec §4)")
    return config.profile


async def _serve_node(config: NodeConfig, tap: Tap | None, *, task_status: trio.TaskStatus[Node]) -> None:
    async with open_node(config, tap=tap) as node:
        task_status.started(node)
        await trio.sleep_forever()


async def _start_node(nursery: trio.Nursery, config: NodeConfig, tap: Tap | None) -> Node:
    if config.bind[1] == 0:
        config = attrs.evolve(config, bind=(config.bind[0], await console_port(config.bind[0])))
    node: Node = await nursery.start(_serve_node, config, tap)
    return node


# ---------------------------------------------------------------------------- host
@attrs.define(eq=False)
class LanSession:
    """A hosted LAN session: the node, its browse responder and the info it publishes."""

    node: Node
    lan_host: LanHost
    #: Where the browse responder listens (``0.0.0.0:30000`` by default).
    browse_address: Address
    session_key_param: bytes = attrs.field(repr=False)
    name: str = "pianode"
    #: Stop the publisher and the responder (the node stays up until its nursery ends).
    cancel_scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)

    @property
    def info(self) -> LanSessionInfo | LanNetworkProperty:
        """The LanSessionInfo (LanNetworkProperty in 6.x) browsers receive right now."""
        return self.lan_host.session

    @property
    def network_id(self) -> int:
        return self.info.network_id

    @property
    def session_key(self) -> bytes:
        assert self.node.config.session_key is not None
        return self.node.config.session_key

    def refresh(self) -> LanSessionInfo | LanNetworkProperty:
        """Republish the participants from the node's mesh table; returns the published info."""
        info = self.info
        rows = [s for s in self.node.stations() if s.index is not None and (s.is_self or s.state == "connected")]
        if isinstance(info, LanNetworkProperty):
            updated6 = property6.with_stations(info, rows)
            if updated6 != info:
                self.lan_host.responder.session = updated6
            return updated6
        rows.sort(key=lambda s: (not s.is_host, s.index))
        stations = tuple(
            LanStationInfo.make(1 if s.is_host else 2, self.name if s.is_self else "", s.constant_id)
            for s in rows[:MAX_LAN_STATIONS]
        )
        updated = attrs.evolve(info, current_participants=len(stations), stations=stations)
        if updated != info:
            # The param is already fixed, so the responder keeps publishing it unchanged.
            self.lan_host.responder.session = updated
        return updated

    @property
    def hosting(self) -> bool:
        """Whether the node still hosts the session's mesh (not leaving it, not left, not replaced as host)."""
        mesh = self.node.session
        if mesh is None or mesh.leaving or mesh.closed:
            return False
        return self.node.station_index is not None and self.node.host_index == self.node.station_index

    async def _publish(self, interval: float) -> None:
        # Spec §6.6: browsers join the station a reply names as host.  One that has left the mesh (or is leaving
        # it) can admit nobody, so it stops answering (within *interval*): the responder ends with the publisher.
        while self.hosting:
            self.refresh()
            await trio.sleep(interval)
        self.cancel_scope.cancel()


async def start_lan_host(
    nursery: trio.Nursery,
    config: NodeConfig,
    game_key: bytes,
    *,
    max_participants: int = 4,
    name: str = "pianode",
    game_mode: int = 0,
    session_type: int = 0,
    attributes: tuple[int, ...] = (0,) * 6,
    application_version: int = 0,
    application_data: bytes = b"",
    host_address_size: int = 18,
    browse_bind: Address | None = None,
    broadcast_ip: str = DEFAULT_BROADCAST,
    session_key_param: bytes | None = None,
    refresh_interval: float = 0.2,
    tap: Tap | None = None,
) -> LanSession:
    """Host a LAN session in *nursery*: node + mesh + browse responder + publisher.

    *config* gives version, bind address (port 0: first free of 49152-49155)
    and timers; its session key is replaced by the one derived from the
    published param.  *browse_bind* defaults to ``0.0.0.0:30000``; *broadcast_ip*
    must be the address browsers send to (it is in the challenge nonce).

    Raises:
        ConfigError: not a LAN 5.7-5.45 configuration, a wildcard bind
            address, or more than 16 participants.
    """
    profile = _check_config(config)
    if not 2 <= max_participants <= MAX_LAN_STATIONS:
        raise ConfigError(f"a LAN mesh holds 2-{MAX_LAN_STATIONS} participants, got {max_participants}")
    param = session_key_param if session_key_param is not None else draw_session_key_param()
    key = lan_session_key(game_key, param)
    cfg = attrs.evolve(config, session_key=key, max_stations=max_participants, name=name)
    node = await _start_node(nursery, cfg, tap)
    ip, port = node.address
    info: LanSessionInfo | LanNetworkProperty
    if property6.is_lan6(profile):
        info = property6.host_property(
            profile, ip=ip, port=port, max_stations=max_participants, name=name, session_key_param=param,
            random32=int.from_bytes(secrets.token_bytes(4), "big"), application_version=application_version,
            application_data=application_data,
        )  # fmt: skip
        await node.create_mesh(network_id=info.network_id & 0xFFFFFFFF)
    else:
        await node.create_mesh(network_id=lan_network_id(ip, port))
        me = next(s for s in node.stations() if s.is_self)
        info = make_session_info(
            profile, ip=ip, port=port, max_participants=max_participants, name=name, game_mode=game_mode,
            session_type=session_type, attributes=attributes, application_version=application_version,
            application_data=application_data, variable_id=me.variable_id, host_address_size=host_address_size,
        )  # fmt: skip
        info = attrs.evolve(info, session_key_param=param)
    lan_host = LanHost(profile, game_key, info, bind=browse_bind, broadcast_ip=broadcast_ip, tap=tap)
    session = LanSession(node, lan_host, ("", 0), param, name)

    async def serve(*, task_status: trio.TaskStatus[Address]) -> None:
        with session.cancel_scope:
            async with trio.open_nursery() as inner:
                where = await inner.start(lan_host.run)
                inner.start_soon(session._publish, refresh_interval)
                task_status.started(where)

    session.browse_address = await nursery.start(serve)
    return session


# ---------------------------------------------------------------------------- joiner
async def find_session(
    profile: VersionProfile,
    game_key: bytes,
    *,
    network_id: int | None = None,
    bind_ip: str = "127.0.0.1",
    broadcast: Address | None = None,
    timeout: float = 10.0,
    interval: float = 1.0,
    application_version: int | None = None,
    search: LanSessionSearchCriteria | LanSearchNetworkSetting | None = None,
    tap: Tap | None = None,
) -> FoundSession | None:
    """Browse every *interval* seconds until a session answers (the one with *network_id*, if given).

    Returns the first match, or None when *timeout* passes.  Only sessions
    whose challenge verified and that publish a session key param qualify.
    *search* defaults to what a console looking for a game to join asks for:
    opened sessions with a free slot (spec §6.2 search flags 0x4 and 0x8).
    """
    if search is None:
        search = (
            property6.search_setting(profile) if property6.is_lan6(profile)
            else LanSessionSearchCriteria.build(opened_only=True, vacant_only=True)
        )  # fmt: skip
    if broadcast is None:
        broadcast = (DEFAULT_BROADCAST, browse_port(profile))

    def wanted(f: FoundSession) -> bool:
        return f.session_key is not None and (network_id is None or f.network_id == network_id)

    deadline = trio.current_time() + timeout
    while (left := deadline - trio.current_time()) > 0:
        found = await browse(
            profile, game_key, broadcast=broadcast, bind=(bind_ip, 0), timeout=min(interval, left),
            application_version=application_version, search=search, stop_when=wanted, tap=tap,
        )  # fmt: skip
        for f in found:
            if wanted(f):
                return f
    return None


@attrs.define(eq=False)
class LanJoin:
    """A node that joined a LAN session it found by browsing."""

    node: Node
    found: FoundSession
    station_index: int

    @property
    def info(self) -> LanSessionInfo | LanNetworkProperty:
        return self.found.info


async def start_lan_join(
    nursery: trio.Nursery,
    config: NodeConfig,
    game_key: bytes,
    *,
    network_id: int | None = None,
    broadcast: Address | None = None,
    browse_timeout: float = 10.0,
    browse_interval: float = 1.0,
    application_version: int | None = None,
    search: LanSessionSearchCriteria | LanSearchNetworkSetting | None = None,
    tap: Tap | None = None,
) -> LanJoin:
    """Find a session by browsing from ``config.bind``'s address and join it (spec §6.6).

    The node starts in *nursery* with the session key derived from the
    published param; *config*'s own session key is ignored.

    Raises:
        LanJoinError: nothing answered within *browse_timeout*.
        JoinError: the host refused the join or did not answer.
    """
    profile = _check_config(config)
    found = await find_session(
        profile, game_key, network_id=network_id, bind_ip=config.bind[0], broadcast=broadcast,
        timeout=browse_timeout, interval=browse_interval, application_version=application_version, search=search,
        tap=tap,
    )  # fmt: skip
    if found is None:
        raise LanJoinError(no_answer(network_id, browse_timeout))
    return await join_found(nursery, config, found, tap=tap)


def _is_ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


def _is_unicast(ip: str, port: int) -> bool:
    address = ipaddress.IPv4Address(ip)
    return 0 < port < 0x10000 and not (address.is_unspecified or address.is_multicast or ip == "255.255.255.255")


def no_answer(network_id: int | None, browse_timeout: float) -> str:
    """Why a join failed when its browse found nothing to join."""
    which = "a LAN session" if network_id is None else f"LAN session 0x{network_id:08x}"
    return f"no answer from {which} within {browse_timeout:g} s of browsing"


async def join_found(nursery: trio.Nursery, config: NodeConfig, found: FoundSession, *,
                     tap: Tap | None = None) -> LanJoin:  # fmt: skip
    """Join the session *found* by a browse: start the node in *nursery* with its session key, join its host.

    Raises:
        LanJoinError: the session cannot be joined (no documented LAN key source).
        JoinError: the host refused the join or did not answer.
    """
    profile = _check_config(config)
    info = found.info
    if not isinstance(info, (LanSessionInfo, LanNetworkProperty)):
        why = legacy.discovery_refusal(profile, NetworkType.LAN)
        raise LanJoinError(why or f"Pia {profile.name} sessions cannot be joined (no documented LAN key source)")
    assert found.session_key is not None
    if not _is_ipv4(info.host_ip):
        # A reply names its host's address itself (anyone with the game key can answer a browse): the node's
        # IPv4 socket could send it nothing, and the join would end as a silent host's.
        where = f"[{info.host_ip}]" if ":" in info.host_ip else repr(info.host_ip)
        raise LanJoinError(f"the session found names its host at {where}:{info.host_port}, not an IPv4 address: "
                           "it cannot be joined")  # fmt: skip
    if not _is_unicast(info.host_ip, info.host_port):
        # Unspecified, port 0, broadcast or multicast: no station is there to answer a connection request (the
        # join would end as a silent host's).  NintendoClients e8f85f5 hosting at 5.3-5.9 names 0.0.0.0:0: it
        # writes a StationLocation's one address from the public slot, and keeps its own in the local one.
        raise LanJoinError(f"the session found names its host at {info.host_ip}:{info.host_port}, not a unicast "
                           "address and port: it cannot be joined")  # fmt: skip
    # The node holds no more stations than the session publishes as its maximum (as its host does, started with
    # max_stations = max participants): should it become host after a migration, it admits no more than browsers
    # were told fit.  (2..32: what a mesh holds; a session publishing less is not narrowed below 2.)  The node
    # then also takes only station indexes below that maximum in the host's tables: hosts give the lowest free
    # index (spec §5.4: NC; pianode's own hosts too), which stays below the count of stations, so below it.
    published = info.max_stations if isinstance(info, LanNetworkProperty) else info.max_participants
    capacity = min(config.max_stations, max(2, published))
    node = await _start_node(nursery, attrs.evolve(config, session_key=found.session_key, max_stations=capacity), tap)
    if isinstance(info, LanNetworkProperty):
        # 6.x publishes no host ids (spec §6.3): the host's connection response names them.
        index = await node.join((info.host_ip, info.host_port), network_id=info.network_id & 0xFFFFFFFF)
    else:
        index = await node.join(
            (info.host_ip, info.host_port), network_id=info.network_id,
            host_identity=(info.host_constant_id, info.host_variable_id),
        )  # fmt: skip
    return LanJoin(node, found, index)


async def serve_lan_when_host(
    nursery: trio.Nursery,
    join: LanJoin,
    game_key: bytes,
    *,
    browse_bind: Address | None = None,
    broadcast_ip: str = DEFAULT_BROADCAST,
    refresh_interval: float = 0.2,
    poll_interval: float = 0.2,
    tap: Tap | None = None,
) -> None:
    """Start a task in *nursery* that takes over the LAN session once *join*'s node becomes host.

    After a host migration (README "Host migration") the mesh runs on, and newcomers join through the new
    host (spec §5.4: join requests go to the host); on a LAN they find it only by browsing (§6), so the new
    host answers browse requests from then on: the session found, with its network id, param and settings,
    naming the new host, and the participants of its mesh.  5.x names the host's address and ids in the
    LanSessionInfo; 6.x names its address in the LanNetworkProperty's host StationAddress and its name in the
    system property (6.x publishes no host ids: a joiner learns them from the connection response).
    """
    found = join.info
    if found.session_key_param is None:
        return
    node = join.node

    async def watch() -> None:
        while node.station_index is None or node.host_index != node.station_index:
            await trio.sleep(poll_interval)
        ip, port = node.address
        info: LanSessionInfo | LanNetworkProperty
        if isinstance(found, LanNetworkProperty):
            info = property6.with_host(found, ip=ip, port=port, name=node.config.name)
        else:
            me = next(s for s in node.stations() if s.is_self)
            size = found.host.address_size if isinstance(found.host, LanHostAddress) else 18
            own = make_session_info(node.config.profile, ip=ip, port=port, variable_id=me.variable_id,
                                    host_address_size=size)  # fmt: skip
            info = attrs.evolve(found, host=own.host)
        lan_host = LanHost(node.config.profile, game_key, info, bind=browse_bind, broadcast_ip=broadcast_ip, tap=tap)
        session = LanSession(node, lan_host, ("", 0), found.session_key_param or b"", node.config.name)
        try:
            with session.cancel_scope:  # (the publisher cancels it once this node no longer hosts)
                async with trio.open_nursery() as inner:
                    session.browse_address = await inner.start(lan_host.run)
                    inner.start_soon(session._publish, refresh_interval)
        except BaseExceptionGroup as group:  # (not except*: Python 3.10 has no such syntax)
            _, rest = group.split(OSError)  # the browse port is taken here: the mesh carries on, unpublished
            if rest is not None:
                raise rest from None

    nursery.start_soon(watch)


# ---------------------------------------------------------------------------- scripted mesh
@attrs.define(eq=False)
class LanMesh:
    """Result of :func:`form_lan_mesh`: the host session, the joins that succeeded and the ones that failed."""

    host: LanSession
    joins: list[LanJoin]
    #: ``(index into the configurations, why)`` for each node that found no session or was refused.
    failures: list[tuple[int, JoinError]] = attrs.field(factory=list)

    @property
    def nodes(self) -> list[Node]:
        """Every node that is in the mesh: the host, then the joiners in the order of the configurations."""
        return [self.host.node, *(j.node for j in self.joins)]


async def form_lan_mesh(
    nursery: trio.Nursery,
    configs: Sequence[NodeConfig],
    game_key: bytes,
    *,
    browse_port_number: int | None = None,
    broadcast_ip: str = DEFAULT_BROADCAST,
    browse_timeout: float = 10.0,
    tap: Tap | None = None,
    name: str = "pianode",
    session_key_param: bytes | None = None,
) -> LanMesh:
    """Form a mesh by real LAN discovery: ``configs[0]`` hosts, every other one browses and joins.

    Every node runs in *nursery* (cancel it to stop them).  The host's
    responder listens on ``0.0.0.0:browse_port_number`` (default 30000) and
    joiners broadcast to ``broadcast_ip`` on that port; each joiner selects the
    host's network id, so other sessions answering on the same port are
    ignored.  Joins run concurrently; a join that fails is reported in
    ``failures`` (the others go on).  *session_key_param* fixes the published
    param (and so the session key) for reproducible runs.  Should the host
    leave, the member that becomes host publishes the session from then on
    (:func:`serve_lan_when_host`), as ``pianode lan join`` does.

    Raises:
        ConfigError: fewer than 2 or more than 16 nodes (the LanSessionInfo
            slots), or a configuration that cannot host or join a LAN session.
    """
    if not 2 <= len(configs) <= MAX_LAN_STATIONS:
        raise ConfigError(f"a LAN mesh holds 2-{MAX_LAN_STATIONS} nodes, got {len(configs)}")
    for config in configs:
        _check_config(config)
    profile = configs[0].profile
    port = browse_port_number if browse_port_number is not None else browse_port(profile)
    host = await start_lan_host(
        nursery, configs[0], game_key, max_participants=len(configs), name=name, browse_bind=("0.0.0.0", port),
        broadcast_ip=broadcast_ip, session_key_param=session_key_param, tap=tap,
    )  # fmt: skip
    joins: dict[int, LanJoin] = {}
    failures: list[tuple[int, JoinError]] = []

    async def join_one(i: int, config: NodeConfig) -> None:
        try:
            joins[i] = await start_lan_join(
                nursery, config, game_key, network_id=host.network_id, broadcast=(broadcast_ip, port),
                browse_timeout=browse_timeout, tap=tap,
            )  # fmt: skip
        except JoinError as exc:
            failures.append((i, exc))
            return
        # Should the host leave (``pianode mesh --leave``), the member that takes over answers browses.
        await serve_lan_when_host(nursery, joins[i], game_key, browse_bind=("0.0.0.0", port),
                                  broadcast_ip=broadcast_ip, tap=tap)  # fmt: skip

    async with trio.open_nursery() as group:
        for i, config in enumerate(configs[1:], start=1):
            group.start_soon(join_one, i, config)
    return LanMesh(host, [joins[i] for i in sorted(joins)], sorted(failures, key=lambda f: f[0]))
