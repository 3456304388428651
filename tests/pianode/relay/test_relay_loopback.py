"""Hub and sites on loopback: rooms, addresses, forwarding, broadcast fan-out, refusals on both sides."""

from __future__ import annotations

import pathlib
import socket

import pytest
import trio
from loopback_addresses import loopback_block
from relay_pki import Pki, make_pki

from pianode.relay.client import RelayClient, RelayRefused
from pianode.relay.hub import RelayHub
from pianode.relay.certificates import Credentials
from protocols.relay_control import BulkData


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _hub_ip() -> str:
    return loopback_block() + "1"


async def _start_hub(nursery: trio.Nursery, pki: Pki, lines: list[str], creds: Credentials | None = None) -> RelayHub:
    hub = RelayHub(creds or pki.credentials("hub"), (_hub_ip(), 0), log=lines.append)
    await nursery.start(hub.serve)
    return hub


async def test_two_sites_get_addresses_and_exchange_unicast_and_broadcast(pki: Pki) -> None:
    lines: list[str] = []
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            hub = await _start_hub(nursery, pki, lines)
            a = RelayClient(pki.credentials("site-a"), hub.address, room="lan")
            b = RelayClient(pki.credentials("site-b"), hub.address, room="lan")
            wa = await nursery.start(a.run)
            wb = await nursery.start(b.run)
            assert (wa.address, wb.address, wa.prefix) == ("10.77.0.1", "10.77.0.2", 24)
            assert [m.address for m in wb.members] == ["10.77.0.1"]
            sa = a.site.socket(socket.AF_INET, socket.SOCK_DGRAM)
            await sa.bind((wa.address, 49152))
            sa.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            sb = b.site.socket(socket.AF_INET, socket.SOCK_DGRAM)
            await sb.bind((wb.address, 49152))
            listener = b.site.socket(socket.AF_INET, socket.SOCK_DGRAM)
            await listener.bind(("0.0.0.0", 30000))
            await sa.sendto(b"hello b", (wb.address, 49152))
            assert await sb.recvfrom(2048) == (b"hello b", (wa.address, 49152))
            await sb.sendto(b"hello a", (wa.address, 49152))
            assert await sa.recvfrom(2048) == (b"hello a", (wb.address, 49152))
            for dst in ("10.77.0.255", "255.255.255.255"):
                await sa.sendto(b"browse", (dst, 30000))
                assert await listener.recvfrom(2048) == (b"browse", (wa.address, 49152))
            # an address nobody holds is dropped at the hub and counted
            await sa.sendto(b"nobody", ("10.77.0.77", 49152))
            with trio.move_on_after(0.3):
                await sb.recvfrom(2048)
                pytest.fail("a datagram for nobody arrived")
            assert hub.state.drops["no such member"] == 1
            headers, rows = hub.state.table()
            by_addr = {r[1]: dict(zip(headers, r)) for r in rows}
            assert by_addr["10.77.0.1"]["client"] == "site-a"
            assert by_addr["10.77.0.1"]["dgrams in"] == 4
            assert by_addr["10.77.0.2"]["dgrams out"] == 3
            nursery.cancel_scope.cancel()
    assert any("joined: site-b" in line and "10.77.0.2" in line for line in lines)


async def test_rooms_are_separate_networks(pki: Pki) -> None:
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            hub = await _start_hub(nursery, pki, [])
            a = RelayClient(pki.credentials("site-a"), hub.address, room="one")
            c = RelayClient(pki.credentials("site-c"), hub.address, room="two")
            wa, wc = await nursery.start(a.run), await nursery.start(c.run)
            assert wa.address.rsplit(".", 1)[0] != wc.address.rsplit(".", 1)[0]
            listener = c.site.socket(socket.AF_INET, socket.SOCK_DGRAM)
            await listener.bind(("0.0.0.0", 30000))
            sa = a.site.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sa.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            await sa.sendto(b"browse", ("255.255.255.255", 30000))
            with trio.move_on_after(0.3):
                await listener.recvfrom(2048)
                pytest.fail("a broadcast crossed rooms")
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize(
    ("site", "ca", "reason"),
    [
        ("stranger", "other", "client certificate is not issued by this relay's CA"),
        ("hub-as-client", "ca", "client certificate wanted, got a server-only certificate (extended key usage lacks clientAuth)"),
        (None, "ca", "no client certificate presented"),
        ("site-expired", "ca", "client certificate expired on "),
    ],
)
async def test_the_hub_refuses_a_site_with_one_line_and_relays_nothing(
    pki: Pki, site: str | None, ca: str, reason: str
) -> None:
    lines: list[str] = []
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            hub = await _start_hub(nursery, pki, lines)
            good = RelayClient(pki.credentials("site-a"), hub.address, room="lan")
            wg = await nursery.start(good.run)
            listener = good.site.socket(socket.AF_INET, socket.SOCK_DGRAM)
            await listener.bind(("0.0.0.0", 30000))
            creds = pki.credentials(site or "site-b", ca, trust="ca")
            bad = RelayClient(creds, hub.address, room="lan", reconnect=False)
            if site is None:  # answer the hub's certificate request with an empty Certificate message
                bad._config.certificate = bad._config.private_key = None
            # the refused site tries to send as soon as it could
            sock = bad.site.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
            await sock.bind(("0.0.0.0", 49152))
            with pytest.raises(RelayRefused) as info:
                await bad.run()
            await sock.sendto(b"sneak", ("255.255.255.255", 30000))
            await sock.sendto(b"sneak", (wg.address, 30000))
            with trio.move_on_after(0.3):
                await listener.recvfrom(2048)
                pytest.fail("a refused site's datagram was relayed")
            nursery.cancel_scope.cancel()
    assert str(info.value).startswith(f"refused by the hub: {reason}") and "\n" not in str(info.value)
    assert [line for line in lines if line.startswith("refused")] == [lines[-1]]
    assert lines[-1].startswith("refused: 127.") and f"refused the site: {reason}" in lines[-1]
    assert lines[-1].endswith(str(info.value).removeprefix("refused by the hub: "))
    assert all(c.address is not None for c in hub.state.clients.values())
    assert [c.name for c in hub.state.clients.values()] == ["site-a"]


async def test_a_site_refuses_a_hub_from_another_ca(pki: Pki) -> None:
    lines: list[str] = []
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            hub = await _start_hub(nursery, pki, lines, pki.credentials("rogue-hub", "other", trust="ca"))
            site = RelayClient(pki.credentials("site-a"), hub.address, room="lan", reconnect=False)
            with pytest.raises(RelayRefused) as info:
                await site.run()
            await trio.sleep(0.3)
            nursery.cancel_scope.cancel()
    assert str(info.value) == "refused the hub: server certificate is not issued by this relay's CA"
    assert hub.state.clients == {}
    assert site.site.relayed_out == 0


async def test_bulk_reaches_its_member_and_a_full_backlog_is_refused(pki: Pki) -> None:
    from pianode.relay import quic

    got: list[tuple[str, str, int]] = []
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            hub = await _start_hub(nursery, pki, [])
            a = RelayClient(pki.credentials("site-a"), hub.address)
            b = RelayClient(pki.credentials("site-b"), hub.address, on_bulk=lambda m: got.append((m.address, m.channel, len(m.data))))
            await nursery.start(a.run)
            await nursery.start(b.run)
            assert a.send_bulk(b.address, "capture", bytes(300_000))
            while not got:
                await trio.sleep(0.01)
            assert got == [(a.address, "capture", 300_000)]  # the hub names the source
            assert a.conn is not None
            big = BulkData(b.address, "x", bytes(quic.MAX_BULK_BACKLOG * 6 // 10))
            assert a.conn.send_bulk(big) is True
            assert a.conn.send_bulk(big) is False  # 120 % of the limit: refused, counted
            assert a.conn.counters["bulk_refused"] == 1
            a.conn.drop_queued_bulk()
            nursery.cancel_scope.cancel()
