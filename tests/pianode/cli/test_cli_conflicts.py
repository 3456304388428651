"""Flags that contradict each other, do nothing, or cannot work for this command are one line and exit 2, before
anything is bound, scanned or sent; and the line names the flag at fault with advice that fits it.

Real program (``python -m pianode``) on loopback: every run that the old code let start is bounded by a short
--duration or --timeout and has its own ports, so even a regression ends quickly and meets no other test.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time

import pytest

from loopback_addresses import free_port, loopback_block

GAME_KEY = "ee182a63e216cdb1f51ad4bed8cf6508"
PIANODE = [sys.executable, "-m", "pianode"]


def run(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PIANODE, *argv], capture_output=True, text=True, timeout=timeout)


def refused(*argv: str) -> str:
    """The one line of a run that must be refused with exit status 2 (and nothing on standard output)."""
    out = run(*argv)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 1, out.stderr
    assert out.stdout == "", out.stdout
    return lines[0]


# ---------------------------------------------------------------- ldn: the version and key checks up front


@pytest.mark.parametrize(
    "argv",
    [
        ("ldn", "scan", "--version", "3.3", "--timeout", "0.3"),
        ("ldn", "join", "--game-key", GAME_KEY, "--version", "3.3", "--timeout", "0.3"),
        ("ldn", "host", "--game-key", GAME_KEY, "--version", "3.3", "--duration", "0.3"),
    ],
    ids=lambda a: a[1],
)
def test_an_ldn_version_without_ldn_is_refused_by_scan_join_and_host_alike(argv: tuple[str, ...]) -> None:
    line = refused(*argv, "--discovery-port", str(free_port()))
    assert line == (f"pianode ldn {argv[1]}: --version 3.3: Pia LDN application data is documented for "
                    "5.2-5.45 and 6.16-6.41, not 3.3")  # fmt: skip


@pytest.mark.parametrize("command", ["join", "host"])
@pytest.mark.parametrize("version", ["5.7", "5.8"])
def test_a_game_supplied_ldn_key_is_asked_for_before_scanning(command: str, version: str) -> None:
    started = time.monotonic()
    bound = ("--timeout", "5") if command == "join" else ("--duration", "5")
    line = refused("ldn", command, "--game-key", GAME_KEY, "--version", version,
                   "--discovery-port", str(free_port()), *bound)  # fmt: skip
    assert line.startswith(f"pianode ldn {command}: Pia {version} LDN needs --session-key"), line
    assert time.monotonic() - started < 4  # said at once, not after the scan's 5 s
    # Given, the key is taken: the host runs its network, the join listens (and here hears nothing: exit 1).
    bound = ("--timeout", "0.3") if command == "join" else ("--duration", "0.3", "--port", str(free_port()))
    out = run("ldn", command, "--game-key", GAME_KEY, "--version", version, "--session-key", "00" * 16,
              "--discovery-port", str(free_port()), *bound)  # fmt: skip
    assert out.returncode == (1 if command == "join" else 0), out.stderr
    assert command == "host" or "no LDN network heard" in out.stderr


# ---------------------------------------------------------------- ldn host: flags that do nothing or disagree


@pytest.mark.parametrize("command", ["host", "join"])
def test_ldn_messages_without_stations_is_refused(command: str) -> None:
    bound = ("--timeout", "0.3") if command == "join" else ("--duration", "0.3", "--port", str(free_port()))
    line = refused("ldn", command, "--game-key", GAME_KEY, "--messages", "5", "--discovery-port", str(free_port()),
                   *bound)  # fmt: skip
    assert "--messages" in line and "--stations" in line, line
    # With --stations it counts the exchange (which waits for a second station that never comes: INCOMPLETE).
    out = run("ldn", command, "--game-key", GAME_KEY, "--stations", "2", "--messages", "3", "--format", "jsonl",
              "--discovery-port", str(free_port()), *bound)  # fmt: skip
    assert out.returncode == 1, out.stderr
    assert command == "join" or '"messages": 3' in out.stdout


def _bindable(ip: str) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind((ip, 0))
        except OSError:
            return False
    return True


@pytest.mark.parametrize(("command", "address"), [("host", "169.254.6.1"), ("join", "169.254.6.7")])
def test_an_ldn_address_this_machine_lacks_names_address_and_advice_that_fits_it(command: str, address: str) -> None:
    if _bindable(address):
        pytest.skip(f"this machine has {address}")
    bound = ("--timeout", "0.3") if command == "join" else ("--duration", "0.3")
    line = refused("ldn", command, "--game-key", GAME_KEY, "--address", address,
                   "--discovery-port", str(free_port()), *bound)  # fmt: skip
    assert line.startswith(f"pianode ldn {command}: --address {address}: not an address of this machine"), line
    assert "169.254.X." in line and "127.0.0" not in line, line


def test_ldn_subnet_and_an_address_in_another_subnet_are_refused() -> None:
    line = refused("ldn", "host", "--game-key", GAME_KEY, "--subnet", "5", "--address", "169.254.6.1",
                   "--discovery-port", str(free_port()), "--duration", "0.3")  # fmt: skip
    assert "--subnet 5" in line and "--address 169.254.6.1" in line, line


# ---------------------------------------------------------------- lan host/join: the numbered messages' flags


def _lan(command: str) -> tuple[str, ...]:
    net = loopback_block()
    if command == "host":
        return ("lan", "host", "--game-key", GAME_KEY, "--bind", net + "2", "--listen", f"127.0.0.1:{free_port()}",
                "--duration", "0.3")  # fmt: skip
    return ("lan", "join", "--game-key", GAME_KEY, "--bind", net + "3", "--broadcast", f"127.255.255.255:{free_port()}",
            "--timeout", "0.3")  # fmt: skip


@pytest.mark.parametrize("command", ["host", "join"])
def test_lan_unreliable_and_alternate_unreliable_together_are_refused(command: str) -> None:
    line = refused(*_lan(command), "--unreliable", "--alternate-unreliable")
    assert "--unreliable" in line and "--alternate-unreliable" in line, line


@pytest.mark.parametrize("command", ["host", "join"])
def test_lan_message_flags_with_interval_0_are_refused(command: str) -> None:
    for flags in (("--unreliable",), ("--alternate-unreliable",), ("--sizes", "5")):
        line = refused(*_lan(command), "--interval", "0", *flags)
        assert flags[0] in line and "--interval 0" in line, line
    # --interval 0 alone is taken (the join then finds no session: exit 1)
    out = run(*_lan(command), "--interval", "0")
    assert out.returncode == (0 if command == "host" else 1), out.stderr


def test_a_busy_lan_listen_port_is_not_told_to_use_port_0_which_listen_refuses() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as busy:
        busy.bind(("127.0.0.1", 0))
        port = busy.getsockname()[1]
        line = refused("lan", "host", "--game-key", GAME_KEY, "--bind", loopback_block() + "2",
                       "--listen", f"127.0.0.1:{port}", "--duration", "0.3")  # fmt: skip
    assert f"--listen: UDP port {port} on 127.0.0.1 is already in use" in line, line
    assert "0 for any" not in line, line
    # (and indeed --listen takes no port 0)
    assert "--listen port must be 1..65535" in refused("lan", "host", "--game-key", GAME_KEY,
                                                       "--listen", "127.0.0.1:0", "--duration", "0.3")


# ---------------------------------------------------------------- bench


def test_bench_broadcast_session_of_a_version_without_group_packets_is_refused() -> None:
    line = refused("bench", "--sections", "session", "--session-version", "5.18/broadcast", "--quick")
    assert line == ("pianode bench: --session-version 5.18/broadcast: broadcast needs a version with group "
                    "packets (5.27+), not 5.18")  # fmt: skip


def test_the_bench_engine_never_runs_a_broadcast_session_as_unicast() -> None:
    from pianode.bench.sessions import run_shape

    assert run_shape("5.18") == ("5.18", "unicast")
    assert run_shape("5.29/broadcast") == ("5.29", "broadcast")
    with pytest.raises(ValueError, match="5.27"):
        run_shape("5.18/broadcast")


@pytest.mark.parametrize(("flag", "value"), [("--sections", "codec,,rtt"), ("--sections", "codec,"),
                                             ("--sizes", "64,,1400"), ("--session-version", "5.18,,5.29")])
def test_bench_lists_with_an_empty_item_are_refused(flag: str, value: str) -> None:
    line = refused("bench", flag, value, "--quick")
    assert line.startswith(f"pianode bench: {flag} has an empty item in {value!r}"), line


def test_the_bench_script_refuses_an_empty_item_too() -> None:
    import argparse

    from pianode.bench.run import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--sections", "codec,,rtt"])


def test_bench_unknown_version_advises_no_flag_bench_lacks() -> None:
    line = refused("bench", "--quick", "--version", "9.9")
    assert line.startswith("pianode bench: --version: Pia 9.9 is not documented"), line
    assert "allow" not in line and "nearest anyway" not in line, line


# ---------------------------------------------------------------- node, and -q with -v


@pytest.mark.parametrize("mode", [("--join", "127.0.0.1:5000"), ("--create", "--duration", "0.3")])
def test_an_empty_node_session_key_is_said_to_be_empty(mode: tuple[str, ...]) -> None:
    line = refused("node", *mode, "--session-key", "", "--bind", loopback_block() + "2")
    assert line.startswith("pianode node: --session-key is empty"), line


@pytest.mark.parametrize(
    "argv",
    [
        ("node", "--create", "--duration", "0.3", "--format", "jsonl", "--quiet", "--verbose"),
        ("-q", "node", "--create", "--duration", "0.3", "-vv"),
        ("-v", "mesh", "-n", "2", "--duration", "0.2", "-q"),
    ],
)
def test_quiet_with_verbose_is_refused(argv: tuple[str, ...]) -> None:
    line = refused(*argv)
    assert "-q" in line and "-v" in line and "contradict" in line, line
