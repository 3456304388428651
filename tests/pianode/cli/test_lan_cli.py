"""``pianode lan host`` and ``lan join`` as separate processes: discovery, key from the param, mesh, data.

Each test puts its processes on its own random 127.a.b.0/24 block and the
browse responder on a free port (``--bind 0.0.0.0:P``, ``--broadcast
127.255.255.255:P``), so nothing here meets another test's session.
"""

from __future__ import annotations

import json
import re
import sys

import pytest
import trio

from protocols.pia.keys import lan_constant_id
from protocols.pia.lan import lan_session_key

from cli_processes import CliProcess, run_mesh
from loopback_addresses import free_port, loopback_block

KEY = "ee182a63e216cdb1f51ad4bed8cf6508"  # Splatoon 2 (spec §3.6)


def _lan(*argv: str) -> list[str]:
    return [sys.executable, "-m", "pianode", "lan", *argv]


async def test_host_and_three_joiners_form_a_four_station_mesh_and_exchange_data() -> None:
    port, net = free_port(), loopback_block()
    bc = f"127.255.255.255:{port}"
    # --duration only bounds each process; the test ends them with SIGTERM once data has flowed.
    host = CliProcess(_lan("host", "--game-key", KEY, "--address", net + "2", "--bind", f"0.0.0.0:{port}",
                           "--broadcast", bc, "--duration", "60", "--format", "jsonl", "--send-every", "0.2",
                           "--name", "lead"))  # fmt: skip
    joiners = [
        CliProcess(_lan("join", "--game-key", KEY, "--bind", net + str(3 + i), "--broadcast", bc, "--duration", "60",
                        "--format", "jsonl", "--send-every", "0.2", "--name", f"guest{i}"))
        for i in range(3)
    ]

    def enough(p: CliProcess) -> bool:  # three messages from each of the three other stations
        got = p.received_from()
        return len(got) == 3 and min(got.values()) >= 3

    with trio.fail_after(60):
        await run_mesh(host, joiners, enough)
    assert host.returncode == 0, host.stderr
    hrec = host.records()
    hosting, hsummary = hrec[0], hrec[-1]
    assert hosting["event"] == "hosting" and hsummary["event"] == "summary"
    assert hosting["address"] == f"{net}2:49152"  # first free console port (spec §6.1)
    key = hosting["session_key"]
    assert key == lan_session_key(bytes.fromhex(KEY), bytes.fromhex(hosting["session_key_param"])).hex()
    assert hsummary["stations_seen"] == [1, 2, 3]
    assert sorted(hsummary["received"]) == ["1", "2", "3"]
    assert hsummary["browse"]["answered"] >= 3
    joined_from = {r["address"] for r in hrec if r["event"] == "station_joined"}
    assert joined_from == {f"{net}{3 + i}:49152" for i in range(3)}
    indexes = set()
    for i, j in enumerate(joiners):
        assert j.returncode == 0, j.stderr
        recs = j.records()
        joined, summary = recs[0], recs[-1]
        assert joined["event"] == "joined" and summary["event"] == "summary"
        # The console join flow: the host address and the key come from the browse reply (spec §6.6).
        assert joined["host"] == hosting["address"] and joined["network_id"] == hosting["network_id"]
        assert joined["session_key"] == key
        me = summary["station_index"]
        indexes.add(me)
        others = sorted({0, 1, 2, 3} - {me})
        assert summary["stations_seen"] == others, recs
        assert sorted(int(k) for k in summary["received"]) == others
        assert all(n >= 3 for n in summary["received"].values())
        texts = " ".join(r["text"] for r in recs if r["event"] == "data")
        assert "lead #" in texts
        assert all(f"guest{k} #" in texts for k in range(3) if k != i)
    assert indexes == {1, 2, 3}
    # Every station's constant id follows its LAN address (spec §4).
    consts = {r["constant_id"] for r in hrec if r["event"] == "station_joined"}
    assert consts == {lan_constant_id(f"{net}{3 + i}", 49152) for i in range(3)}


async def test_table_output_and_joining_by_network_id() -> None:
    port, net = free_port(), loopback_block()
    bc = f"127.255.255.255:{port}"
    host = CliProcess(_lan("host", "--game-key", KEY, "--address", net + "2", "--port", "49153", "--bind",
                           f"0.0.0.0:{port}", "--broadcast", bc, "--duration", "60", "--send-every", "0.2"))  # fmt: skip
    nid = (int(net.split(".")[2]) << 24) | (2 << 16) | 49153  # (ip & 0xFFFF) << 16 | port (spec §4)
    join = CliProcess(_lan("join", "--game-key", KEY, "--bind", net + "3", "--broadcast", bc, "--duration", "60",
                           "--session", hex(nid), "--send-every", "0.2"))  # fmt: skip

    def enough(p: CliProcess) -> bool:
        return any(line.startswith("data from station ") for line in p.lines)

    with trio.fail_after(60):
        await run_mesh(host, [join], enough)
    assert host.lines[0].startswith(f"hosting network id 0x{nid:08x} (Pia 5.18, host {net}2:49153, max 4)")
    assert join.returncode == 0 and host.returncode == 0
    jlines = join.lines
    assert jlines[0] == f"joined network id 0x{nid:08x} (Pia 5.18, host {net}2:49153) as station 1 from {net}3:49152"
    assert "in the mesh as station 1 (host: station 0)" in jlines
    data = re.compile(r"data from station 0 \((\d+) bytes, reliable\): '(pianode #\d+ from station 0)'")
    assert any((m := data.fullmatch(line)) and int(m[1]) == len(m[2]) for line in jlines)
    assert jlines[-1].startswith(f"station 1 of network 0x{nid:08x}: saw stations [0], connected to [0]; received ")
    hlines = host.lines
    assert any(line.startswith(f"station 1 joined from {net}3:49152 ") for line in hlines)
    assert hlines[-1].startswith(f"station 0 of network 0x{nid:08x}: saw stations [1], ")
    assert hlines[-1].endswith(" browse requests") and "; answered 0 " not in hlines[-1]


async def test_duration_ends_a_join_that_never_completes_and_says_why() -> None:
    """--duration bounds the browse too: with no host and a long --timeout, the join still ends on time, and says
    why it found nothing in the words (and with the exit status) of a join whose --timeout ran out."""
    port = free_port()
    argv = _lan("join", "--game-key", KEY, "--bind", loopback_block() + "3", "--broadcast", f"127.255.255.255:{port}",
                "--timeout", "60", "--duration", "0.5")  # fmt: skip
    with trio.fail_after(20):
        result = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
        jsonl = await trio.run_process([*argv, "--format", "jsonl"], capture_stdout=True, capture_stderr=True,
                                       check=False)  # fmt: skip
    assert result.returncode == 1 and jsonl.returncode == 1
    assert result.stderr.decode().splitlines() == [
        "pianode lan join: no answer from a LAN session within 0.5 s of browsing: no reply at all: no host there, "
        "or hosts with another game key (a host ignores a request whose challenge it cannot open)"
    ]
    assert result.stdout == b""
    (failed,) = [json.loads(line) for line in jsonl.stdout.decode().splitlines()]
    assert failed["event"] == "join_failed" and failed["ignored"] == {"no_reply": 1}


async def test_join_with_no_session_exits_1_with_one_line() -> None:
    port = free_port()
    argv = _lan("join", "--game-key", KEY, "--bind", loopback_block() + "3", "--broadcast", f"127.255.255.255:{port}",
                "--timeout", "0.5")  # fmt: skip
    with trio.fail_after(20):
        result = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
    assert result.returncode == 1
    assert result.stderr.decode().splitlines() == [
        "pianode lan join: no answer from a LAN session within 0.5 s of browsing: no reply at all: no host there, "
        "or hosts with another game key (a host ignores a request whose challenge it cannot open)"
    ]
    assert result.stdout == b""


async def test_discovery_only_host_publishes_a_session_without_a_node() -> None:
    """--discovery-only answers for a one-station 6.30 session with no node behind it."""
    port = free_port()
    argv = _lan("host", "--game-key", KEY, "--version", "6.30", "--address", loopback_block() + "2",
                "--bind", f"0.0.0.0:{port}", "--duration", "0.3", "--discovery-only")  # fmt: skip
    with trio.fail_after(20):
        result = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
    assert result.returncode == 0
    lines = result.stdout.decode().splitlines()
    assert lines[0].startswith("hosting network id ") and lines[-1] == "answered 0 browse requests, dropped 0"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("join", "--game-key", KEY, "--format", "xml"), "--format must be table or jsonl"),
        (("join", "--game-key", KEY, "--version", "6.32"), "joining needs a version the node runs: Pia 6.32 on lan"),
        (("join", "--game-key", KEY, "--network-id", "host"), "--network-id must be an integer"),
        (("join", "--game-key", KEY, "--bind", "nowhere"), "--bind must be an IPv4 address"),
        (("host", "--game-key", KEY, "--max", "1"), "--max must be an integer ≥ 2 and ≤ 16, got 1"),
        (("host", "--game-key", KEY, "--bind", "10.0.0.1", "--duration", "1"), "--bind 10.0.0.1: not an address of this machine"),
        (("host", "--game-key", KEY, "--bind", "127.0.0.5:99999"), "--bind port must be 0..65535, got 99999"),
        (("host", "--game-key", KEY, "--sizes", "10,x"), "--sizes must be an integer"),
        (("host", "--game-key", KEY, "--sizes", "0,1285", "--unreliable"),
         "--sizes 1285: an unreliable message carries at most 1284 bytes"),
        (("join", "--game-key", KEY, "--sizes", "1300", "--alternate-unreliable"),
         "--sizes 1300: an unreliable message carries at most 1284 bytes"),
        (("host", "--game-key", KEY, "--sizes", "5", "--discovery-only"), "--sizes is for a host that runs a node"),
    ],
)
def test_bad_flags_exit_2_with_one_line(
    argv: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from pianode.cli.main import main

    assert main(["lan", *argv]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith(f"pianode lan {argv[0]}: ") and message in err


@pytest.mark.parametrize("host_ip", ["::1", "2001:db8::1"])
async def test_join_of_a_session_that_names_a_host_it_cannot_reach_is_one_line(host_ip: str) -> None:
    """A browse reply (its challenge verified: the game key is no secret) naming its host at an IPv6
    address, where the node's IPv4 socket cannot send: the join fails in one line naming that address."""
    import attrs

    from pianode.lan.discovery import LanHost, make_session_info
    from protocols.pia.versions import profile_for

    port, net = free_port(), loopback_block()
    profile = profile_for("5.18")
    info = make_session_info(profile, ip=net + "2")
    info = attrs.evolve(info, host=attrs.evolve(info.host, ip=host_ip))
    responder = LanHost(profile, bytes.fromhex(KEY), info, bind=(net + "2", port), broadcast_ip=net + "2")
    argv = _lan("join", "--game-key", KEY, "--bind", net + "3", "--broadcast", f"{net}2:{port}", "--timeout", "5",
                "--duration", "8")  # fmt: skip
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            await nursery.start(responder.run)
            result = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
            nursery.cancel_scope.cancel()
    err = result.stderr.decode()
    assert result.returncode == 1, err
    (line,) = err.splitlines()
    assert line.startswith("pianode lan join: ") and "internal error" not in line, line
    assert host_ip in line, line


@pytest.mark.parametrize("version", ["5.18", "6.20"])
async def test_after_the_host_leaves_lan_browse_finds_the_session_at_the_new_host(version: str) -> None:
    """``lan host`` and two ``lan join``; the host stops (it leaves the mesh); the joiner that becomes host
    publishes the session: ``lan browse`` then finds one session, the same network id and param, naming the new
    host's address (6.x: and its name in the host name), with the two stations left."""
    from cli_processes import until

    port, net = free_port(), loopback_block()
    bc = f"127.255.255.255:{port}"
    common = ("--game-key", KEY, "--version", version, "--broadcast", bc, "--duration", "60", "--format", "jsonl")
    host = CliProcess(_lan("host", *common, "--address", net + "2", "--bind", f"0.0.0.0:{port}", "--name", "lead"))
    joiners = [CliProcess(_lan("join", *common, "--bind", net + str(3 + i), "--name", f"guest{i}")) for i in range(2)]

    def has(p: CliProcess, event: str) -> bool:
        return any(r["event"] == event for r in p.records())

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(host.run)
            await until(lambda: bool(host.lines) or host.returncode is not None)
            for j in joiners:
                await nursery.start(j.run)
                await until(lambda: has(j, "joined") or j.returncode is not None)  # noqa: B023
            await until(lambda: all(sum(r["event"] == "station_joined" for r in j.records()) >= 2 for j in joiners))
            host.stop()
            await until(lambda: all(has(j, "host_changed") or j.returncode is not None for j in joiners))
            await until(lambda: host.returncode is not None)
            await trio.sleep(0.5)  # (the new host's responder polls every 0.2 s)
            browse = await trio.run_process(
                _lan("browse", "--game-key", KEY, "--version", version, "--broadcast", bc, "--bind", net + "9",
                     "--format", "jsonl", "--timeout", "1"),
                capture_stdout=True, capture_stderr=True, check=False,
            )  # fmt: skip
            for j in joiners:
                j.stop()
    why = (browse.stderr, host.stderr, *(j.stderr for j in joiners))
    assert browse.returncode == 0 and all(p.returncode == 0 for p in (host, *joiners)), why
    hosting = host.records()[0]
    changed = [next(r for r in j.records() if r["event"] == "host_changed") for j in joiners]
    new_index = changed[0]["new_host_index"]
    assert {c["new_host_index"] for c in changed} == {new_index} and new_index != 0
    new_host = next(j for j in joiners if j.records()[0]["station_index"] == new_index)
    sessions = [r for r in map(json.loads, browse.stdout.decode().splitlines()) if r["event"] == "session"]
    assert len(sessions) == 1, browse.stdout
    (s,) = sessions
    assert s["network_id"] == hosting["network_id"] and s["session_key_param"] == hosting["session_key_param"]
    assert f"{s['host_address']}:{s['host_port']}" == new_host.records()[0]["address"]
    if version.startswith("6."):
        assert s["host_name"] == f"guest{joiners.index(new_host)}"
        assert (s["current_stations"], s["current_players"]) == (2, 2)
    else:
        assert s["current_participants"] == 2
        assert s["host_constant_id"] == lan_constant_id(s["host_address"], s["host_port"])
