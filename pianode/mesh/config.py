"""Node configuration: one frozen value holding every setting of a Pia node."""

from __future__ import annotations

import ipaddress
from typing import Any, Protocol

import attrs

from pianode.mesh import legacy
from protocols.errors import ConfigError
from protocols.pia import session6
from protocols.pia.versions import NetworkType, VersionProfile, profile_for

__all__ = ["NodeConfig", "SocketFactory", "node_refusal"]


def node_refusal(profile: VersionProfile, network: NetworkType) -> str | None:
    """Why the node does not run *profile* on *network* (one line), or None when it does."""
    if session6.is_pia6(profile):
        return session6.refusal(profile, network)  # 6.16-6.41
    if network is NetworkType.NPLN:
        return "npln exists in Pia 6.x only (its nonce, spec §3.2)"
    if profile.version > (5, 45):
        return (
            f"the node speaks Pia 3.3-5.45 and 6.16-6.41 (station and mesh protocols); {profile.name} is decode-only"
        )
    return legacy.refusal(profile, network)  # 3.3-5.6 (None from 5.7 on)


def _network(value: str | NetworkType) -> NetworkType:
    if isinstance(value, NetworkType):
        return value
    try:
        return NetworkType(str(value).lower())
    except ValueError:
        names = ", ".join(n.value for n in NetworkType)
        raise ConfigError(f"unknown network type {value!r}; choose from {names}") from None


def _key(value: bytes | str | None) -> bytes | None:
    if value is None or isinstance(value, bytes):
        key = value
    else:
        try:
            key = bytes.fromhex(value)
        except ValueError:
            raise ConfigError(f"session key {value!r} is not hex") from None
    if key is not None and len(key) != 16:
        raise ConfigError(f"session key must be 16 bytes (32 hex digits), got {len(key)}")
    return key


def _bind(value: tuple[str, int]) -> tuple[str, int]:
    host, port = value
    try:
        ipaddress.IPv4Address(host)
    except ValueError:
        raise ConfigError(f"bind address {host!r} is not an IPv4 address") from None
    if not 0 <= int(port) <= 65535:
        raise ConfigError(f"port {port} out of range")
    return (host, int(port))


def _default_network(version: str) -> NetworkType:
    """LAN, or LDN for a 6.x version whose LAN the spec does not give (protocols.pia.session6)."""
    try:
        profile = profile_for(version, allow_nearest=True)  # (the version check itself comes later)
    except ConfigError:
        return NetworkType.LAN  # the version check names the problem
    return session6.default_network(profile) if session6.is_pia6(profile) else NetworkType.LAN


class SocketFactory(Protocol):
    """What ``NodeConfig.socket_factory`` needs: ``trio.abc.SocketFactory``'s one method."""

    def socket(self, family: int, type: int, proto: int) -> Any: ...  # noqa: A002 - Trio's signature


#: The largest datagram a node takes; a longer one is dropped and counted (``oversized``).  A
#: console's Pia receive buffer is 1472 bytes (spec §1.8) and a node sends at most ``mtu`` (≤ 1472),
#: so nothing a Pia station sends is cut; the margin takes a third-party peer that does not bound
#: what it sends (NintendoClients e8f85f5 sends any message in one datagram).
MAX_DATAGRAM = 2048

@attrs.frozen(kw_only=True)
class NodeConfig:
    """Settings of one node.

    Attributes:
        version: Pia version (``"5.18"``, ``"5.29"``, ...); picks every wire format.
        network: ``lan``, ``ldn``, ``nex`` or ``npln`` (6.16-6.30): picks identities and the nonce rule;
            by default ``lan``, or ``ldn`` for 6.32+ (whose LAN the spec does not give).
        session_key: 16-byte session key; the creator draws one when None.
        bind: local (IPv4, port); port 0 picks a free one.
        max_stations: mesh capacity (at most 32).
        keepalive_interval: seconds between keep-alives to each station (1 Hz).
        station_timeout: a station silent this long is removed.
        join_timeout: a join with no answer fails after this long (10 s, spec §5.4).
        resend_interval: first retransmission delay of acked station/mesh messages (500 ms, spec §5.3).
        rtt_interval: seconds between RTT probes to each station, stretched in a
            large mesh so that the node sends at most ``rtt_probe_rate`` probes a
            second in all (31 stations at 8 a second: each probed every ~4 s).
        rtt_probe_rate: most RTT probes a second a node sends (all stations together),
            spaced at least 1 / rate apart.
        mtu: largest datagram the node builds.
        gathering_id: NEX gathering id (nonce prefix); random when None.
        aead_backend: "cryptography", "pycryptodome" or None for the fastest installed.
        allow_nearest_version: accept an undocumented version by using the nearest documented one.
        name: player name announced in the handshake.
        seed: seed of the node's random draws (ids, nonces) for reproducible runs; None = OS entropy.
        group_broadcast: (broadcast IPv4, port) for packets addressed to several
            stations (5.27+, receivers in the footer): each goes out once to this
            address instead of once per station, and the node also listens on
            ``0.0.0.0:port`` (SO_REUSEADDR), as every station of the session does.
            A reliable broadcast then goes out as one such packet too, each
            station's segment under its destination bit.
            None (default): one unicast copy per station.
        socket_factory: where the node's sockets come from: any ``trio.abc.SocketFactory``
            (a relay site's virtual network, ``pianode.relay.client.RelaySite``; an
            in-memory network); None (default): the Trio run's, the OS's unless
            ``trio.socket.set_custom_socket_factory`` installed another.  ``bind`` is then
            an address of that network.
    """

    version: str = "5.18"
    network: NetworkType = attrs.field(
        default=attrs.Factory(lambda self: _default_network(self.version), takes_self=True),
        converter=_network,
    )
    session_key: bytes | None = attrs.field(default=None, converter=_key)
    bind: tuple[str, int] = attrs.field(default=("127.0.0.1", 0), converter=_bind)
    max_stations: int = 32
    keepalive_interval: float = 1.0
    station_timeout: float = 5.0
    join_timeout: float = 10.0
    resend_interval: float = 0.5
    rtt_interval: float = 1.0
    rtt_probe_rate: float = 8.0
    mtu: int = 1364
    gathering_id: int | None = None
    aead_backend: str | None = None
    allow_nearest_version: bool = False
    name: str = "pianode"
    seed: int | None = None
    receive_queue: int = 4096
    #: The largest reliable message (after inflating) the node takes or sends: bigger ones are
    #: dropped and counted (``oversized``).  64 KiB is far above what a game sends in one
    #: message, and keeps a member from making the node hold megabytes per message.
    max_message_size: int = 64 * 1024
    group_broadcast: tuple[str, int] | None = attrs.field(default=None, converter=attrs.converters.optional(_bind))
    socket_factory: SocketFactory | None = attrs.field(default=None, eq=False)

    def __attrs_post_init__(self) -> None:
        if not self.rtt_probe_rate > 0:
            raise ConfigError(f"rtt probe rate must be positive, got {self.rtt_probe_rate}")
        if not 1024 <= self.max_message_size <= 1 << 24:
            raise ConfigError(f"max message size must be 1024..16777216 bytes, got {self.max_message_size}")
        if not 2 <= self.max_stations <= 32:
            raise ConfigError(f"max stations must be 2..32, got {self.max_stations}")
        if not 400 <= self.mtu <= 1472:
            # 400: room for a join-response fragment with several stations; 1472: the Pia receive buffer (spec §1.8).
            raise ConfigError(f"mtu must be 400..1472 bytes, got {self.mtu}")
        prof = self.profile
        if self.group_broadcast is not None and self.group_broadcast[1] == 0:
            raise ConfigError("group broadcast needs a fixed port (every station listens on it)")
        why = node_refusal(prof, self.network)
        if why is not None:
            raise ConfigError(why)

    @property
    def profile(self) -> VersionProfile:
        return profile_for(self.version, allow_nearest=self.allow_nearest_version)
