"""LAN discovery runtime: the sans-IO responder/client pair, then real loopback sockets under Trio."""

from __future__ import annotations


import pytest
import trio

from pianode.lan.discovery import (
    DEFAULT_BROADCAST,
    BrowseClient,
    BrowseResponder,
    LanHost,
    browse,
    lan_identity,
    make_network_property,
    make_session_info,
)
from protocols.errors import ConfigError
from protocols.pia.lan import BrowseReply, LanNetworkProperty, LanSessionInfo, lan_session_key
from protocols.pia.lan_criteria import LanSessionSearchCriteria, Range
from protocols.pia.versions import VersionProfile, profile_for

from loopback_addresses import free_port, loopback_block

KEY = bytes.fromhex("ee182a63e216cdb1f51ad4bed8cf6508")  # Splatoon 2 (spec §3.6)
OTHER_KEY = bytes(16)
P518 = profile_for("5.18")


def test_lan_identity_d10() -> None:
    assert lan_identity("192.168.178.215", 49154) == (0xC0A8B2D70000C002, 0xB2D7C002)


def test_make_session_info_identities() -> None:
    info = make_session_info(P518, ip="127.0.0.2", port=49153, max_participants=6, name="host", variable_id=77)
    const, nid = lan_identity("127.0.0.2", 49153)
    assert (info.network_id, info.host_constant_id, info.host_service_variable_id) == (nid, const, nid)
    assert (info.host_ip, info.host_port, info.host_variable_id) == ("127.0.0.2", 49153, 77)
    assert info.system_communication_version == 7 and info.stations[0].role == 1
    assert info.stations[0].username == "host" and info.stations[0].constant_id == const
    old = make_session_info(profile_for("5.9"), ip="127.0.0.2")
    assert old.host_ip == "127.0.0.2" and old.system_communication_version == 5
    with pytest.raises(ConfigError):
        make_session_info(profile_for("6.30"), ip="127.0.0.2")


def _hosted(prof: VersionProfile, ip: str) -> LanSessionInfo | LanNetworkProperty:
    if prof.version >= (6, 0):
        return make_network_property(prof, ip=ip)
    return make_session_info(prof, ip=ip)


@pytest.mark.parametrize("version", ["5.3", "5.9", "5.10", "5.18", "5.29", "6.16", "6.30"])
def test_sans_io_browse_exchange(version: str) -> None:
    prof = profile_for(version)
    host = BrowseResponder(prof, KEY, _hosted(prof, "127.0.0.2"))
    client = BrowseClient(prof, KEY)
    out = host.receive(client.request(), ("127.0.0.9", 5000))
    # One copy, where consoles send three (spec §6.1): the requester's address is unverified.
    assert len(out) == 1 and {dest for _, dest in out} == {("127.0.0.9", 5000)}
    found = [client.receive(data, ("127.0.0.1", 30000)) for data, _ in out]
    assert found[0] is not None
    assert client.receive(out[0][0], ("127.0.0.1", 30000)) is None  # a copy again is a duplicate
    assert client.statistics().dropped == {"duplicate": 1}
    session = found[0]
    published = host.session
    assert session.info == published
    if prof.lan_challenge_version is None:
        assert session.session_key is None and published.session_key_param is None
    else:
        # The first valid request fixed the published param to "reply key ‖ request key" (spec §6.4).
        assert published.session_key_param == session.challenge_param
        assert session.session_key == lan_session_key(KEY, published.session_key_param)
    assert session.info.system_communication_version == prof.lan_system_version


def test_make_network_property_6x() -> None:
    prof = profile_for("6.30")
    prop = make_network_property(prof, ip="127.0.0.2", port=49153, max_stations=8, name="six",
                                 application_version=0x1234, random=lambda n: bytes([0xAB]) * n)  # fmt: skip
    assert prop.network_id == (0xABABABAB << 32) | 0x7F000002  # (random32 << 32) | IPv4 (spec §4)
    assert (prop.system_communication_version, prop.application_communication_version) == (10, 0x1234)
    assert prop.host_name == "six" and prop.session_key_param == bytes(32) and prop.max_stations == 8
    assert len(prop.property_data) == 0x7C and prop.encode(prof)[0x21B:0x21F] == bytes([127, 0, 0, 2])


def test_second_browser_gets_the_first_param() -> None:
    host = BrowseResponder(P518, KEY, make_session_info(P518, ip="127.0.0.2"))
    first, second = BrowseClient(P518, KEY), BrowseClient(P518, KEY)
    a = first.receive(host.receive(first.request(), ("127.0.0.9", 1))[0][0], ("127.0.0.1", 1))
    b = second.receive(host.receive(second.request(), ("127.0.0.8", 1))[0][0], ("127.0.0.1", 1))
    assert a is not None and b is not None
    assert b.challenge_param != a.challenge_param  # each challenge proves its own param
    assert a.session_key == b.session_key  # but both use the one the session publishes


def test_responder_drops_and_counts() -> None:
    host = BrowseResponder(P518, KEY, make_session_info(P518, ip="127.0.0.2", game_mode=1))
    addr = ("127.0.0.9", 1)
    assert host.receive(b"\x00garbage", addr) == []
    assert host.receive(BrowseClient(P518, OTHER_KEY).request(), addr) == []
    assert host.receive(BrowseClient(profile_for("5.9"), KEY).request(), addr) == []
    picky = BrowseClient(P518, KEY, search=LanSessionSearchCriteria.build(game_mode=2))
    assert host.receive(picky.request(), addr) == []
    assert host.statistics().dropped == {"malformed": 1, "bad_challenge": 1, "challenge_version": 1, "no_match": 1}
    assert host.statistics().answered == 0


def test_client_rejects_forged_and_foreign_replies() -> None:
    host = BrowseResponder(P518, KEY, make_session_info(P518, ip="127.0.0.2"))
    client = BrowseClient(P518, KEY)
    request = client.request()
    # A host that does not know the game key cannot answer the challenge.
    forger = BrowseResponder(P518, OTHER_KEY, make_session_info(P518, ip="127.0.0.3"))
    other_request = BrowseClient(P518, OTHER_KEY).request()
    forged = forger.receive(other_request, ("127.0.0.9", 1))[0][0]
    assert client.receive(forged, ("127.0.0.3", 1)) is None
    # A 5.29 host (system communication version 8) answering a 5.18 browser.
    p529 = profile_for("5.29")
    newer = BrowseResponder(p529, KEY, make_session_info(p529, ip="127.0.0.4"))
    newer_reply = newer.receive(request, ("127.0.0.9", 1))
    assert newer_reply, "same layouts and challenge version: the 5.29 host answers"
    assert client.receive(newer_reply[0][0], ("127.0.0.4", 1)) is None
    assert client.receive(b"\x01\x00", ("127.0.0.5", 1)) is None
    assert client.statistics().dropped == {"bad_challenge": 1, "system_version": 1, "malformed": 1}
    good = host.receive(request, ("127.0.0.9", 1))[0][0]
    assert client.receive(good, ("127.0.0.2", 1)) is not None
    assert isinstance(BrowseReply.decode(good, P518).session, LanSessionInfo)


# -- real sockets on loopback ------------------------------------------------------
async def test_one_browse_finds_two_hosts_on_different_loopback_addresses() -> None:
    port = free_port()
    hosts = [
        LanHost(P518, KEY, make_session_info(P518, ip=ip, name=ip), bind=("0.0.0.0", port))
        for ip in ("127.0.0.2", "127.0.0.3")
    ]
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for h in hosts:
                await nursery.start(h.run)
            found = await browse(P518, KEY, broadcast=(DEFAULT_BROADCAST, port), bind=("127.0.0.9", 0), timeout=0.5)
            nursery.cancel_scope.cancel()
    assert sorted(f.info.host_ip for f in found) == ["127.0.0.2", "127.0.0.3"]  # type: ignore[union-attr]
    for h in hosts:
        assert h.statistics().answered == 1 and h.statistics().sent == 1
    for f in found:
        assert f.session_key is not None and len(f.session_key) == 16


async def test_browse_filters_by_version_and_criteria() -> None:
    port = free_port()
    p59, p529 = profile_for("5.9"), profile_for("5.29")
    hosts = {
        "5.18 mode 1": LanHost(P518, KEY, make_session_info(P518, ip="127.0.0.2", game_mode=1), bind=("0.0.0.0", port)),
        "5.18 mode 2": LanHost(P518, KEY, make_session_info(P518, ip="127.0.0.3", game_mode=2), bind=("0.0.0.0", port)),
        "5.9": LanHost(p59, KEY, make_session_info(p59, ip="127.0.0.4", game_mode=2), bind=("0.0.0.0", port)),
        "5.29": LanHost(p529, KEY, make_session_info(p529, ip="127.0.0.5", game_mode=2), bind=("0.0.0.0", port)),
    }
    crit = LanSessionSearchCriteria.build(game_mode=2, max_participants=Range(1, 8))
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            for h in hosts.values():
                await nursery.start(h.run)
            client = BrowseClient(P518, KEY, search=crit, broadcast_ip=DEFAULT_BROADCAST)
            found = await browse(P518, KEY, broadcast=(DEFAULT_BROADCAST, port), timeout=0.5, client=client)
            nursery.cancel_scope.cancel()
    assert [f.info.host_ip for f in found] == ["127.0.0.3"]  # type: ignore[union-attr]
    assert hosts["5.18 mode 1"].statistics().dropped == {"no_match": 1}
    assert hosts["5.9"].statistics().dropped == {"challenge_version": 1}
    assert client.statistics().dropped == {"system_version": 1}  # one copy each (REPLY_COPIES)


async def test_6x_host_and_browse_on_loopback() -> None:
    port = free_port()
    p630 = profile_for("6.30")
    host = LanHost(p630, KEY, make_network_property(p630, ip="127.0.0.7", name="six"), bind=("0.0.0.0", port))
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(host.run)
            found = await browse(p630, KEY, broadcast=(DEFAULT_BROADCAST, port), timeout=0.5)
            nursery.cancel_scope.cancel()
    assert len(found) == 1 and isinstance(found[0].info, LanNetworkProperty)
    assert found[0].info.host_ip == "127.0.0.7" and found[0].info.host_name == "six"
    assert found[0].session_key == lan_session_key(KEY, found[0].challenge_param or b"")


async def test_bad_datagram_is_dropped_and_host_keeps_running() -> None:
    port = free_port()
    host = LanHost(P518, KEY, make_session_info(P518, ip="127.0.0.2"), bind=("0.0.0.0", port))
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            await nursery.start(host.run)
            with trio.socket.socket(trio.socket.AF_INET, trio.socket.SOCK_DGRAM) as s:
                await s.bind(("127.0.0.9", 0))
                await s.sendto(b"\x00\x00\x00\x02\x3a" + b"\xff" * 40, ("127.0.0.1", port))
                await s.sendto(b"", ("127.0.0.1", port))
            found = await browse(P518, KEY, broadcast=(DEFAULT_BROADCAST, port), timeout=0.5)
            nursery.cancel_scope.cancel()
    assert len(found) == 1
    assert host.statistics().dropped == {"malformed": 2}
    assert host.statistics().received == 3


async def test_browse_without_hosts_times_out_on_trio_time(autojump_clock: trio.testing.MockClock) -> None:
    port = free_port()
    start = trio.current_time()
    found = await browse(P518, KEY, broadcast=(DEFAULT_BROADCAST, port), timeout=5.0)
    assert found == []
    assert trio.current_time() - start == pytest.approx(5.0)


# -- CLI -------------------------------------------------------------------------------
def _cli(*argv: str) -> list[str]:
    import sys

    return [sys.executable, "-m", "pianode", "lan", *argv]


async def test_cli_host_and_browse_jsonl_and_table() -> None:
    import json
    import subprocess

    port = free_port()
    key = KEY.hex()
    ip = loopback_block() + "6"  # an address of this run's own, so its Pia port is free
    const, nid = lan_identity(ip, 49152)
    host_cmd = _cli("host", "--game-key", key, "--address", ip, "--max", "6", "--name", "cli-host",
                    "--duration", "8", "--bind", f"0.0.0.0:{port}")  # fmt: skip
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            host = await nursery.start(
                lambda task_status: trio.run_process(host_cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                                     check=False, task_status=task_status)
            )  # fmt: skip
            assert host.stdout is not None
            first = b""
            while b"\n" not in first:  # the host prints one line once it listens
                chunk = await host.stdout.receive_some(4096)
                assert chunk, "host exited before listening"
                first += chunk
            assert f"hosting network id 0x{nid:08x}".encode() in first
            browse_cmd = _cli("browse", "--game-key", key, "--broadcast", f"127.255.255.255:{port}", "--timeout", "1")
            jl = await trio.run_process([*browse_cmd, "--format", "jsonl"], capture_stdout=True, check=False)
            table = await trio.run_process(browse_cmd, capture_stdout=True, check=False)
            host.terminate()
    assert jl.returncode == 0 and table.returncode == 0
    records = [json.loads(line) for line in jl.stdout.decode().splitlines()]
    (rec,) = [r for r in records if r["event"] == "session"]
    # One reply per request (REPLY_COPIES: consoles send three).
    assert records[-1] == {"event": "summary", "found": 1, "ignored": {}, "requests": 1, "replies": 1}
    assert (rec["network_id"], rec["host_address"], rec["host_port"]) == (nid, ip, 49152)
    assert (rec["current_participants"], rec["max_participants"], rec["system_communication_version"]) == (1, 6, 7)
    assert rec["stations"] == [{"role": 1, "encoding": 1, "username": "cli-host", "constant_id": const}]
    assert rec["session_key"] == lan_session_key(KEY, bytes.fromhex(rec["session_key_param"])).hex()
    lines = table.stdout.decode().splitlines()
    assert lines[0].split() == ["host", "network", "id", "players", "system", "version", "app", "version", "open"]
    assert lines[2].split() == [f"{ip}:49152", f"0x{nid:08x}", "1/6", "7", "0", "yes"]


@pytest.mark.parametrize(
    "argv",
    [
        ("browse", "--game-key", "nothex"),
        ("browse", "--game-key", KEY.hex(), "--timeout", "soon"),
        ("browse", "--game-key", KEY.hex(), "--format", "xml"),
        ("host", "--game-key", KEY.hex(), "--max", "-3"),
        ("host", "--game-key", KEY.hex(), "--version", "9.9"),
        ("host", "--game-key", KEY.hex(), "--address", "not-an-ip", "--duration", "0"),
    ],
)
def test_cli_bad_flags_one_line_exit_2(argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]) -> None:
    from pianode.cli.main import main

    assert main(["lan", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"pianode lan {argv[0]}: ") and "Traceback" not in err


def test_cli_browse_finds_nothing_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    from pianode.cli.main import main

    argv = ["lan", "browse", "--game-key", KEY.hex(), "--broadcast", f"127.255.255.255:{free_port()}",
            "--timeout", "0.2"]  # fmt: skip
    assert main(argv) == 1
    assert "0 session(s) found" in capsys.readouterr().out
