"""A flag the command would not use is refused, not ignored; a flag it takes is used on every path.

A user who gives ``--relay-room`` without ``--relay``, or ``--network-id`` to a LAN node, expects it to
matter.  Silently running without it looks like success and is not: the answer is one line naming the
flag and what it needs, exit status 2, before anything starts.  ``--network-id`` given to the creating
node is the mesh's network id (LDN, NEX gathering, NPLN), and the command printed for joiners carries it.

Real program (``python -m pianode``), real sockets on loopback, bounded waits.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cli_processes import kill_leftovers
from loopback_addresses import loopback_block

GAME_KEY = "ee182a63e216cdb1f51ad4bed8cf6508"
PIANODE = [sys.executable, "-m", "pianode"]


def run(*argv: str, timeout: float = 40) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PIANODE, *argv], capture_output=True, text=True, timeout=timeout)


def one_line(err: str) -> str:
    assert "Traceback" not in err, err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(
    "argv",
    [
        ("node", "--create", "--relay-room", "blue"),
        ("mesh", "-n", "2", "--relay-room", "blue"),
        ("lan", "host", "--game-key", GAME_KEY, "--relay-room", "blue"),
        ("lan", "browse", "--game-key", GAME_KEY, "--relay-room", "blue"),
        ("ldn", "host", "--game-key", GAME_KEY, "--relay-room", "blue"),
        ("ldn", "scan", "--relay-room", "blue"),
    ],
    ids=lambda a: " ".join(a[:2]),
)
def test_relay_room_without_relay_is_refused(argv: tuple[str, ...]) -> None:
    out = run(*argv)
    assert out.returncode == 2, out.stdout + out.stderr
    line = one_line(out.stderr)
    assert "--relay-room" in line and "needs --relay" in line, line
    assert out.stdout == ""


def test_network_id_of_a_lan_node_is_refused() -> None:
    out = run("node", "--create", "--network", "lan", "--network-id", "5", "--bind", loopback_block() + "2")
    assert out.returncode == 2, out.stdout + out.stderr
    line = one_line(out.stderr)
    assert "--network-id" in line and "lan" in line, line


def test_the_creators_network_id_is_the_meshs_and_its_joiners_get_it() -> None:
    """An LDN mesh created with --network-id 5: the printed join command carries it, and a joiner that
    gives it joins (the network id is part of every packet's nonce, so a mesh that ignored it would not
    open the joiner's packets)."""
    net = loopback_block()
    host = subprocess.Popen([*PIANODE, "node", "--create", "--network", "ldn", "--network-id", "5", "--bind", net + "2",
                             "--format", "jsonl", "--duration", "30"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert host.stdout is not None
        created = json.loads(host.stdout.readline() or "{}")
        assert created.get("event") == "created", created
        command = created["join_with"].split()
        assert command[command.index("--network-id") + 1] == "5", created["join_with"]
        argv = [a for a in command[1:]] + ["--duration", "1", "--format", "jsonl"]
        argv[argv.index("--bind") + 1] = net + "3"
        joined = run(*argv)
        assert joined.returncode == 0, joined.stderr
        events = [json.loads(x)["event"] for x in joined.stdout.splitlines()]
        assert "joined" in events, joined.stdout
    finally:
        kill_leftovers([host])


@pytest.mark.parametrize(
    "argv",
    [
        ("ldn", "host", "--game-key", GAME_KEY, "--version", "5.18", "--session-key", "00" * 16),
        ("ldn", "host", "--game-key", GAME_KEY, "--version", "6.32", "--session-key", "00" * 16),
        ("ldn", "join", "--game-key", GAME_KEY, "--version", "5.29", "--session-key", "00" * 16),
    ],
    ids=lambda a: " ".join(a[:2] + a[4:6]),
)
def test_a_session_key_for_an_ldn_version_that_derives_its_own_is_refused(argv: tuple[str, ...]) -> None:
    """5.9+ LDN keys derive from the game key and the advertisement (spec §3.3, §7.3): a given one
    would be ignored."""
    out = run(*argv, "--duration", "1")
    assert out.returncode == 2, out.stdout + out.stderr
    line = one_line(out.stderr)
    assert "--session-key" in line and "5.7" in line, line


@pytest.mark.parametrize("flags", [("--interval", "1"), ("--unreliable",), ("--alternate-unreliable",)])
def test_node_flags_of_a_discovery_only_lan_host_are_refused(flags: tuple[str, ...]) -> None:
    out = run("lan", "host", "--game-key", GAME_KEY, "--discovery-only", "--bind", loopback_block() + "2",
              "--duration", "1", *flags)  # fmt: skip
    assert out.returncode == 2, out.stdout + out.stderr
    line = one_line(out.stderr)
    assert flags[0] in line and "--discovery-only" in line, line


@pytest.mark.parametrize(
    ("argv", "why"),
    [
        (("--discovery", "off"), "--discovery off"),
        (("--network", "nex"), "nex"),
        (("-n", "20"), "16"),
        (("--processes", "2"), "--processes"),
    ],
    ids=["discovery off", "nex", "more than a LAN session lists", "split over processes"],
)
def test_a_game_key_of_a_mesh_formed_without_discovery_is_refused(argv: tuple[str, ...], why: str) -> None:
    """The game key is what LAN/LDN discovery derives its keys from: a run formed by hand-off never uses it."""
    out = run("mesh", "--game-key", GAME_KEY, "--duration", "0.2", *argv)
    assert out.returncode == 2, out.stdout + out.stderr
    line = one_line(out.stderr)
    assert "--game-key" in line and why in line, line


def test_messages_of_a_realtime_session_without_a_leave_are_refused() -> None:
    """With --rate each station sends one reliable message a second; --messages counts the exchange
    without --rate (and the one after the host's --leave)."""
    out = run("mesh", "-n", "2", "--rate", "10", "--duration", "0.2", "--messages", "5")
    assert out.returncode == 2, out.stdout + out.stderr
    line = one_line(out.stderr)
    assert "--messages" in line and "--rate" in line, line
    ok = run("mesh", "-n", "3", "--rate", "10", "--duration", "0.3", "--messages", "4", "--leave")
    assert ok.returncode == 0, ok.stdout + ok.stderr


@pytest.mark.parametrize("mode", ["auto", "normal"])
def test_scheduling_without_a_real_time_session_is_refused(mode: str) -> None:
    out = run("mesh", "-n", "2", "--scheduling", mode, "--bind", loopback_block() + "2")
    assert out.returncode == 2, out.stdout + out.stderr
    line = one_line(out.stderr)
    assert "--scheduling" in line and "--rate" in line, line
    assert out.stdout == ""
