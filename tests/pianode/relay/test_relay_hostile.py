"""The hub against hostile peers, sans-IO (tests/support/relay_wire.py): what they send is dropped and counted,
the hub says why in one printable line, and the sites that behave keep their service."""

from __future__ import annotations

import time
import tracemalloc

import pytest
from relay_pki import Pki, make_pki
from relay_wire import Wire, WireSite, initial

from pianode.relay import hub as hub_module
from pianode.relay import hub_state
from pianode.relay import quic as quic_module
from pianode.relay.hub_state import (
    MAX_SITES_PER_NAME, SITE_BURST, SITE_RATE, TAKEOVER_BURST, TAKEOVER_INTERVAL, TAKEOVERS_PER_NAME, HubState,
)  # fmt: skip
from pianode.relay.quic import MAX_PENDING_DATAGRAMS, EventKind, RelayEvent
from protocols.relay_control import BulkData, Hello, Ping, Refused, Welcome, encode_envelope


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _welcomed(site) -> Welcome:  # type: ignore[no-untyped-def]
    welcomes = [m for m in site.control() if isinstance(m, Welcome)]
    assert welcomes, site.control()
    return welcomes[0]


def test_a_handshake_flood_is_bounded_per_address_and_in_all_and_others_still_connect(pki: Pki) -> None:
    lines: list[str] = []
    wire = Wire(pki.credentials("hub"), log=lines.append)
    for i in range(3 * hub_module.MAX_HANDSHAKES_PER_ADDRESS):  # one address, a new connection id each time
        wire.raw(initial(), ("127.0.0.66", 1000 + i))
    assert len(wire.hub._conns) == hub_module.MAX_HANDSHAKES_PER_ADDRESS
    for i in range(2 * hub_module.MAX_HANDSHAKES):  # many addresses
        wire.raw(initial(), (f"127.0.{1 + i // 200}.{10 + i % 200}", 2000))
    assert len(wire.hub._conns) == hub_module.MAX_HANDSHAKES
    assert wire.hub.state.drops["handshakes over limit"] > 0
    # a room's site still gets in once the half-open ones time out (no new ones crowd it out meanwhile)
    wire.pump(duration=10.0)
    assert len(wire.hub._conns) == 0
    site = wire.site(pki.credentials("site-a"), ip="127.0.0.66")
    assert _welcomed(site).address == "10.77.0.1"
    # every refusal is in the log, but the hub keeps only the latest ones
    assert len(wire.hub.refusals) <= hub_module.MAX_REFUSALS_KEPT
    assert all("no TLS handshake within" in line for line in wire.hub.refusals), wire.hub.refusals[:3]


def test_text_a_peer_chose_reaches_the_log_as_one_printable_line(pki: Pki) -> None:
    lines: list[str] = []
    wire = Wire(pki.credentials("hub"), log=lines.append)
    forged = "bye\nrefused: 127.0.0.9:1: forged\x1b[2J" + "x" * 900  # a close frame holds ~1000 bytes
    # before its certificate is checked: a close in the first flight (which aioquic takes for a violation)
    early = wire.sites[("127.0.0.3", 1)] = WireSite(wire, pki.credentials("site-a"), ("127.0.0.3", 1))
    early.conn.quic.close(error_code=0, reason_phrase=forged)
    wire.pump()
    assert not early.conn.admitted
    # after: an admitted site leaving with that reason
    site = wire.site(pki.credentials("site-b"))
    _welcomed(site)
    site.conn.quic.close(error_code=0, reason_phrase=forged)
    wire.pump()
    assert len(lines) == 3, lines  # refused (early), joined, left
    for line in lines:
        assert line.isprintable() and len(line) < 400, repr(line)


@pytest.mark.parametrize("room", ["two\nlines", "bell\x07", "tab\tbed", " ", "x" * 65, ""])
def test_a_room_name_with_control_characters_is_refused(room: str) -> None:
    state = HubState()
    state.admit(1, "site-a", "127.0.0.2:1")
    (target, msg), = state.hello(1, Hello(room, ""))
    assert target == 1 and isinstance(msg, Refused)
    assert "room name" in msg.reason and msg.reason.isprintable()


def test_rooms_left_empty_do_not_fill_the_hub() -> None:
    """A site that joins a new room on each reconnect took a subnet each time, for good: after
    max_rooms of them the hub refused every new room ("hub is full")."""
    state = HubState(max_rooms=4)
    for i in range(20):
        state.admit(i, "site-a", "127.0.0.2:1")
        (_, msg), = state.hello(i, Hello(f"room-{i}", ""))
        assert isinstance(msg, Welcome), msg
        state.leave(i)
    state.admit(100, "site-b", "127.0.0.3:1")
    state.admit(101, "site-c", "127.0.0.4:1")
    assert all(isinstance(m, Welcome) for _, m in state.hello(100, Hello("kept", "")))
    # a room with a member is never taken over
    for i in range(3):
        state.admit(200 + i, "site-d", "127.0.0.5:1")
        state.hello(200 + i, Hello(f"busy-{i}", ""))
    (_, msg), = state.hello(101, Hello("one-too-many", ""))
    assert isinstance(msg, Refused) and "full" in msg.reason
    assert state.rooms["kept"].members == {"10.77.0.1": 100} or list(state.rooms["kept"].members.values()) == [100]


def test_a_flooding_site_cannot_push_another_sites_datagrams_out_of_a_members_queue(pki: Pki) -> None:
    wire = Wire(pki.credentials("hub"))
    a, b, c = (wire.site(pki.credentials(n)) for n in ("site-a", "site-b", "site-c"))
    addr = {s: _welcomed(s).address for s in (a, b, c)}
    to_b = next(conn for conn in wire.hub._conns.values() if conn.peer_name == "site-b")
    flood = encode_envelope((addr[a], 1), (addr[b], 1), b"flood")
    for i in range(4 * MAX_PENDING_DATAGRAMS):  # b's path is slow: nothing leaves the hub meanwhile
        to_b.send_datagram(flood)
        if i % 100 == 0:
            to_b.send_datagram(encode_envelope((addr[c], 1), (addr[b], 1), b"from c %d" % i))
    pending = list(to_b.quic._datagrams_pending)
    from_c = [p for p in pending if b"from c" in p]
    assert len(from_c) == len(range(0, 4 * MAX_PENDING_DATAGRAMS, 100)), len(from_c)
    assert len(pending) <= MAX_PENDING_DATAGRAMS
    assert to_b.counters["stale_dropped"] > 0


def test_a_close_reason_too_long_for_a_packet_goes_out_cut_to_one_line(pki: Pki) -> None:
    """A hub's Refused may be up to a control frame long; the site closing with it raised
    QuicPacketBuilderStop from aioquic (the reason did not fit the packet)."""
    wire = Wire(pki.credentials("hub"))
    site = wire.site(pki.credentials("site-a"))
    _welcomed(site)
    site.conn.close("two\nlines " + "y" * 5000, refused=False)
    wire.pump()
    left = [line for line in wire.hub.state.departed]
    assert len(left) == 1 and site.conn.closed_reason.startswith("two\nlines")
    to_site = wire.hub.refusals  # no refusal: an admitted site left
    assert not to_site


@pytest.mark.parametrize("network", ["0.0.0.0/8", "127.0.0.0/16", "224.0.0.0/4", "240.0.0.0/4", "0.0.0.0/0"])
def test_a_network_of_reserved_addresses_is_refused_at_once(network: str) -> None:
    """A site treats 0.0.0.0, 127.x and broadcasts as its own (client.py); multicast is no host.  And
    0.0.0.0/0 made the hub list its 16 million /24s before it started (minutes, gigabytes)."""
    with pytest.raises(ValueError, match="reserved"):
        HubState(network)


def test_a_large_network_costs_the_hub_nothing_to_set_up() -> None:
    start = time.perf_counter()
    state = HubState("32.0.0.0/6")  # 262144 /24s, of which the hub uses max_rooms
    assert time.perf_counter() - start < 0.25
    state.admit(1, "site-a", "127.0.0.2:1")
    (_, msg), = state.hello(1, Hello("lan", ""))
    assert isinstance(msg, Welcome) and msg.address == "32.0.0.1"


def test_an_admitted_site_that_never_says_hello_is_refused_after_the_deadline(pki: Pki) -> None:
    """A site whose certificate passed but that only pings held its connection (and its place
    among the hub's connections) for good: nothing asked it to join a room."""
    lines: list[str] = []
    wire = Wire(pki.credentials("hub"), log=lines.append)
    mute = wire.sites[("127.0.0.2", 1)] = WireSite(wire, pki.credentials("site-a"), ("127.0.0.2", 1))
    mute.conn.send_control(Ping(1))  # its first words on the control stream: a ping, not Hello
    wire.pump()
    assert mute.conn.admitted
    for _ in range(60):  # 30 s of the wire's clock at most, pinging every 0.5 s
        mute.conn.send_control(Ping(1))
        wire.pump(duration=0.5)
        if not wire.hub._conns:
            break
    assert not wire.hub._conns, "the mute site still holds its connection"
    assert mute.conn.closed_reason is not None and "no Hello within" in mute.conn.closed_reason, mute.conn.closed_reason
    assert wire.hub.state.drops["no Hello in time"] == 1
    said = [line for line in lines if "no Hello within" in line]
    assert len(said) == 1 and said[0].isprintable(), lines
    # a site that says Hello at once keeps its place past the deadline
    site = wire.site(pki.credentials("site-b"))
    _welcomed(site)
    for _ in range(30):
        site.conn.send_control(Ping(2))
        wire.pump(duration=0.5)
    assert site.conn.closed_reason is None and len(wire.hub._conns) == 1


def test_a_close_in_a_sites_first_packets_is_told_in_words(pki: Pki) -> None:
    """QUIC sends an application close before the handshake as a transport close with
    APPLICATION_ERROR and no reason (RFC 9000 10.2.3): the hub said 'connection closed (error 0xc)'."""
    lines: list[str] = []
    wire = Wire(pki.credentials("hub"), log=lines.append)
    early = wire.sites[("127.0.0.3", 1)] = WireSite(wire, pki.credentials("site-a"), ("127.0.0.3", 1))
    early.conn.quic.close(error_code=0, reason_phrase="changed my mind")
    wire.pump(duration=2.0)
    assert not wire.hub._conns
    (line,) = wire.hub.refusals
    assert "error 0xc" not in line and "closed by the site before the TLS handshake completed" in line, line
    assert line.isprintable() and lines == [f"refused: {line}"]


def test_a_reconnect_storm_with_one_certificate_is_rate_limited(pki: Pki) -> None:
    """Each new connection of a site asking for its address took it over from the last one, as often
    as it liked: every takeover is a leave and a join told to the whole room."""
    wire = Wire(pki.credentials("hub"))
    first = wire.site(pki.credentials("site-a"))
    address = _welcomed(first).address
    other = wire.site(pki.credentials("site-b"))
    _welcomed(other)
    start = wire.now
    storm = [wire.site(pki.credentials("site-a"), address=address) for _ in range(20)]
    elapsed = wire.now - start
    assert elapsed < 10.0
    taken = [s for s in storm if any(isinstance(m, Welcome) for m in s.control())]
    turned = [s for s in storm if s not in taken]
    assert 1 <= len(taken) <= TAKEOVER_BURST + elapsed / TAKEOVER_INTERVAL + 1, (len(taken), elapsed)
    assert wire.hub.state.drops["takeovers over limit"] == len(turned)
    wire.pump(duration=1.0)
    for s in turned:  # told why, and not for good: the site may come back later
        reason = s.conn.closed_reason or ""
        assert "taken over" in reason and not reason.startswith("refused") and reason.isprintable(), reason
    joined = [m for m in other.control() if type(m).__name__ == "MemberJoined"]
    assert len(joined) <= 1 + len(taken)  # the room heard of each takeover allowed, no more
    # once the storm is over, the site takes its address over again
    for _ in range(int(2 * TAKEOVER_INTERVAL)):
        taken[-1].conn.send_control(Ping(3))  # the holder lives on
        wire.pump(duration=1.0)
    assert taken[-1].conn.closed_reason is None
    again = wire.site(pki.credentials("site-a"), address=address)
    assert _welcomed(again).address == address


def test_takeovers_are_limited_per_certificate_over_all_its_addresses() -> None:
    state = HubState()
    n = TAKEOVERS_PER_NAME + 6
    for i in range(n):  # one certificate holding many addresses (a run's stations), then all come back
        state.admit(i, "station", "127.0.0.2:1")
        state.hello(i, Hello("lan", "", f"10.77.0.{i + 1}"))
    for i in range(n):
        state.admit(1000 + i, "station", "127.0.0.2:2")
        state.hello(1000 + i, Hello("lan", "", f"10.77.0.{i + 1}"), now=1.0)
    assert state.drops["takeovers over limit"] == n - TAKEOVERS_PER_NAME
    turned = [reason for _, reason in state.to_close if "too often" in reason]
    assert len(turned) == n - TAKEOVERS_PER_NAME and all(r.isprintable() for r in turned)


def test_a_broadcast_flood_is_held_to_the_sites_budget_and_others_get_through(pki: Pki) -> None:
    """One site's broadcasts cost the hub once per member, without limit: a flooding site used the
    hub's time up (on a real socket the other sites' datagrams waited behind, or were lost)."""
    wire = Wire(pki.credentials("hub"))
    flooder, good, r1, r2 = (wire.site(pki.credentials(n)) for n in ("site-a", "site-b", "site-c", "site-c"))
    addr = {s: _welcomed(s).address for s in (flooder, good, r1, r2)}
    flood = encode_envelope((addr[flooder], 1), ("255.255.255.255", 1), b"flood" * 20)
    start, began = wire.now, time.perf_counter()
    rounds, per_round = 40, 100  # 4000 broadcasts to 3 members, as fast as QUIC takes them
    for i in range(rounds):
        for _ in range(per_round):
            flooder.conn.quic.send_datagram_frame(flood)
        good.conn.send_datagram(encode_envelope((addr[good], 1), (addr[r1], 1), b"good %d" % i))
        wire.pump(duration=0.001)
        assert time.perf_counter() - began < 60
    elapsed = wire.now - start
    wire.pump(duration=0.5)  # what is on its way arrives
    got = [d for d in r1.datagrams() if b"good" in d]
    assert len(got) == rounds, len(got)  # every one of the well-behaved site's
    copies = sum(b"flood" in d for s in (good, r1, r2) for d in s.datagrams())
    assert copies <= SITE_BURST + elapsed * SITE_RATE, (copies, elapsed)
    assert wire.hub.state.drops["over the site's budget"] > 0, (copies, elapsed, dict(wire.hub.state.drops), flooder.conn.counters)
    flooder_record = next(c for c in wire.hub.state.clients.values() if c.address == addr[flooder])
    assert flooder_record.counters["dropped: over the site's budget"] > 0


def test_bulk_the_hub_holds_is_bounded_per_sender_and_in_all(pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each member's bulk backlog was capped, the hub's not: broadcasts to a room of N members that
    read slowly made the hub hold N backlogs (N x 64 MB), a copy of each frame per member, and a
    well-behaved site's bulk to a member found that member's backlog full."""
    mb = 1 << 20
    monkeypatch.setattr(quic_module, "MAX_BULK_BACKLOG", 8 * mb)  # the limits, scaled down for the test
    monkeypatch.setattr(hub_module, "MAX_SENDER_BULK", 4 * mb, raising=False)
    monkeypatch.setattr(hub_module, "MAX_HUB_BULK", 6 * mb, raising=False)
    wire = Wire(pki.credentials("hub"))
    names = ("site-a", "site-b", "site-c", "site-c", "site-c", "site-c")
    flooder, good, *members = (wire.site(pki.credentials(n)) for n in names)
    by_address = {c.address: wire.hub._conns[i] for i, c in wire.hub.state.clients.items()}
    at_hub = {s: by_address[_welcomed(s).address] for s in (flooder, good, *members)}
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(40):  # 40 MB of broadcasts; nobody reads meanwhile (no pump)
            flood = BulkData("0.0.0.0", "flood", bytes([i]) * mb)
            wire.hub._handle(at_hub[flooder], [RelayEvent(EventKind.BULK, flood)], wire.now)
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert held <= 5 * mb, held / mb
    assert wire.hub.state.drops["bulk over the sender's share"] > 0
    # another site's bulk still gets to a member
    target = at_hub[members[0]]
    backlog = target.bulk_backlog
    note = BulkData(_welcomed(members[0]).address, "note", b"x" * 1000)
    wire.hub._handle(at_hub[good], [RelayEvent(EventKind.BULK, note)], wire.now)
    assert target.bulk_backlog > backlog
    # what members never took is given back when they go
    for s in members:
        s.conn.close("bye", refused=False)
    wire.pump(duration=1.0)
    assert wire.hub.bulk.queued == 0


def test_connections_are_limited_per_certificate_and_in_all(pki: Pki, monkeypatch: pytest.MonkeyPatch) -> None:
    """A site with a valid certificate could open admitted connections without end: each holds QUIC
    state, a place in a room and a budget of its own, so one certificate held the hub's memory and
    every room (``hub is full``).  Beyond the limits a new one is refused, in one line, counted."""
    monkeypatch.setattr(hub_state, "MAX_SITES_PER_NAME", 3)
    monkeypatch.setattr(hub_state, "MAX_SITES", 5)
    lines: list[str] = []
    wire = Wire(pki.credentials("hub"), log=lines.append)
    greedy = [wire.site(pki.credentials("site-a"), room=f"room-{i}") for i in range(4)]
    for s in greedy[:3]:
        _welcomed(s)
    reason = greedy[3].conn.closed_reason or ""
    assert reason.startswith("refused by the hub") and "site-a already has 3 connections" in reason, reason
    assert wire.hub.state.drops["connections over limit"] == 1 and len(wire.hub._conns) == 3
    assert next(line for line in lines if "already has 3" in line).startswith("refused: ")
    _welcomed(wire.site(pki.credentials("site-b")))
    _welcomed(wire.site(pki.credentials("site-b")))
    full = wire.site(pki.credentials("site-b"))
    assert "hub holds 5 connections" in (full.conn.closed_reason or ""), full.conn.closed_reason
    assert wire.hub.state.drops["connections over limit"] == 2
    greedy[0].conn.close("bye", refused=False)  # one leaves: the certificate gets its place back
    wire.pump(duration=1.0)
    _welcomed(wire.site(pki.credentials("site-a")))


def test_the_connection_limits_leave_a_reconnecting_mesh_its_room() -> None:
    """Every station of the largest relayed mesh, all on one certificate, back before their old
    connections were noticed dead, is admitted."""
    assert MAX_SITES_PER_NAME >= 2 * (TAKEOVERS_PER_NAME + 6)  # the takeover test's stations, twice


def test_a_site_whose_certificate_expires_while_connected_is_refused_then(pki: Pki) -> None:
    """The certificate was checked once, at the handshake: a site connected before its certificate
    expired kept relaying for as long as its connection lived (days: it pings to keep it)."""
    import datetime

    from pianode.relay.certificates import issue

    soon = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=1, seconds=-20)
    issue(pki.root / "ca", "site-brief", role="client", days=1, not_before=soon)  # expires in 20 s
    lines: list[str] = []
    wire = Wire(pki.credentials("hub"), log=lines.append)
    brief = wire.site(pki.credentials("site-brief"))
    _welcomed(brief)
    lasting = wire.site(pki.credentials("site-a"))
    _welcomed(lasting)
    for _ in range(80):  # 40 s of the wire's clock, both pinging
        for s in (brief, lasting):
            if s.conn.closed_reason is None:
                s.conn.send_control(Ping(1))
        wire.pump(duration=0.5)
    reason = brief.conn.closed_reason or ""
    assert reason.startswith("refused by the hub") and "certificate expired" in reason, reason
    assert wire.hub.state.drops["certificate expired"] == 1
    assert lasting.conn.closed_reason is None and len(wire.hub._conns) == 1
    assert any("certificate expired" in line for line in lines), lines
