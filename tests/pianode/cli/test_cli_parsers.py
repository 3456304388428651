"""The shared value parsers of the command line: numbers, player names, the Pia version, destinations.

Every subcommand reads its numbers, names, versions and HOST:PORT destinations through the same few
functions of ``pianode.cli.common`` (and ``protocols.pia.versions.parse_version``), so they are checked
here directly, then on the real program for a sample: a bad value is one line on stderr naming the flag,
exit status 2, before anything is sent.

* An integer is written in decimal digits, leading zeros and all (``04`` is 4); ``0x`` hex only where the
  command shows that number in hex (a LAN network id); ``0o7``, ``1_0``, other scripts' digits and spaces
  are refused, saying which form is wanted.  A value past the range is echoed as the user wrote it.
* A player name is printable: no newline, no escape sequence, no bidirectional override.
* A Pia version is ASCII digits with nothing around them.
* A destination is one host: never 0.0.0.0, 255.255.255.255, 127.0.0.0 or 127.255.255.255 (the
  ``--broadcast`` options take a broadcast address on purpose: there only 0.0.0.0 is refused).

Nothing here sends a datagram: every command line fails at its argument checks.
"""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from pianode.cli import lan as lan_cli
from pianode.cli import ldn as ldn_cli
from pianode.cli.common import CliError, check_name, check_number, parse_remote
from protocols.pia.versions import ConfigError, parse_version, profile_for

GAME_KEY = "ee182a63e216cdb1f51ad4bed8cf6508"
KEY = "00112233445566778899aabbccddeeff"
PIANODE = [sys.executable, "-m", "pianode"]


def run(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PIANODE, *argv], capture_output=True, text=True, timeout=60)


def refused(*argv: str) -> str:
    """The one line *argv* is refused with (exit status 2, nothing on standard output, no traceback)."""
    out = run(*argv)
    assert "Traceback" not in out.stderr, out.stderr
    lines = out.stderr.splitlines()
    assert out.returncode == 2 and len(lines) == 1 and not out.stdout, (out.returncode, out.stdout, out.stderr)
    return lines[0]


# ---------------------------------------------------------------- numbers


@pytest.mark.parametrize(
    ("text", "lo", "hi", "value"),
    [("04", 2, 32, 4), ("010", 0, 100000, 10), ("0123", 0, 0xFFFFFFFF, 123), ("08", 1, 1_000_000, 8), ("09", 2, 16, 9)],
)
def test_an_integer_with_leading_zeros_is_decimal(text: str, lo: int, hi: int, value: int) -> None:
    assert check_number("--n", text, lo, hi, integer=True) == value


@pytest.mark.parametrize("text", ["0x2", "0X2", "0o7", "0b11", "1_0", " 4", "4 ", "\u0664", "4.0", "", "+-4"])
def test_an_integer_in_another_form_is_refused_saying_which_form_is_wanted(text: str) -> None:
    with pytest.raises(CliError) as exc:
        check_number("--nodes", text, 2, 32, integer=True)
    assert str(exc.value) == f"--nodes must be an integer ≥ 2 and ≤ 32, written in decimal digits (such as 4); got {text!r}"


@pytest.mark.parametrize("text", ["1_0", "\u0661", " 2", "0x1", "inf", "nan"])
def test_a_number_in_another_form_is_refused(text: str) -> None:
    with pytest.raises(CliError) as exc:
        check_number("--duration", text, 0, 3600)
    assert "written as a decimal number (such as 1.5)" in str(exc.value), exc.value
    # (the decimal forms are all still read)
    assert [check_number("--duration", t, 0, 3600) for t in ("1.5", ".5", "5.", "1e3", "0010")] == [1.5, 0.5, 5.0, 1000.0, 10.0]


def test_hex_only_where_the_caller_allows_it() -> None:
    assert check_number("--network-id", "0x1A2b", 0, 0xFFFFFFFF, integer=True, allow_hex=True) == 0x1A2B
    assert check_number("--network-id", "0012", 0, 0xFFFFFFFF, integer=True, allow_hex=True) == 12
    with pytest.raises(CliError, match=r"written in decimal digits or as 0x and hex digits \(such as 4\); got '0o7'"):
        check_number("--network-id", "0o7", 0, 0xFFFFFFFF, integer=True, allow_hex=True)


def test_a_value_past_the_range_is_echoed_as_written() -> None:
    with pytest.raises(CliError) as exc:
        check_number("--network-id", "99999999999999999999999", 0, 0xFFFFFFFF, integer=True)
    assert str(exc.value) == "--network-id must be an integer ≥ 0 and ≤ 4294967295, got 99999999999999999999999"
    # thousands of digits (more than int() reads): still the range, the value cut short
    with pytest.raises(CliError) as exc:
        check_number("--count", "1" * 5000, 1, 1_000_000, integer=True)
    assert str(exc.value) == f"--count must be an integer ≥ 1 and ≤ 1000000, got {'1' * 39}…"


def test_the_lan_commands_numbers_follow_the_same_rule() -> None:
    """lan host/join read --max, --network-id, ... themselves: decimal, and the network id also in the
    0x form the commands print it in."""
    assert lan_cli._number("04", "max", lo=2, hi=16) == 4
    assert lan_cli._number("010", "network-id") == 10
    assert lan_cli._number("0x0000abcd", "network-id") == 0xABCD
    with pytest.raises(CliError, match=r"^--max must be .*written in decimal digits \(such as 4\); got '0x4'$"):
        lan_cli._number("0x4", "max", lo=2, hi=16)


# ---------------------------------------------------------------- names


@pytest.mark.parametrize(("name", "code"), [("a\nb", "000A"), ("a\x1b[31m", "001B"), ("a\u202eb", "202E"), ("\tab", "0009")])
def test_a_name_with_a_character_that_is_not_printable_is_refused(name: str, code: str) -> None:
    with pytest.raises(CliError) as exc:
        check_name("--name", name)
    line = str(exc.value)
    assert line.startswith("--name must be printable characters") and f"U+{code}" in line, line
    assert line.isprintable(), line  # the line itself shows the character escaped
    check_name("--name", "Zoë 2")  # (a space and letters of any script are fine)


# ---------------------------------------------------------------- versions


@pytest.mark.parametrize("text", ["\u0665.\u0661\u0668", " 5.18", "5.18 ", "5.18\n", "\u0665\u0661\u0668\u0669\u0668", " 51898"])
def test_a_version_is_ascii_digits_with_nothing_around(text: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse_version(text)
    assert str(exc.value) == f"cannot read {text!r} as a Pia version (write it as 5.18)"
    assert parse_version("5.18") == parse_version("5.18.98") == parse_version("51898") == (5, 18)


# ---------------------------------------------------------------- destinations


NOT_A_HOST = {
    "0.0.0.0:5": "0.0.0.0 is no address to send to",
    "0:5": "0.0.0.0 is no address to send to",  # a name that resolves to it
    "255.255.255.255:5": "255.255.255.255 is the broadcast address, not one host's address",
    "127.255.255.255:5": "127.255.255.255 is the broadcast address of 127.0.0.0/8, not one host's address",
    "127.0.0.0:5": "127.0.0.0 is the network address of 127.0.0.0/8, not one host's address",
}


@pytest.mark.parametrize("text", list(NOT_A_HOST))
def test_a_destination_that_is_no_single_host_is_refused(text: str) -> None:
    with pytest.raises(CliError) as exc:
        parse_remote(text, "--join")
    assert str(exc.value).startswith(f"--join {text}") and NOT_A_HOST[text] in str(exc.value), exc.value
    # every other address is taken: a LAN host's, another loopback one's
    assert [parse_remote(t, "--join") for t in ("10.0.0.255:9", "127.0.0.1:9", "127.255.255.254:9")] == [
        ("10.0.0.255", 9), ("127.0.0.1", 9), ("127.255.255.254", 9)]  # fmt: skip


def test_a_broadcast_option_takes_a_broadcast_address_but_not_0000() -> None:
    profile = profile_for("5.18")
    with pytest.raises(CliError, match=r"^--broadcast 0\.0\.0\.0:9: 0\.0\.0\.0 is no address to send to"):
        lan_cli._broadcast(argparse.Namespace(broadcast="0.0.0.0:9"), profile)
    assert lan_cli._broadcast(argparse.Namespace(broadcast="127.255.255.255:9"), profile) == ("127.255.255.255", 9)
    with pytest.raises(CliError, match=r"^--broadcast 0\.0\.0\.0: 0\.0\.0\.0 is no address to send to"):
        ldn_cli._ipv4("--broadcast", "0.0.0.0")
    assert ldn_cli._ipv4("--broadcast", "255.255.255.255") == "255.255.255.255"


# ---------------------------------------------------------------- on the real program
# Each command line carries a second bad value that is checked after the one under test: the line says
# which of the two was refused, so the one under test is seen taken or refused, and nothing starts.


def test_the_program_reads_integers_in_decimal() -> None:
    assert refused("mesh", "-n", "04", "--rate", "0").startswith("pianode mesh: --rate must be")  # -n 04 taken
    line = refused("mesh", "-n", "0x2", "--rate", "0")
    assert "--nodes must be an integer ≥ 2 and ≤ 32, written in decimal digits (such as 4); got '0x2'" in line, line
    line = refused("node", "--create", "--network", "ldn", "--network-id", "99999999999999999999999")
    assert "got 99999999999999999999999 " in line, line
    line = refused("lan", "join", "--game-key", GAME_KEY, "--network-id", "010", "--app-version", "70000")
    assert "--app-version must be" in line, line  # --network-id 010 taken


def test_the_program_refuses_a_name_that_is_not_printable() -> None:
    line = refused("lan", "host", "--game-key", GAME_KEY, "--name", "a\x1b[31m", "--max", "1")
    assert "--name must be printable characters" in line and "U+001B" in line, line


@pytest.mark.parametrize("version", ["\u0665.\u0661\u0668", " 5.18"])
def test_the_program_refuses_a_version_that_is_not_ascii_digits(version: str) -> None:
    line = refused("node", "--create", "--version", version, "--network", "lan", "--network-id", "5")
    assert line == f"pianode node: cannot read {version!r} as a Pia version (write it as 5.18)", line


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (("node", "--join", "0.0.0.0:5"), "--join 0.0.0.0:5: 0.0.0.0 is no address to send to"),
        (("node", "--join", "127.255.255.255:5"), "--join 127.255.255.255:5: 127.255.255.255 is the broadcast address"),
        (("prudp", "connect", "--variant", "nintendo-v1", "127.0.0.0:9", "--timeout", "0.3"),
         "HOST:PORT 127.0.0.0:9: 127.0.0.0 is the network address of 127.0.0.0/8"),
        (("node", "--create", "--relay", "0.0.0.0:5", "--relay-ca", "x", "--relay-cert", "x", "--relay-key", "x"),
         "--relay 0.0.0.0:5: 0.0.0.0 is no address to send to"),
        (("lan", "browse", "--game-key", GAME_KEY, "--broadcast", "0.0.0.0:9", "--timeout", "0.3"),
         "--broadcast 0.0.0.0:9: 0.0.0.0 is no address to send to"),
    ],
)  # fmt: skip
def test_the_program_refuses_a_destination_that_is_no_single_host(argv: tuple[str, ...], said: str) -> None:
    line = refused(*argv)
    assert said in line, line
