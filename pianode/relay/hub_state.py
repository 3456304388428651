"""The hub's rooms, virtual addresses and forwarding, sans-IO: messages and datagrams in, messages and datagrams out.

Theory of operation
-------------------
A *room* stands for one LAN or LDN network: a private subnet (by default the
room's own /24 of ``10.77.0.0/16``) whose members are relay clients.  A client
joins a room with :class:`~protocols.relay_control.Hello` and gets a virtual
IPv4 address in it (the one it asks for, after a reconnect, when that is still
free), which its node then uses as its own: Pia's addresses, nonces and
LanSessionInfo carry it, so nothing above the socket changes.

A relayed datagram comes in an envelope naming its source and destination.
The hub checks the source is the sender's own virtual address (a member cannot
speak for another) and forwards the envelope unchanged:

* to the member whose address is the destination;
* to every other member of the room when the destination is ``255.255.255.255``
  or the room's broadcast address (LAN browse on 30000/35000, group packets,
  LDN advertisements: every broadcast a LAN would carry);
* nowhere otherwise (counted).

The hub never decrypts Pia; it counts datagrams and bytes per client and room,
and drops by reason.

Each site has a budget of the hub's work (a token bucket, ``SITE_RATE`` a
second, ``SITE_BURST`` at once): one unit for each of its packets the hub
reads (charged before it is decrypted: :meth:`HubState.charge`) and one for
each copy of its datagrams the hub forwards, so a broadcast costs one per
member.  A site over its budget loses what is beyond, counted as ``over the
site's budget``; the other sites' budgets are their own, so one flooding site
cannot use up the hub's time for them.

A site coming back before the hub noticed its old connection die takes its
address over (the old connection is closed).  A site is its certificate and
its address (every station of a ``pianode mesh --relay`` run shares one
certificate, and all of them come back together after their link dropped), so
takeovers are limited per certificate name and address, ``TAKEOVER_BURST`` at
once and one more each ``TAKEOVER_INTERVAL``, and per certificate name in all
(``TAKEOVERS_PER_NAME``): one beyond is closed (not refused: the site may come
back), counted as ``takeovers over limit``, and the address stays with the
old connection until that one ends.

One certificate holds at most ``MAX_SITES_PER_NAME`` connections, and the hub
``MAX_SITES`` in all: each costs QUIC state, a room's address and a budget of
its own.  One beyond is refused at admission (``connections over limit``).
"""

from __future__ import annotations

import ipaddress
import itertools
from collections import Counter

import attrs

from pianode.relay.limits import RateLimits, TokenBucket
from protocols.errors import DecodeError
from protocols.relay_control import (
    ENVELOPE_SIZE, PROTOCOL_VERSION, BulkData, Hello, Member, MemberJoined, MemberLeft, Refused, Welcome,
    decode_envelope, room_name_problem,
)  # fmt: skip

__all__ = ["MAX_SITES", "MAX_SITES_PER_NAME", "SITE_BURST", "SITE_RATE", "TAKEOVER_BURST", "TAKEOVER_INTERVAL", "TAKEOVERS_PER_NAME", "ClientRecord", "HubState", "Room"]

LIMITED_BROADCAST = "255.255.255.255"
#: Addresses a room's network may not hold: a site keeps 0.x and 127.x to itself, and multicast,
#: the reserved block and the limited broadcast are no host's.
_RESERVED = tuple(ipaddress.IPv4Network(n) for n in ("0.0.0.0/8", "127.0.0.0/8", "224.0.0.0/3"))
#: A site's budget of the hub's work, in units a second (a packet read, a copy forwarded).  A station of
#: a 32-station mesh at 60 Hz (pianode bench's largest) needs about 4000: its datagrams to each peer and
#: the copies of its group broadcasts, 60 x 31 each, and the packets carrying them; this is five times
#: that.  What is beyond is dropped, a packet before it is decrypted (a header read is all it costs).
SITE_RATE = 20000.0
#: ...and at once: a quarter second's worth.
SITE_BURST = 5000.0
_OVER_BUDGET = "over the site's budget"
#: Takeovers of one address by one certificate at once, then one per TAKEOVER_INTERVAL seconds: a site
#: whose link drops comes back once per drop (its client waits 0.1 s, then up to 1 s between tries).
TAKEOVER_BURST = 3
TAKEOVER_INTERVAL = 2.0
#: Takeovers by one certificate over all its addresses at once (a NAT's worth of stations sharing it
#: coming back together), then as many again over _NAME_REFILL seconds.
TAKEOVERS_PER_NAME = 64
_NAME_REFILL = 8.0
#: Connections the hub holds for one certificate (a site, or every station of a run sharing it): each
#: costs QUIC state, a room's address and a budget of its own, so without a bound one certificate held
#: all of the hub's memory and every room.  Twice what TAKEOVERS_PER_NAME allows back at once: a NAT's
#: worth of stations coming back before their old connections were noticed dead.
MAX_SITES_PER_NAME = 256
#: ...and connections in all.
MAX_SITES = 4096
_OVER_CONNECTIONS = "connections over limit"


@attrs.define(eq=False)
class Room:
    name: str
    room_id: int
    network: ipaddress.IPv4Network
    members: dict[str, int] = attrs.Factory(dict)  # virtual address -> client id
    counters: Counter[str] = attrs.Factory(Counter)

    @property
    def broadcast(self) -> str:
        return str(self.network.broadcast_address)


@attrs.define(eq=False)
class ClientRecord:
    client_id: int
    name: str
    peer: str
    room: Room | None = None
    address: str | None = None
    counters: Counter[str] = attrs.Factory(Counter)
    budget: TokenBucket = attrs.Factory(lambda: TokenBucket(SITE_RATE, SITE_BURST))  # see the module docstring


class HubState:
    """Every room and admitted client of one hub."""

    def __init__(
        self,
        network: str = "10.77.0.0/16",
        room_prefix: int = 24,
        max_rooms: int = 256,
        *,
        site_rate: float = SITE_RATE,
        site_burst: float = SITE_BURST,
    ) -> None:
        self.site_rate, self.site_burst = site_rate, site_burst
        self.network = ipaddress.IPv4Network(network)
        if not self.network.prefixlen <= room_prefix <= 30:
            raise ValueError(f"room prefix /{room_prefix} must be within {self.network} and at most /30")
        reserved = [str(r) for r in _RESERVED if self.network.overlaps(r)]
        if reserved:
            raise ValueError(f"{self.network} overlaps {', '.join(reserved)}, reserved (this host, loopback, "
                             "multicast, broadcast): give a private network such as 10.77.0.0/16")
        self.room_prefix = room_prefix
        # Only the first max_rooms: a /0 has 16 million /24s.
        self._subnets = list(itertools.islice(self.network.subnets(new_prefix=room_prefix), max_rooms))
        self.rooms: dict[str, Room] = {}
        self.clients: dict[int, ClientRecord] = {}
        self.drops: Counter[str] = Counter()
        #: Clients the driver closes (not a refusal: the site may come back), with the reason.
        self.to_close: list[tuple[int, str]] = []
        self._takeovers = RateLimits(1 / TAKEOVER_INTERVAL, TAKEOVER_BURST)
        self._takeovers_by_name = RateLimits(TAKEOVERS_PER_NAME / _NAME_REFILL, TAKEOVERS_PER_NAME)
        #: Rooms whose subnet a new room took over, the hub having no other free (see _new_room).
        self.rooms_reused = 0
        #: Clients gone, newest last (their counters stay in the table).
        self.departed: list[ClientRecord] = []
        self._sites_by_name: Counter[str] = Counter()  # connections held per certificate name

    # ------------------------------------------------------------------ membership
    def admit(self, client_id: int, name: str, peer: str) -> str | None:
        """A client whose certificate passed; it joins a room with :meth:`hello`.  Returns why it
        is refused instead (counted), when its certificate or the hub holds as many connections as allowed."""
        if self._sites_by_name[name] >= MAX_SITES_PER_NAME:
            self.drops[_OVER_CONNECTIONS] += 1
            return f"{name} already has {MAX_SITES_PER_NAME} connections to this hub"
        if len(self.clients) >= MAX_SITES:
            self.drops[_OVER_CONNECTIONS] += 1
            return f"hub holds {MAX_SITES} connections, as many as it takes"
        self.clients[client_id] = ClientRecord(client_id, name, peer, budget=TokenBucket(self.site_rate, self.site_burst))
        self._sites_by_name[name] += 1
        return None

    def charge(self, client_id: int, now: float) -> bool:
        """One packet of the client read: False (counted) when it is over its budget and the packet is
        to be dropped unread.  True for a connection not admitted yet (bounded in hub.py)."""
        client = self.clients.get(client_id)
        if client is None or client.budget.take(now):
            return True
        self._drop(client, _OVER_BUDGET)
        return False

    def hello(self, client_id: int, hello: Hello, now: float = 0.0) -> list[tuple[int, object]]:
        """Place the client in its room; returns (client id, message) to send: a Welcome and
        MemberJoined for the others, or a Refused (or nothing: the client is in ``to_close``)."""
        client = self.clients.get(client_id)
        if client is None:  # refused at admission (its Hello came in the same packets): closed already
            return []
        if hello.version != PROTOCOL_VERSION:
            return [(client_id, Refused(f"relay protocol version {hello.version} not supported (hub speaks {PROTOCOL_VERSION})"))]
        if client.room is not None:
            return [(client_id, Refused("already in a room"))]
        problem = room_name_problem(hello.room)
        if problem is not None:
            return [(client_id, Refused(problem))]
        room = self.rooms.get(hello.room) or self._new_room(hello.room)
        if room is None:
            return [(client_id, Refused(f"hub is full ({len(self.rooms)} rooms, none of them empty)"))]
        out: list[tuple[int, object]] = []
        holder = room.members.get(hello.address)
        if holder is not None and self.clients[holder].name == client.name:
            # The same site (same certificate) coming back before the hub noticed its old
            # connection die: the new connection takes the address over, so the mesh above keeps it.
            site = (client.name, hello.address)
            too_often = None
            if not self._takeovers.ready(site, now):
                too_often = f"{hello.address} taken over {TAKEOVER_BURST} times in {TAKEOVER_BURST * TAKEOVER_INTERVAL:g} s"
            elif not self._takeovers_by_name.ready(client.name, now):
                too_often = f"{TAKEOVERS_PER_NAME} of its addresses taken over in {_NAME_REFILL:g} s"
            if too_often is not None:
                self.drops["takeovers over limit"] += 1
                self.to_close.append((client_id, f"{client.name} reconnected too often ({too_often}): "
                                      "the address stays with its old connection until that one ends"))
                return []
            self._takeovers.take(site, now)
            self._takeovers_by_name.take(client.name, now)
            out.extend(self.leave(holder))
            self.to_close.append((holder, "superseded by a new connection of the same site"))
        address = self._pick_address(room, hello.address)
        if address is None:
            return [(client_id, Refused(f"room {room.name} is full"))]
        others = list(room.members.items())
        room.members[address] = client_id
        client.room, client.address = room, address
        room.counters["joins"] += 1
        member = Member(address, client.name)
        welcome = Welcome(
            room.name, room.room_id, address, room.network.prefixlen,
            tuple(Member(a, self.clients[c].name) for a, c in others),
        )  # fmt: skip
        out.append((client_id, welcome))
        out.extend((c, MemberJoined(member)) for _, c in others)
        return out

    def _new_room(self, name: str) -> Room | None:
        """A room on a free subnet; when none is free, on the subnet of the room left empty
        longest ago (which goes: a site joining a new room on every reconnect must not fill
        the hub for good).  None when every room has members."""
        used = {r.network for r in self.rooms.values()}
        subnet = next((s for s in self._subnets if s not in used), None)
        if subnet is None:
            empty = next((r for r in self.rooms.values() if not r.members), None)
            if empty is None:
                return None
            del self.rooms[empty.name]
            self.rooms_reused += 1
            subnet = empty.network
        room = Room(name, self._subnets.index(subnet) + 1, subnet)
        self.rooms[name] = room
        return room

    def _pick_address(self, room: Room, wanted: str) -> str | None:
        if wanted != "0.0.0.0":
            ip = ipaddress.IPv4Address(wanted)
            if ip in room.network and ip not in (room.network.network_address, room.network.broadcast_address) and (
                wanted not in room.members
            ):
                return wanted
        for ip in room.network.hosts():
            if str(ip) not in room.members:
                return str(ip)
        return None

    def leave(self, client_id: int) -> list[tuple[int, object]]:
        """The client's connection ended; tells the rest of its room."""
        client = self.clients.pop(client_id, None)
        if client is None:
            return []
        self._sites_by_name[client.name] -= 1
        if not self._sites_by_name[client.name]:
            del self._sites_by_name[client.name]
        self.departed = [*self.departed[-255:], client]
        if client.room is None or client.address is None:
            return []
        room = client.room
        room.members.pop(client.address, None)
        room.counters["leaves"] += 1
        if not room.members:  # to the end of the line of empty rooms a new room may take over
            self.rooms[room.name] = self.rooms.pop(room.name)
        return [(c, MemberLeft(client.address)) for c in room.members.values()]

    # ------------------------------------------------------------------ forwarding
    def forward(self, client_id: int, data: bytes, now: float) -> list[int]:
        """The clients that get this envelope (unchanged), or none (the drop is counted)."""
        client = self.clients.get(client_id)
        if client is None or client.room is None:
            self.drops["not in a room"] += 1
            return []
        room = client.room
        client.counters["datagrams_in"] += 1
        client.counters["bytes_in"] += len(data)
        try:
            env = decode_envelope(data)
        except DecodeError:
            return self._drop(client, "bad envelope")
        if env.source[0] != client.address:
            return self._drop(client, "spoofed source")
        dst = env.destination[0]
        if dst in (LIMITED_BROADCAST, room.broadcast):
            targets = [c for a, c in room.members.items() if c != client_id]
            room.counters["broadcasts"] += 1
        else:
            target = room.members.get(dst)
            if target is None:
                return self._drop(client, "no such member")
            targets = [target]
        if not client.budget.take(now, len(targets)):
            return self._drop(client, _OVER_BUDGET)
        payload = len(data) - ENVELOPE_SIZE
        room.counters["datagrams"] += len(targets)
        room.counters["bytes"] += payload * len(targets)
        for t in targets:
            rec = self.clients[t]
            rec.counters["datagrams_out"] += 1
            rec.counters["bytes_out"] += len(data)
        return targets

    def bulk(self, client_id: int, msg: BulkData) -> list[tuple[int, BulkData]]:
        """Bulk data for a member (or the whole room, ``0.0.0.0``), its source filled in."""
        client = self.clients.get(client_id)
        if client is None or client.room is None or client.address is None:
            self.drops["not in a room"] += 1
            return []
        room = client.room
        client.counters["bulk_in"] += len(msg.data)
        if msg.address == "0.0.0.0":
            targets = [c for c in room.members.values() if c != client_id]
        elif msg.address in room.members:
            targets = [room.members[msg.address]]
        else:
            self._drop(client, "no such member")
            return []
        out = BulkData(client.address, msg.channel, msg.data)
        for t in targets:
            self.clients[t].counters["bulk_out"] += len(msg.data)
        return [(t, out) for t in targets]

    def count_drop(self, client_id: int, reason: str) -> None:
        """Something of the client's dropped elsewhere (the hub's bulk queues), counted here."""
        client = self.clients.get(client_id)
        if client is None:
            self.drops[reason] += 1
        else:
            self._drop(client, reason)

    def _drop(self, client: ClientRecord, reason: str) -> list[int]:
        client.counters[f"dropped: {reason}"] += 1
        self.drops[reason] += 1
        return []

    # ------------------------------------------------------------------ reporting
    def table(self) -> tuple[list[str], list[list[object]]]:
        """One row per client (with its room), for the hub's counters table."""
        headers = ["room", "address", "client", "peer", "dgrams in", "dgrams out", "bytes in", "bytes out", "dropped",
                   "state"]  # fmt: skip
        rows: list[list[object]] = []
        here = [(c, "here") for c in self.clients.values()] + [(c, "left") for c in self.departed]
        for c, state in sorted(here, key=lambda x: (x[0].room.name if x[0].room else "", x[0].address or "", x[1])):
            dropped = sum(v for k, v in c.counters.items() if k.startswith("dropped"))
            rows.append([
                c.room.name if c.room else "-", c.address or "-", c.name, c.peer, c.counters["datagrams_in"],
                c.counters["datagrams_out"], c.counters["bytes_in"], c.counters["bytes_out"], dropped, state,
            ])  # fmt: skip
        return headers, rows

    def room_lines(self) -> list[str]:
        """One line per room: members now, and what the hub relayed in it."""
        return [
            f"room {r.name} ({r.network}): {len(r.members)} member(s), relayed {r.counters['datagrams']} datagram(s) "
            f"({r.counters['bytes']} bytes), {r.counters['broadcasts']} broadcast(s), {r.counters['joins']} join(s)"
            for r in self.rooms.values()
        ]
