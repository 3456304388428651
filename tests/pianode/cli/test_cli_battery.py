"""A battery over the whole command line: every option of every command that takes a value, fed bad values.

The cases are not a hand list: the test walks the real argparse tree of ``pianode`` (every command of
``pianode.cli.main.COMMANDS`` and every action under it), tells each value-taking option's kind from its
argparse type, choices, metavar and name, and derives the bad values from that kind (empty, not a number,
``nan``, ``inf``, negative, far too large, a port over 65535, a file that does not exist, a directory where a
file is wanted, an output under /proc, ...).  Each must give exactly one line on stderr that names the flag
or the value, exit status 2, no traceback, nothing on stdout, and nothing left running.

Most cases call ``pianode.cli.main.main`` in this process, with the point where every command's work starts
(``trio.run``, and the benchmark's runner) replaced by a tripwire: a bad value must be refused before it, so
the tripwire firing is itself a failure ("the work started with this value").  A sample runs as real
``python -m pianode`` processes and must say the same thing.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import pathlib
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from pianode.capture.pcap import PcapWriter
from pianode.cli import main as cli_main_module
from pianode.cli.main import COMMANDS, build_parser, main

from loopback_addresses import free_port, loopback_block

GAME_KEY = "ee182a63e216cdb1f51ad4bed8cf6508"
PIANODE = [sys.executable, "-m", "pianode"]
BIG = "1" + "0" * 20  # past any u64


class WorkStarted(BaseException):
    """The tripwire: a command got past its value checks and started its work."""


# ---------------------------------------------------------------- the tree


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser]]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield path, parser
    for action in subs:
        for name, sub in action.choices.items():
            yield from _leaves(sub, (*path, name))


def _value_actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction, argparse._VersionAction)):
            continue
        if action.nargs == 0 or action.dest in ("sub_verbose", "sub_quiet"):
            continue
        yield action


# ---------------------------------------------------------------- kinds and their bad values

_NUMBER_DESTS = {"duration", "timeout", "interval", "send_every", "report", "unreliable_interval"}
_INT_DESTS = {"max", "game_mode", "app_version", "host_address_size", "network_id", "gathering_id", "session",
              "days", "subnet", "stations", "messages", "count", "size", "fragment_size", "nodes", "processes",
              "repeats", "rounds", "datagrams", "rtt_pings", "mtu"}  # fmt: skip
_HEX_DESTS = {"game_key", "session_key", "hmac_key", "local_id", "ssid", "application_data", "session_param"}
_LOCAL_ADDRESS_DESTS = {"bind", "base_address", "host", "address", "listen"}
_REMOTE_DESTS = {"join", "relay"}
_INPUT_FILE_DESTS = {"relay_ca", "relay_cert", "relay_key", "ca", "cert", "key", "certificate_key", "capture"}
_OUTPUT_FILE_DESTS = {"record", "decrypted_pcap", "json"}
_OUTPUT_DIR_DESTS = {"profile"}


def kind_of(path: tuple[str, ...], action: argparse.Action) -> str | None:
    """The kind of value *action* takes (None: free text with no bad value to derive)."""
    dest = action.dest
    type_name = getattr(action.type, "__name__", None)
    if action.choices is not None:
        return "choice"
    if dest == "seed":
        return "seed"
    if dest == "port" or dest.endswith("_port") or action.metavar == "PORT":
        return "port"
    if dest in ("version", "session_version"):
        return "version"
    if dest in ("sections",):
        return "sections"
    if dest in ("sizes", "formation_sizes"):
        return "int_list"
    if type_name in ("number", "float") or dest in _NUMBER_DESTS or dest.endswith("_seconds") or dest == "rate":
        return "number"
    if type_name in ("integer", "int") or dest in _INT_DESTS:
        return "int"
    if dest in _HEX_DESTS:
        return "hex"
    if dest == "address" and path == ("prudp", "connect"):
        return "remote"
    if dest in _REMOTE_DESTS:
        return "remote"
    if dest == "broadcast":
        return "broadcast"
    if dest in _LOCAL_ADDRESS_DESTS:
        return "local_address"
    if dest == "session" and path == ("decode",):
        return "input_file"
    if dest in _INPUT_FILE_DESTS or type_name == "Path":
        return "input_file"
    if dest in _OUTPUT_FILE_DESTS:
        return "output_file"
    if dest in _OUTPUT_DIR_DESTS or (dest == "dir" and path in (("wireshark", "install"), ("relay", "ca", "init"))):
        return "output_dir"
    if dest == "dir":
        return "input_dir"
    if dest == "trust":
        return "trust"
    if dest == "mac":
        return "mac"
    if dest == "network":
        return "cidr" if path == ("relay", "serve") else "network"
    if dest == "prudp_variant":
        return "word"
    if dest in ("relay_room", "name", "server", "client"):
        return "name"
    if dest in ("access_key", "hmac_key"):
        return "text"
    return None


def bad_values(kind: str, files: dict[str, str]) -> list[str]:
    return {
        "choice": ["", "abc"],
        "seed": ["", "abc", "1.5", "nan"],
        "port": ["", "abc", "-1", "70000", "nan"],
        "version": ["", "abc", "99.99"],
        "sections": ["", "abc"],
        "int_list": ["", "abc", "-1", "nan"],
        "number": ["", "abc", "nan", "inf", "-1", "1e9"],
        "int": ["", "abc", "1.5", "nan", "-1", BIG],
        "hex": ["", "zz", "abc"],
        "remote": ["", "abc", "127.0.0.1:70000", "127.0.0.1:abc", "nothost.invalid:1"],
        "broadcast": ["", "127.0.0.1:70000", "nothost.invalid"],
        "local_address": ["", "127.0.0.1:70000", "nothost.invalid", "10.0.0.1"],
        "input_file": ["", files["missing"], files["directory"]],
        "output_file": ["", files["directory"], "/proc/x.pcap", files["missing_dir_file"]],
        "output_dir": ["", files["file"], "/proc/x", "~no-such-user-pianode/x", "-"],
        "input_dir": ["", files["missing"], files["file"]],
        "trust": ["", "zz", files["missing"]],
        "mac": ["", "abc", "127.0.0.1=zz"],
        "network": ["", "abc"],
        "cidr": ["", "abc", "10.0.0.0/33", "0.0.0.0/0", "127.0.0.0/16"],
        "word": ["", "abc"],
        "name": ["", "x" * 300, "a\udcff"],  # the last: a byte that is no UTF-8, as Python reads it from argv
        "text": ["\udcff\udcfe"],
    }[kind]


#: Values of a kind that are good for one option after all: (command, flag, value) → why.
VALID = {
    (("decode",), "--hmac-key", "zz"): "an HMAC key may be text",
    (("decode",), "--hmac-key", "abc"): "an HMAC key may be text",
    (("decode",), "--session-param", "abc"): "an LDN session param is an integer, hex digits allowed",
    (("decode",), "--network-id", "abc"): "hex digits that cannot be decimal are read as hex",
    (("decode",), "--gathering-id", "abc"): "hex digits that cannot be decimal are read as hex",
    (("ldn", "host"), "--local-id", "abc"): "the local communication id is hex",
    (("ldn", "scan"), "--local-id", "abc"): "the local communication id is hex",
    (("ldn", "join"), "--local-id", "abc"): "the local communication id is hex",
    (("relay", "ca", "init"), "DIR", "~no-such-user-pianode/x"): "relay takes ~ as a name, as mkdir does",
}


def base_argv(path: tuple[str, ...], files: dict[str, str]) -> list[str]:
    """A valid command line for each leaf, so that the value under test is the only thing wrong."""
    return {
        ("mesh",): [],
        ("node",): ["--create"],
        ("decode",): [files["capture"]],
        ("lan", "host"): ["--game-key", GAME_KEY],
        ("lan", "browse"): ["--game-key", GAME_KEY],
        ("lan", "join"): ["--game-key", GAME_KEY],
        ("ldn", "host"): ["--game-key", GAME_KEY],
        ("ldn", "scan"): [],
        ("ldn", "join"): ["--game-key", GAME_KEY],
        ("prudp", "serve"): ["--variant", "nintendo-v1"],
        ("prudp", "connect"): ["--variant", "nintendo-v1", "127.0.0.1:9"],
        ("bench",): ["--sections", "codec"],
        ("wireshark", "path"): [],
        ("wireshark", "install"): [],
        ("relay", "serve"): ["--listen", f"127.0.0.1:{files['port']}", "--ca", files["ca"], "--cert", files["cert"],
                             "--key", files["key"]],
        ("relay", "ca", "init"): [files["new_ca_dir"]],
        ("relay", "ca", "issue"): [files["ca_dir"], "--server", "hub"],
    }[path]


def _with_value(path: tuple[str, ...], action: argparse.Action, base: list[str], value: str) -> list[str]:
    """*base* with *action* given *value* (replacing what base gave it)."""
    argv = list(base)
    if not action.option_strings:  # a positional: base has it at the position of its kind
        positionals = [a for a in _leaf_parser(path)._actions if not a.option_strings and a.nargs != 0
                       and not isinstance(a, argparse._SubParsersAction)]  # fmt: skip
        index = positionals.index(action)
        slots = [i for i, word in enumerate(argv) if not word.startswith("-") and (i == 0 or not argv[i - 1].startswith("-"))]
        argv[slots[index]] = value
        return [*path, *argv]
    flag = action.option_strings[-1]
    for i, word in enumerate(argv):
        if word in action.option_strings:
            argv[i + 1] = value
            return [*path, *argv]
    return [*path, *argv, f"{flag}={value}" if value.startswith("-") else flag, *([] if value.startswith("-") else [value])]


_PARSER = build_parser()


def _leaf_parser(path: tuple[str, ...]) -> argparse.ArgumentParser:
    return dict(_leaves(_PARSER, ()))[path]


def cases(files: dict[str, str]) -> list[tuple[tuple[str, ...], str, str, list[str]]]:
    """(command path, flag, value, argv) for every bad value of every value-taking option."""
    out = []
    for path, parser in _leaves(_PARSER, ()):
        base = base_argv(path, files)
        for action in _value_actions(parser):
            kind = kind_of(path, action)
            if kind is None:
                continue
            flag = action.option_strings[-1] if action.option_strings else (action.metavar or action.dest)
            for value in bad_values(kind, files):
                if (path, str(flag), value) in VALID:
                    continue
                out.append((path, str(flag), value, _with_value(path, action, base, value)))
    return out


# ---------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("battery")
    capture = root / "one.pcap"
    with capture.open("wb") as f:
        PcapWriter(f).write_udp(b"\x00" * 8, "127.0.0.1:1", "127.0.0.2:2", 1.0)
    (root / "a-file").write_text("x")
    (root / "a-dir").mkdir()
    ca_dir = root / "ca"
    assert main(["relay", "ca", "init", str(ca_dir)]) == 0
    assert main(["relay", "ca", "issue", str(ca_dir), "--server", "hub"]) == 0
    issued = {p.suffix: str(p) for p in ca_dir.glob("hub*")}
    return {
        "capture": str(capture),
        "port": str(free_port()),
        "missing": str(root / "no-such-file"),
        "missing_dir_file": str(root / "no-such-dir" / "x.pcap"),
        "directory": str(root / "a-dir"),
        "file": str(root / "a-file"),
        "ca_dir": str(ca_dir),
        "new_ca_dir": str(root / "new-ca"),
        "ca": str(ca_dir / "ca.pem"),
        "cert": issued[".pem"],
        "key": issued[".key"],
    }


@pytest.fixture
def tripwire(monkeypatch: pytest.MonkeyPatch, tmp_path: pathlib.Path) -> Iterator[list[str]]:
    """Replaces the start of every command's work; lists what started.  Runs in an empty directory."""
    import trio

    import pianode.bench.run

    started: list[str] = []

    def trip(*_args: Any, **_kwargs: Any) -> Any:
        started.append("work")
        raise WorkStarted

    monkeypatch.setattr(trio, "run", trip)
    monkeypatch.setenv("HOME", str(tmp_path))  # wireshark install's default folder is under it
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    monkeypatch.setattr(pianode.bench.run, "run_benchmark", trip)
    monkeypatch.chdir(tmp_path)
    yield started


def _threads() -> int:
    """Threads running in this process, but Trio's idle worker threads: an earlier test's thread cache keeps
    them up to 10 s after their last job, and they end on their own whenever that is, mid-battery."""
    return sum(1 for t in threading.enumerate() if not t.name.startswith("Trio thread "))


def _has_children() -> bool:
    try:
        os.waitpid(-1, os.WNOHANG)
    except ChildProcessError:
        return False
    return True


# ---------------------------------------------------------------- the battery


def _check(argv: list[str], flag: str, value: str, status: int, out: str, err: str) -> str | None:
    """What is wrong with the outcome of one bad value (None: right)."""
    lines = err.splitlines()
    if "Traceback" in err:
        return f"a traceback: {err!r}"
    if status != 2 or len(lines) != 1:
        return f"exit {status} with {len(lines)} stderr line(s): {err!r}"
    if out:
        return f"stdout not empty: {out[:200]!r}"
    line = lines[0]
    if flag not in line and (not value or value not in line):
        return f"the line names neither {flag} nor {value!r}: {line!r}"
    return None


def test_every_value_taking_option_refuses_bad_values_in_one_line(
    files: dict[str, str], tripwire: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    all_cases = cases(files)
    # The walk reached every command, and the battery is not a token one.
    assert {path[0] for path, *_ in all_cases} == {name for name, *_ in COMMANDS}
    assert len(all_cases) > 500
    threads = _threads()
    failures = []
    for path, flag, value, argv in all_cases:
        tripwire.clear()
        status = main(argv)
        captured = capsys.readouterr()
        problem = _check(argv, flag, value, status, captured.out, captured.err)
        if tripwire:
            problem = f"the work started (exit {status}): {captured.err.strip()!r}"
        if problem is None and (_threads() != threads or _has_children()):
            problem = "something is left running"
        if problem is not None:
            failures.append(f"pianode {' '.join(argv)}: {problem}")
    assert not failures, f"{len(failures)} of {len(all_cases)} cases:\n" + "\n".join(failures)


def test_a_recording_is_never_written_over_a_file_the_command_reads(
    files: dict[str, str], tripwire: list[str], capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    """``--record`` (or the session file beside it) naming a relay file the run reads: refused before the run,
    whose recording would have replaced the key or certificate at its end."""
    site = tmp_path / "site"
    site.mkdir()
    for name in ("ca.pem", "ca.key"):
        (site / name).write_bytes(pathlib.Path(files["ca_dir"], name).read_bytes())
    assert main(["relay", "ca", "issue", str(site), "--client", "site"]) == 0
    (site / "ca.key").unlink()
    (site / "rec.session.json").write_bytes((site / "ca.pem").read_bytes())
    capsys.readouterr()
    def relay(ca: str) -> list[str]:
        return ["--relay-ca", str(site / ca), "--relay-cert", str(site / "site.pem"), "--relay-key", str(site / "site.key")]

    commands = [["mesh", "--relay", f"127.0.0.1:{files['port']}"], ["ldn", "host", "--game-key", GAME_KEY, "--relay",
                f"127.0.0.1:{files['port']}"], ["ldn", "join", "--game-key", GAME_KEY, "--relay", f"127.0.0.1:{files['port']}"]]  # fmt: skip
    before = {p: p.read_bytes() for p in site.iterdir()}
    failures = []
    for command in commands:
        for target in ("site.key", "site.pem", "ca.pem", "rec.pcap"):  # rec.pcap: its session file is the CA read
            tripwire.clear()
            ca = "rec.session.json" if target == "rec.pcap" else "ca.pem"
            status = main([*command, *relay(ca), "--record", str(site / target)])
            err = capsys.readouterr().err
            if tripwire or status != 2 or len(err.splitlines()) != 1 or "--record" not in err or "destroy" not in err:
                failures.append(f"{' '.join(command)} --record {target}: exit {status}, work started: {bool(tripwire)}, {err!r}")
    assert not failures, "\n".join(failures)
    assert {p: p.read_bytes() for p in site.iterdir()} == before


def test_a_bad_value_with_a_line_break_or_an_escape_is_still_one_line(
    files: dict[str, str], tripwire: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """Every bad value of the battery with a line break and a terminal escape in it (a path or a pasted value
    may hold them): the line that names it shows them escaped, so it stays one line that nothing rewrites."""
    made = {(path, str(a.option_strings[-1] if a.option_strings else (a.metavar or a.dest)))
            for path, parser in _leaves(_PARSER, ()) for a in _value_actions(parser) if kind_of(path, a) == "output_dir"}
    failures = []
    for path, flag, value, argv in cases(files):
        if not value or (path, flag) in made:  # a folder to make: "x\n..." in front is one it can make
            continue
        odd = "x\n\x1b[2J" + value  # in front: a path stays one that is not there
        argv = [odd if word == value else word[: -len(value)] + odd if word.endswith("=" + value) else word
                for word in argv]  # fmt: skip
        tripwire.clear()
        status = main(argv)
        err = capsys.readouterr().err
        if tripwire or status != 2 or len(err.splitlines()) != 1 or "\x1b" in err:
            failures.append(f"pianode {' '.join(argv)!r}: exit {status}, work started: {bool(tripwire)}, {err!r}")
    assert not failures, f"{len(failures)} cases:\n" + "\n".join(failures)


def _groups(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> Iterator[tuple[tuple[str, ...], list[str]]]:
    """Every command that only names subcommands (``pianode``, ``lan``, ``relay ca``, ...) with their names."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            yield path, list(action.choices)
            for name, sub in action.choices.items():
                yield from _groups(sub, (*path, name))


def test_a_command_without_its_subcommand_is_one_line_naming_them(capsys: pytest.CaptureFixture[str]) -> None:
    """``pianode``, ``pianode lan``, ``pianode relay ca``: one line that lists what may follow, exit 2, nothing on
    stdout (some printed their whole help on stderr, prudp on stdout)."""
    groups = list(_groups(_PARSER, ()))
    assert len(groups) >= 7
    failures = []
    for path, names in groups:
        status = main(list(path))
        out, err = capsys.readouterr()
        if status != 2 or out or len(err.splitlines()) != 1 or not all(name in err for name in names):
            failures.append(f"pianode {' '.join(path)}: exit {status}, stdout {out[:80]!r}, stderr {err[:300]!r}")
    assert not failures, "\n".join(failures)


def test_an_unknown_option_after_the_arguments_is_one_line_of_that_command(
    files: dict[str, str], tripwire: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """``pianode decode CAPTURE --no-such-flag``: the line is the command's, not the program's (it was ``pianode:
    unrecognized arguments ... (see pianode --help)``, the help without the flag), exit 2, nothing started."""
    failures = []
    for path, _parser in _leaves(_PARSER, ()):
        for extra in (["--no-such-flag"], ["--no-such-flag=1", "stray"]):
            tripwire.clear()
            status = main([*path, *base_argv(path, files), *extra])
            out, err = capsys.readouterr()
            prog = " ".join(("pianode", *path))
            if (tripwire or status != 2 or out or len(err.splitlines()) != 1 or not err.startswith(f"{prog}: ")
                    or "(see pianode --help)" in err or extra[0] not in err):  # fmt: skip
                failures.append(f"{prog} ... {' '.join(extra)}: exit {status}, {err!r}")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize(("argv", "said"), [
    (["--version", "decode", "x.pcap"], "pianode: unrecognized arguments: --version"),  # decode has a --version
    (["--bogus", "mesh"], "pianode: unrecognized arguments: --bogus"),
    (["-x"], "pianode: unrecognized arguments: -x"),  # not "COMMAND missing", which hid it
    (["-v", "--nope"], "pianode: unrecognized arguments: --nope"),
])  # fmt: skip
def test_an_unknown_option_before_the_command_is_the_programs(
    argv: list[str], said: str, tripwire: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2 and not tripwire
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1 and err.startswith(said), err


def test_a_sample_says_the_same_as_a_real_process(
    files: dict[str, str], tripwire: list[str], capsys: pytest.CaptureFixture[str], tmp_path: pathlib.Path
) -> None:
    """In-process main is faithful: a spread of cases (a few per command) run as ``python -m pianode``."""
    all_cases = cases(files)
    by_command: dict[tuple[str, ...], list[list[str]]] = collections.defaultdict(list)
    for path, _flag, _value, argv in all_cases:
        by_command[path].append(argv)
    sample = [argvs[(2 * i + 1) * len(argvs) // 4] for argvs in by_command.values() for i in range(min(2, len(argvs)))]
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path)}
    procs = [subprocess.Popen([*PIANODE, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              cwd=tmp_path, env=env) for argv in sample]  # fmt: skip
    try:
        results = [p.communicate(timeout=60) for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.communicate()
    for argv, p, (out, err) in zip(sample, procs, results, strict=True):
        assert "Traceback" not in err, (argv, err)
        assert p.returncode == 2 and len(err.splitlines()) == 1 and out == "", (argv, p.returncode, out, err)
        assert main(argv) == 2 and not tripwire, argv
        assert capsys.readouterr().err == err, argv


def test_every_command_refuses_a_closed_standard_output_before_its_work(
    files: dict[str, str], tripwire: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Started with ``>&-`` (Python's ``sys.stdout`` is then None): one line, exit 2, the work never started;
    tests/pianode/cli/test_cli_streams.py runs real processes so."""
    failures = []
    for path, _parser in _leaves(_PARSER, ()):
        for argv in ([*path, *base_argv(path, files)], [*path, "--help"]):
            tripwire.clear()
            with monkeypatch.context() as m:
                m.setattr(sys, "stdout", None)
                status = main(argv)
            err = capsys.readouterr().err
            if tripwire or status != 2 or len(err.splitlines()) != 1 or "standard output is closed" not in err:
                failures.append(f"pianode {' '.join(argv)}: exit {status}, work started: {bool(tripwire)}, {err!r}")
    assert not failures, "\n".join(failures)


# ---------------------------------------------------------------- --format jsonl when the command fails


def _jsonl_failures(tmp_path: pathlib.Path, files: dict[str, str]) -> dict[str, list[str]]:
    """A failing run of every command that has --format jsonl (each on ports of its own)."""
    port = lambda: str(free_port())  # noqa: E731
    truncated = tmp_path / "cut.pcap"
    with truncated.open("wb") as f:
        writer = PcapWriter(f)
        for i in range(3):
            writer.write_udp(bytes([i]) * 20, "127.0.0.1:1", "127.0.0.2:2", 1.0 + i)
    truncated.write_bytes(truncated.read_bytes()[:-5])
    net = loopback_block()
    return {
        "mesh": ["mesh", "-n", "2", "--loss", "1", "--duration", "0.3", "--seed", "1", "--bind", net + "2"],
        "node": ["node", "--join", f"127.0.0.1:{port()}", "--session-key", "00" * 16, "--bind", net + "5"],
        "lan browse": ["lan", "browse", "--game-key", GAME_KEY, "--timeout", "0.3",
                       "--broadcast", f"127.255.255.255:{port()}"],
        "lan join": ["lan", "join", "--game-key", GAME_KEY, "--timeout", "0.3", "--broadcast", f"127.255.255.255:{port()}",
                     "--bind", net + "6"],
        "ldn scan": ["ldn", "scan", "--timeout", "0.3", "--discovery-port", port()],
        "ldn join": ["ldn", "join", "--game-key", GAME_KEY, "--timeout", "0.3", "--discovery-port", port()],
        "ldn host": ["ldn", "host", "--game-key", GAME_KEY, "--duration", "0.5", "--stations", "2",
                     "--discovery-port", port(), "--port", "0"],
        "decode": ["decode", str(truncated)],
    }  # fmt: skip


def test_jsonl_is_json_on_every_line_when_the_command_fails_and_counts_its_reasons(
    files: dict[str, str], tmp_path: pathlib.Path
) -> None:
    runs = _jsonl_failures(tmp_path, files)
    with_format = {name for name, *_ in COMMANDS}
    assert {name.split()[0] for name in runs} <= with_format
    procs = {name: subprocess.Popen([*PIANODE, *argv, "--format", "jsonl"], stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, cwd=tmp_path)
             for name, argv in runs.items()}  # fmt: skip
    try:
        outs = {name: p.communicate(timeout=60) for name, p in procs.items()}
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.communicate()
    for name, (out, err) in outs.items():
        status = procs[name].returncode
        assert status == (2 if name == "decode" else 1), (name, status, out, err)
        assert "Traceback" not in err and len(err.splitlines()) <= 1 + (name == "mesh"), (name, err)
        records = [json.loads(line) for line in out.splitlines()]  # every line, none skipped
        assert records, (name, err)
        if name == "decode":  # the datagrams read before the cut, then one line on stderr naming where it broke
            continue
        last = records[-1]
        counts = [last[k] for k in ("ignored", "drops") if k in last]
        assert counts, (name, last)  # the failure counts why what was heard did not help
        assert all(isinstance(c, dict) and all(isinstance(n, int) for n in c.values()) for c in counts), (name, last)
