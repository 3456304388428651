"""LAN discovery runtime: a host that answers browse requests and a browser that finds hosts.

Theory of operation (spec §6.1-§6.4):

* :class:`BrowseResponder` and :class:`BrowseClient` are the pure state
  machines: bytes and addresses in, datagrams out, no event loop.  The
  responder checks a request (size, challenge, search criteria), answers it
  with the session and a challenge reply, and fixes the session key param on
  the first valid request (the documented rule).  The client builds the
  request, verifies each reply's challenge and derives the session key from the
  param the session publishes.
* :class:`LanHost` and :func:`browse` drive them on Trio UDP sockets.  The host
  listens on ``0.0.0.0:30000`` (35000 for 6.x) with SO_REUSEADDR, SO_REUSEPORT
  and SO_BROADCAST, so several hosts on one machine each receive a browse
  broadcast; it sends every reply once to the requester (consoles send three
  copies, KW; see REPLY_COPIES), refuses a challenge request it has seen, and
  answers one source IP at most REPLIES_PER_SECOND times a second.  The
  browser broadcasts one request to ``127.255.255.255`` by default and collects
  replies until its timeout.  Every address and port is a parameter.

The challenge nonce uses the broadcast IPv4 the request was sent to
(``local | ~mask``; spec §6.1), so host and browser must be configured with the
same broadcast address.  Time comes only from Trio.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import secrets
from collections import Counter
from collections.abc import Callable

import attrs
import trio

from protocols.errors import AuthenticationError, ConfigError, DecodeError
from protocols.pia.keys import lan6_network_id, lan_constant_id, lan_network_id
from protocols.pia.lan import (
    BrowseReply,
    BrowseRequest,
    ChallengeRequest,
    LanHostAddress,
    LanNetworkProperty,
    LanSessionInfo,
    LanStationInfo,
    browse_port,
    lan_session_key,
    open_challenge_request,
    seal_challenge_reply,
    seal_challenge_request,
    verify_challenge_reply,
)
from protocols.pia.lan_criteria import LanSearchNetworkSetting, LanSessionSearchCriteria
from protocols.pia.types import InetAddress, StationLocation
from protocols.pia.versions import VersionProfile

__all__ = [
    "DEFAULT_BROADCAST",
    "MAX_FOUND",
    "BrowseClient",
    "BrowseResponder",
    "FoundSession",
    "LanHost",
    "LanStatistics",
    "browse",
    "lan_identity",
    "make_network_property",
    "make_session_info",
]

log = logging.getLogger(__name__)

DEFAULT_BROADCAST = "127.255.255.255"
MAX_DATAGRAM = 2048  # browse packets are at most 1364 bytes (spec §6.1)
#: Consoles send each browse reply three times (spec §6.1, KW).  pianode sends it once: the
#: requester's address is unverified (UDP), and three copies of a reply larger than the request
#: would reflect several times its bytes toward whoever a spoofed request names.
REPLY_COPIES = 1
#: Replies a second to one source IP, and challenge requests remembered (a replayed one is refused).
REPLIES_PER_SECOND = 4
SEEN_CHALLENGES = 4096
#: Sessions one browse keeps (consoles host one session each; a LAN holds a few): more verified replies, a flood
#: from a game-key holder, are dropped and counted (``too_many_sessions``), so a browse's memory stays bounded.
MAX_FOUND = 64
PIA_PORT = 49152  # first of the LAN Pia ports 49152-49155 (spec §6.1)

Address = tuple[str, int]
RandomBytes = Callable[[int], bytes]


def lan_identity(ip: str, port: int) -> tuple[int, int]:
    """``(constant id, network id = service variable id)`` of a LAN station (spec §4, D10)."""
    return lan_constant_id(ip, port), lan_network_id(ip, port)


def make_session_info(
    profile: VersionProfile,
    *,
    ip: str,
    port: int = PIA_PORT,
    max_participants: int = 4,
    min_participants: int = 1,
    name: str = "pianode",
    game_mode: int = 0,
    session_type: int = 0,
    attributes: tuple[int, ...] = (0,) * 6,
    application_version: int = 0,
    application_data: bytes = b"",
    variable_id: int | None = None,
    host_address_size: int = 18,
    random: RandomBytes = secrets.token_bytes,
) -> LanSessionInfo:
    """A one-station LanSessionInfo for a host at ``ip:port`` with LAN identities (spec §4, §6.6).

    The session key param is left empty (None): the responder fixes it from the
    first valid browse request, as consoles do.  ``host_address_size=6`` gives
    the 5.10 host-address form NintendoClients reads (spec §10.4).
    """
    v = profile.version
    if not (5, 2) <= v <= (5, 45):
        raise ConfigError(f"LanSessionInfo hosting needs Pia 5.2-5.45, not {profile.name}")
    constant_id, network_id = lan_identity(ip, port)
    var_id = variable_id if variable_id is not None else int.from_bytes(random(4), "big")
    host: LanHostAddress | StationLocation
    if v <= (5, 9):
        host = StationLocation(
            public=InetAddress.from_ip(ip, port),
            constant_id=constant_id,
            variable_id=var_id,
            service_variable_id=network_id,
        )
    else:
        host = LanHostAddress(ip, port, constant_id, var_id, network_id, host_address_size)
    sys_v = app_v = None
    if v > (5, 2):
        sys_v = profile.lan_system_version if profile.lan_system_version is not None else 0
        app_v = application_version
    return LanSessionInfo(
        game_mode=game_mode,
        network_id=network_id,
        host=host,
        attributes=attributes,
        current_participants=1,
        min_participants=min_participants,
        max_participants=max_participants,
        system_communication_version=sys_v,
        application_communication_version=app_v,
        session_type=session_type,
        application_data=application_data,
        is_opened=True,
        stations=(LanStationInfo.make(1, name, constant_id),),
        session_key_param=None,
    )


def make_network_property(
    profile: VersionProfile,
    *,
    ip: str,
    port: int = PIA_PORT,
    max_stations: int = 4,
    name: str = "pianode",
    application_version: int = 0,
    matchmake_key: int = 0,
    application_data: bytes = b"",
    random: RandomBytes = secrets.token_bytes,
) -> LanNetworkProperty:
    """A one-station LanNetworkProperty (6.16-6.30) for a host at ``ip:port`` (spec §4, §6.3).

    The network id is ``(random32 << 32) | IPv4``.  The session key param slot
    is left zero: the responder fills it from the first valid browse request.
    """
    if not (6, 16) <= profile.version <= (6, 30):
        raise ConfigError(f"LanNetworkProperty hosting needs Pia 6.16-6.30, not {profile.name}")
    sys_v = profile.lan_system_version if profile.lan_system_version is not None else 0
    system = LanNetworkProperty.system_property(
        system_version=sys_v, application_version=application_version, players=1, host_name=name
    )
    return LanNetworkProperty(
        network_id=lan6_network_id(ip, int.from_bytes(random(4), "big")),
        property_data=system + application_data,
        matchmake_key=matchmake_key,
        current_stations=1,
        max_stations=max_stations,
        is_opened=True,
        has_player_limit=False,
        current_players=1,
        host_ip=ip,
        host_port=port,
    )


@attrs.frozen
class LanStatistics:
    """Counters of a host or browser; ``dropped`` maps a reason to a count."""

    received: int
    sent: int
    answered: int
    dropped: dict[str, int]


class _Counters:
    def __init__(self) -> None:
        self.received = 0
        self.sent = 0
        self.answered = 0
        self.dropped: Counter[str] = Counter()
        #: The first drops with where they came from and what was wrong (for "why was nothing found").
        self.ignored: list[tuple[str, Address, object]] = []

    def drop(self, reason: str, addr: Address, detail: object = "") -> None:
        self.dropped[reason] += 1
        if len(self.ignored) < 64:
            self.ignored.append((reason, addr, detail))
        log.debug("dropped datagram from %s:%d: %s %s", addr[0], addr[1], reason, detail)

    def snapshot(self) -> LanStatistics:
        return LanStatistics(self.received, self.sent, self.answered, dict(self.dropped))


class BrowseResponder:
    """Host side of LAN discovery, sans-IO: :meth:`receive` returns the datagrams to send."""

    def __init__(
        self,
        profile: VersionProfile,
        game_key: bytes | None,
        session: LanSessionInfo | LanNetworkProperty,
        *,
        broadcast_ip: str = DEFAULT_BROADCAST,
        copies: int = REPLY_COPIES,
        random: RandomBytes = secrets.token_bytes,
        backend: str | None = None,
    ) -> None:
        if game_key is not None and len(game_key) != 16:
            raise ConfigError(f"game key must be 16 bytes, got {len(game_key)}")
        if profile.lan_challenge_version is not None and game_key is None:
            raise ConfigError(f"Pia {profile.name} LAN hosts need a game key for the crypto challenge")
        self.profile = profile
        self.game_key = game_key
        self.session = session
        self.broadcast_ip = broadcast_ip
        self.copies = copies
        self._random = random
        self._backend = backend
        self._counter = int.from_bytes(random(4), "big")  # nonce counter: any start, +1 per reply
        # A session without a param (5.x: None; 6.x: a zero slot) takes the first valid request's.
        if isinstance(session, LanSessionInfo):
            self._param_pending = session.session_key_param is None and profile.version >= (5, 7)
        else:
            self._param_pending = session.session_key_param == bytes(32)
        self.counters = _Counters()
        self._seen: collections.OrderedDict[bytes, None] = collections.OrderedDict()
        self._answered: dict[str, tuple[float, int]] = {}  # source IP -> (second it started, replies in it)

    def statistics(self) -> LanStatistics:
        return self.counters.snapshot()

    def receive(self, data: bytes, addr: Address, now: float | None = None) -> list[tuple[bytes, Address]]:
        """The datagrams to send for one browse request from *addr* at *now* (None: no rate limit)."""
        c = self.counters
        c.received += 1
        try:
            request = BrowseRequest.decode(data, self.profile)
        except DecodeError as exc:
            c.drop("malformed", addr, exc)
            return []
        if now is not None and not self._within_rate(addr[0], now):
            c.drop("rate_limited", addr)
            return []
        reply_challenge = None
        chal = request.challenge
        if chal is not None:
            if chal.version != self.profile.lan_challenge_version:
                c.drop("challenge_version", addr, chal.version)
                return []
            assert self.game_key is not None
            try:
                plaintext = open_challenge_request(chal, self.game_key, self.broadcast_ip, backend=self._backend)
            except AuthenticationError as exc:
                c.drop("bad_challenge", addr, exc)
                return []
            if chal.tag in self._seen:
                # The same authenticated request again: a capture replayed (from any source).
                c.drop("replayed", addr)
                return []
            self._seen[chal.tag] = None
            if len(self._seen) > SEEN_CHALLENGES:
                self._seen.popitem(last=False)
            self._counter = (self._counter + 1) & 0xFFFFFFFFFFFFFFFF
            reply_challenge, param = seal_challenge_reply(
                self.game_key,
                chal,
                plaintext,
                key=self._random(16),
                counter=self._counter,
                broadcast_ip=self.broadcast_ip,
                backend=self._backend,
            )
            # Spec §6.4 step 3: the first valid request fixes the published param.
            if self._param_pending:
                self._param_pending = False
                if isinstance(self.session, LanSessionInfo):
                    self.session = attrs.evolve(self.session, session_key_param=param)
                else:
                    self.session = self.session.with_session_key_param(param)
        if not self._matches(request):
            c.drop("no_match", addr)
            return []
        reply = BrowseReply(self.session, reply_challenge).encode(self.profile)
        c.answered += 1
        c.sent += self.copies
        return [(reply, addr)] * self.copies

    def _within_rate(self, ip: str, now: float) -> bool:
        start, count = self._answered.get(ip, (now, 0))
        if now - start >= 1.0:
            start, count = now, 0
        if count >= REPLIES_PER_SECOND:
            return False
        self._answered[ip] = (start, count + 1)
        if len(self._answered) > SEEN_CHALLENGES:
            self._answered.pop(next(iter(self._answered)))
        return True

    def _matches(self, request: BrowseRequest) -> bool:
        search = request.search
        if isinstance(search, LanSessionSearchCriteria) and isinstance(self.session, LanSessionInfo):
            return search.matches(self.session)
        if isinstance(search, LanSearchNetworkSetting) and isinstance(self.session, LanNetworkProperty):
            return search.matches(self.session, self.profile)
        return False


@attrs.frozen
class FoundSession:
    """A session a browse found: the host's reply, where it came from, and its session key."""

    info: LanSessionInfo | LanNetworkProperty
    address: Address
    session_key: bytes | None = attrs.field(repr=lambda b: "None" if b is None else b.hex())
    #: The param the challenge reply proved (``reply key ‖ request key``); None without a challenge.
    challenge_param: bytes | None = attrs.field(default=None, repr=False)

    @property
    def network_id(self) -> int:
        return self.info.network_id


class BrowseClient:
    """Browser side of LAN discovery, sans-IO: :meth:`request` then :meth:`receive` per reply."""

    def __init__(
        self,
        profile: VersionProfile,
        game_key: bytes | None,
        *,
        search: LanSessionSearchCriteria | LanSearchNetworkSetting | None = None,
        broadcast_ip: str = DEFAULT_BROADCAST,
        application_version: int | None = None,
        counter: int = 0,
        random: RandomBytes = secrets.token_bytes,
        backend: str | None = None,
    ) -> None:
        if game_key is not None and len(game_key) != 16:
            raise ConfigError(f"game key must be 16 bytes, got {len(game_key)}")
        if profile.lan_challenge_version is not None and game_key is None:
            raise ConfigError(f"Pia {profile.name} LAN browsing needs a game key for the crypto challenge")
        if search is None:
            search = LanSessionSearchCriteria.build() if profile.version < (6, 0) else LanSearchNetworkSetting(
                title_id=0 if profile.version >= (6, 23) else None
            )
        self.profile = profile
        self.game_key = game_key
        self.search = search
        self.broadcast_ip = broadcast_ip
        self.application_version = application_version
        self._backend = backend
        self._counter = counter
        self._sequence = 0  # challenge version 4: +1 per request, echoed by the reply (spec §6.4)
        self._random = random
        self._key = random(16)  # the challenge key and the challenge: drawn afresh for every request (spec §6.4)
        self._plaintext = random(256)
        self._challenge: ChallengeRequest | None = None
        self._seen: set[int] = set()
        self.counters = _Counters()

    def statistics(self) -> LanStatistics:
        return self.counters.snapshot()

    def request(self) -> bytes:
        """The browse request datagram (a fresh counter each call)."""
        challenge = None
        version = self.profile.lan_challenge_version
        if version is not None:
            assert self.game_key is not None
            if self._challenge is not None:
                # a new request: a reply to an earlier one (its nonce counter, its key) no longer verifies
                self._key, self._plaintext = self._random(16), self._random(256)
            challenge = seal_challenge_request(
                self.game_key,
                version=version,
                key=self._key,
                plaintext=self._plaintext,
                counter=self._counter,
                broadcast_ip=self.broadcast_ip,
                sequence_id=self._sequence if version == 4 else None,
                backend=self._backend,
            )
            self._counter += 1
            self._sequence = (self._sequence + 1) & 0xFF
        self._challenge = challenge
        self.counters.sent += 1
        return BrowseRequest(self.search, challenge).encode(self.profile)

    def receive(self, data: bytes, addr: Address) -> FoundSession | None:
        """A new verified session, or None (duplicate copy, foreign or bad datagram: counted)."""
        c = self.counters
        c.received += 1
        try:
            reply = BrowseReply.decode(data, self.profile)
        except DecodeError as exc:
            c.drop("malformed", addr, exc)
            return None
        info = reply.session
        param = None
        if reply.challenge is not None:
            assert self.game_key is not None
            sent = self._challenge
            if sent is None or (reply.challenge.version, reply.challenge.sequence_id) != (sent.version, sent.sequence_id):
                c.drop("challenge_version", addr)
                return None
            try:
                param = verify_challenge_reply(
                    reply.challenge, self.game_key, self._key, self._plaintext, self.broadcast_ip, backend=self._backend
                )
            except AuthenticationError as exc:
                c.drop("bad_challenge", addr, exc)
                return None
        if (
            info.system_communication_version is not None
            and self.profile.lan_system_version is not None
            and info.system_communication_version != self.profile.lan_system_version
        ):
            c.drop("system_version", addr, info.system_communication_version)
            return None
        if self.application_version is not None and info.application_communication_version != self.application_version:
            c.drop("application_version", addr, info.application_communication_version)
            return None
        if info.network_id in self._seen:
            c.drop("duplicate", addr)
            return None
        if len(self._seen) >= MAX_FOUND:
            c.drop("too_many_sessions", addr)
            return None
        self._seen.add(info.network_id)
        key = None
        published = info.session_key_param
        if self.game_key is not None and published is not None:
            key = lan_session_key(self.game_key, published)
        c.answered += 1
        return FoundSession(info, addr, key, param)


def _best_effort_sockopts(sock: trio.socket.SocketType, *, reuse: bool, broadcast: bool) -> None:
    # Best effort (some platforms lack SO_REUSEPORT or refuse an option): a
    # socket without them still works for a single host on the machine.
    opts: list[int] = []
    if reuse:
        opts.append(trio.socket.SO_REUSEADDR)
        if hasattr(trio.socket, "SO_REUSEPORT"):
            opts.append(trio.socket.SO_REUSEPORT)
    if broadcast:
        opts.append(trio.socket.SO_BROADCAST)
    for opt in opts:
        with contextlib.suppress(OSError):
            sock.setsockopt(trio.socket.SOL_SOCKET, opt, 1)


class LanHost:
    """Answer LAN browse requests on a UDP socket until cancelled.

    Use ``await nursery.start(host.run)``; it reports the bound address.
    """

    def __init__(
        self,
        profile: VersionProfile,
        game_key: bytes | None,
        session: LanSessionInfo | LanNetworkProperty,
        *,
        bind: Address | None = None,
        broadcast_ip: str = DEFAULT_BROADCAST,
        copies: int = REPLY_COPIES,
        tap: Callable[[bytes, Address, Address, float], None] | None = None,
    ) -> None:
        self.responder = BrowseResponder(profile, game_key, session, broadcast_ip=broadcast_ip, copies=copies)
        self.bind = bind if bind is not None else ("0.0.0.0", browse_port(profile))
        #: Sees every reply sent (data, source, destination, time): a recording includes discovery.
        self.tap = tap

    @property
    def session(self) -> LanSessionInfo | LanNetworkProperty:
        return self.responder.session

    def statistics(self) -> LanStatistics:
        return self.responder.statistics()

    async def run(self, *, task_status: trio.TaskStatus[Address] = trio.TASK_STATUS_IGNORED) -> None:
        with trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as sock:
            _best_effort_sockopts(sock, reuse=True, broadcast=True)
            await sock.bind(self.bind)
            where = sock.getsockname()
            task_status.started(where)
            while True:
                data, addr = await sock.recvfrom(MAX_DATAGRAM)
                for out, dest in self.responder.receive(data, addr[:2], trio.current_time()):
                    try:
                        await sock.sendto(out, dest)
                    except OSError as exc:  # a source no reply can reach (port 0: a forged request)
                        self.responder.counters.sent -= 1
                        self.responder.counters.drop("reply_not_sent", dest, exc)
                        continue
                    if self.tap is not None:  # (from the host's own address when listening on any)
                        src = getattr(self.session, "host_ip", where[0]) if where[0] == "0.0.0.0" else where[0]
                        self.tap(out, (src, where[1]), dest, trio.current_time())


async def browse(
    profile: VersionProfile,
    game_key: bytes | None,
    *,
    search: LanSessionSearchCriteria | LanSearchNetworkSetting | None = None,
    broadcast: Address | None = None,
    bind: Address = ("127.0.0.1", 0),
    timeout: float = 1.0,
    max_sessions: int = 0,
    application_version: int | None = None,
    client: BrowseClient | None = None,
    stop_when: Callable[[FoundSession], bool] | None = None,
    tap: Callable[[bytes, Address, Address, float], None] | None = None,
) -> list[FoundSession]:
    """Broadcast one browse request and return the verified sessions found within *timeout* seconds.

    *broadcast* defaults to ``(127.255.255.255, 30000)`` (35000 for 6.x); the
    challenge nonce uses its IPv4 address.  ``max_sessions`` > 0 returns as
    soon as that many sessions are found; *stop_when* returns as soon as a
    session it accepts is found (for example the one with a known network id).
    """
    if broadcast is None:
        broadcast = (DEFAULT_BROADCAST, browse_port(profile))
    if client is None:
        client = BrowseClient(
            profile, game_key, search=search, broadcast_ip=broadcast[0], application_version=application_version
        )
    found: list[FoundSession] = []
    with trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as sock:
        _best_effort_sockopts(sock, reuse=False, broadcast=True)
        await sock.bind(bind)
        request = client.request()
        try:
            await sock.sendto(request, broadcast)
        except OSError as exc:
            # (Linux: EINVAL from a loopback address to another network, ENETUNREACH without a route.)
            ip = sock.getsockname()[0]
            raise OSError(exc.errno, f"cannot send the browse request from {ip} to {broadcast[0]}:{broadcast[1]} "
                                     f"({exc.strerror or exc}): the browse must go out from an address on that "
                                     "network") from None  # fmt: skip
        if tap is not None:  # a recording includes the browse request
            tap(request, sock.getsockname(), broadcast, trio.current_time())
        with trio.move_on_after(timeout):
            while max_sessions <= 0 or len(found) < max_sessions:
                data, addr = await sock.recvfrom(MAX_DATAGRAM)
                session = client.receive(data, addr[:2])
                if session is not None:
                    found.append(session)
                    if stop_when is not None and stop_when(session):
                        break
    return found
