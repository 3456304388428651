"""LAN browse under abuse: spoofed sources, replayed challenge requests, floods (sans-IO, explicit time)."""

from __future__ import annotations

import pytest

from pianode.lan.discovery import (
    BrowseClient,
    BrowseResponder,
    make_network_property,
    make_session_info,
)
from protocols.pia.versions import profile_for

KEY = bytes(range(16))
VICTIM = ("127.0.0.77", 4242)  # the spoofed source the replies would hit


def _host(version: str) -> BrowseResponder:
    prof = profile_for(version)
    hosted = make_network_property(prof, ip="127.0.0.2") if prof.version >= (6, 0) else make_session_info(prof, ip="127.0.0.2")
    return BrowseResponder(prof, KEY, hosted)


@pytest.mark.parametrize("version", ["5.18", "5.29", "6.30"])
def test_a_replayed_request_from_a_spoofed_source_is_not_reflected(version: str) -> None:
    """One captured request, replayed once a second, 100 times, as if from a victim: bytes toward the victim stay
    within 1.5x what was sent (the first request's answer, not one per copy)."""
    host = _host(version)
    request = BrowseClient(profile_for(version), KEY).request()
    out = sum(len(data) for i in range(100) for data, _ in host.receive(request, VICTIM, now=float(i)))
    assert out <= 1.5 * 100 * len(request), (out, len(request))
    assert host.statistics().dropped.get("replayed", 0) == 99


@pytest.mark.parametrize("version", ["5.18", "5.29"])
def test_a_flood_of_fresh_requests_from_one_source_is_rate_limited(version: str) -> None:
    """A key holder sending fresh requests from one spoofed source as fast as it can: the host answers at most
    a few a second, one copy each, so it reflects at most 1.5x."""
    host = _host(version)
    prof = profile_for(version)
    sent = out = 0
    for i in range(400):
        request = BrowseClient(prof, KEY).request()
        sent += len(request)
        out += sum(len(data) for data, _ in host.receive(request, VICTIM, now=i * 0.005))  # 200 a second
    assert out <= 1.5 * sent, (out, sent)
    assert host.statistics().dropped.get("rate_limited", 0) > 300


def test_a_real_browser_still_finds_the_session() -> None:
    host = _host("5.18")
    client = BrowseClient(profile_for("5.18"), KEY)
    out = host.receive(client.request(), ("127.0.0.9", 5000), now=0.0)
    assert len(out) == 1
    found = client.receive(out[0][0], ("127.0.0.2", 30000))
    assert found is not None and found.session_key is not None


def test_a_flood_of_verified_replies_keeps_at_most_max_found_sessions() -> None:
    """A key holder answering one browse with many sessions (each reply verifies): before, the browser kept every
    one until its timeout (about 1.3 KB each, without bound); now it keeps MAX_FOUND and counts the rest."""
    from pianode.lan.discovery import MAX_FOUND

    prof = profile_for("5.18")
    client = BrowseClient(prof, KEY)
    request = client.request()
    kept = 0
    for i in range(MAX_FOUND + 40):
        responder = BrowseResponder(prof, KEY, make_session_info(prof, ip=f"127.0.{i // 250}.{i % 250 + 2}"))
        ((reply, _),) = responder.receive(request, ("127.0.0.9", 5000))
        kept += client.receive(reply, ("127.0.0.2", 30000)) is not None
    assert kept == MAX_FOUND
    assert client.statistics().dropped["too_many_sessions"] == 40


@pytest.mark.parametrize("version", ["5.18", "5.29", "6.30"])
def test_a_reply_to_an_earlier_request_does_not_answer_a_later_one(version: str) -> None:
    """A browser that asks again (a second request from the same client) must not take a reply captured for its
    first request: spec §6.4 draws the challenge key and the challenge fresh for every request.  Before, the
    client kept one key and one challenge, so an old reply (an old nonce counter) verified for every later
    request; now it is dropped as ``bad_challenge``, and the reply to the new request is taken."""
    host = _host(version)
    client = BrowseClient(profile_for(version), KEY)
    first = host.receive(client.request(), ("127.0.0.9", 5000), now=0.0)
    second = host.receive(client.request(), ("127.0.0.9", 5000), now=1.0)
    assert client.receive(first[0][0], ("127.0.0.2", 30000)) is None
    assert client.statistics().dropped == {"bad_challenge": 1}
    found = client.receive(second[0][0], ("127.0.0.2", 30000))
    assert found is not None and found.challenge_param is not None


async def test_a_reply_that_cannot_be_sent_is_counted_and_the_host_goes_on(
    autojump_clock: object,
) -> None:
    """A browse request forged from source port 0 (a raw socket can write one): the reply cannot be sent (EINVAL).
    The host went on but counted it as sent; now it counts ``reply_not_sent`` (and not as sent), and still
    answers the next browser."""
    import trio

    from pianode.lan.discovery import LanHost, browse
    from pianode.sim.netsim import SimulatedNetwork

    prof = profile_for("5.18")
    async with SimulatedNetwork() as net, trio.open_nursery() as nursery:
        net.install()
        # (the browse goes straight to the host: its address stands for the broadcast one in the nonce, spec §6.4)
        host = LanHost(prof, KEY, make_session_info(prof, ip="127.0.0.2"), bind=("127.0.0.2", 30000),
                       broadcast_ip="127.0.0.2")  # fmt: skip
        await nursery.start(host.run)
        (sock,) = net._ports[30000]
        sock._enqueue(BrowseClient(prof, KEY, broadcast_ip="127.0.0.2").request(), ("127.0.0.66", 0))
        await trio.sleep(0.1)
        stats = host.statistics()
        assert stats.dropped.get("reply_not_sent") == 1 and stats.sent == 0
        found = await browse(prof, KEY, broadcast=("127.0.0.2", 30000), bind=("127.0.0.9", 0), timeout=0.5)
        assert len(found) == 1 and host.statistics().sent == 1
        nursery.cancel_scope.cancel()
