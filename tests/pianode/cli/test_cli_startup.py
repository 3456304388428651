"""Start-up: ``pianode --help`` and ``pianode decode`` import only what they use.

Each command runs in a fresh interpreter that writes the names in ``sys.modules`` when it exits; the test
checks the names, not the time (the time is measured by hand against ``python -c "import trio"``, see
issue 21's note).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pianode.capture.pcap import PcapWriter
from pianode.cli.main import COMMANDS, build_parser
from protocols.crypto.aead import available_backends
from protocols.pia.header import PacketHeader
from protocols.pia.message import Message
from protocols.pia.nonce import nonce_builder
from protocols.pia.packet import Packet, PacketCodec
from protocols.pia.versions import Proto, profile_for

# Runs pianode's main() and, at exit, writes the loaded module names to the file named by argv[1].
_PROBE = """
import atexit, json, sys
out, sys.argv = sys.argv[1], ["pianode", *sys.argv[2:]]
atexit.register(lambda: open(out, "w").write(json.dumps(sorted(sys.modules))))
from pianode.cli.main import main
sys.exit(main())
"""

#: What no decode or help needs: the node, the simulations, the other commands, the benchmark, Trio.
NEVER = ("trio", "pianode.mesh", "pianode.sim", "pianode.lan", "pianode.ldn", "pianode.prudp", "pianode.bench",
         "pianode.wireshark", "pianode.node", "protocols.prudp", "pianode.cli.mesh", "pianode.cli.node",
         "pianode.cli.lan", "pianode.cli.ldn", "pianode.cli.prudp", "pianode.cli.bench", "pianode.cli.wireshark")  # fmt: skip


def _modules_of(tmp_path: Path, *argv: str) -> tuple[set[str], subprocess.CompletedProcess[str]]:
    out = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(out), *argv], capture_output=True, text=True, timeout=60,
        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
    )  # fmt: skip
    return set(json.loads(out.read_text())), done


def _under(modules: set[str], *roots: str) -> set[str]:
    return {m for m in modules if any(m == r or m.startswith(r + ".") for r in roots)}


def test_help_imports_only_the_parser(tmp_path: Path) -> None:
    modules, done = _modules_of(tmp_path, "--help")
    assert done.returncode == 0 and "decode" in done.stdout and "wireshark" in done.stdout
    assert _under(modules, "pianode", "protocols") == {
        "pianode", "pianode.cli", "pianode.cli.main", "pianode.cli.common", "pianode.cli.interrupt", "protocols",
        "protocols.errors", "protocols.text",
    }  # fmt: skip
    assert _under(modules, "trio", "attr", "attrs", "Crypto", "cryptography", "importlib.metadata", "logging") == set()


def test_a_command_help_imports_only_that_command(tmp_path: Path) -> None:
    modules, done = _modules_of(tmp_path, "prudp", "--help")
    assert done.returncode == 0 and "serve" in done.stdout
    assert "pianode.cli.prudp" in modules
    assert _under(modules, "pianode.cli.mesh", "pianode.cli.decode", "pianode.cli.lan", "pianode.cli.bench") == set()


def _recording(path: Path) -> dict[str, str]:
    """A 5.18 capture of a few encrypted packets, and its session settings."""
    key = bytes.fromhex("9f1bba38de3b1df42ab5b29e7844d207")
    profile = profile_for("5.18")
    codec = PacketCodec(profile, key, nonce_builder(profile, "lan"))
    message = Message(protocol_type=profile.protocol_id(Proto.UNRELIABLE), protocol_port=0, payload=b"state",
                      flags=profile.bitmap_flag, destination=2, source_constant_id=7)  # fmt: skip
    with path.open("wb") as f:
        writer = PcapWriter(f)
        for i in range(1, 6):
            packet = Packet(PacketHeader(True, i, 3, nonce=i.to_bytes(8, "big")), (message,))
            writer.write_udp(codec.encode(packet, "127.0.0.1"), "127.0.0.1:49152", "127.0.0.2:49152", time=i)
    return {"version": "5.18", "network": "lan", "session_key": key.hex()}


def test_decode_imports_the_decoder_and_nothing_else(tmp_path: Path) -> None:
    pcap = tmp_path / "x.pcap"
    session = _recording(pcap)
    (tmp_path / "x.json").write_text(json.dumps(session))
    modules, done = _modules_of(tmp_path, "decode", "--session", str(tmp_path / "x.json"), "--format", "jsonl", str(pcap))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(r["authenticated"], r["messages"][0]["payload"]) for r in lines] == [(True, b"state".hex())] * 5
    assert _under(modules, *NEVER) == set()
    assert {"pianode.cli.decode", "pianode.capture.decode", "pianode.capture.pcap"} <= modules
    if "cryptography" in available_backends():
        # The fast backend decrypts; pycryptodome (a slow first import) is not loaded for nothing.
        assert _under(modules, "Crypto") == set()


def test_the_command_table_says_what_each_command_says() -> None:
    """`pianode --help` lists the table's help lines without importing the commands: they must be the commands' own."""
    own: dict[str, str | None] = {}
    for name, module_name, _help in COMMANDS:
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        importlib.import_module(module_name).add_parser(sub)
        own[name] = next(a.help for a in sub._choices_actions if a.dest == name)
    assert own == {name: help_line for name, _m, help_line in COMMANDS}


@pytest.mark.parametrize("argv", [["--help"], ["-v", "decode", "x"], ["mesh", "-n", "3"], ["nonsense"]])
def test_the_lazy_parser_knows_every_command(argv: list[str]) -> None:
    """Built for one command line, the parser still lists every command, and the full parser the same ones."""
    names = [a.dest for a in build_parser(argv)._subparsers._group_actions[0]._choices_actions]  # type: ignore[union-attr]
    assert names == [a.dest for a in build_parser()._subparsers._group_actions[0]._choices_actions]  # type: ignore[union-attr]
    assert names == [name for name, _m, _h in COMMANDS]
