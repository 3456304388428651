"""pianode relay and --relay on the real program: CA tooling, one-line errors, a refused site, a node through a hub."""

from __future__ import annotations

import os
import pathlib
import shutil
import subprocess
import sys

import pytest
import trio
from cli_processes import CliProcess, until
from loopback_addresses import free_port, loopback_block
from relay_pki import Pki, make_pki

PIANODE = [sys.executable, "-m", "pianode"]


def run(*argv: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*PIANODE, *argv], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


def test_ca_init_and_issue_make_the_files_with_their_roles(tmp_path: pathlib.Path) -> None:
    done = run("relay", "ca", "init", str(tmp_path / "pki"))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in (tmp_path / "pki").iterdir()) == ["ca.key", "ca.pem"]
    assert run("relay", "ca", "issue", str(tmp_path / "pki"), "--server", "hub").returncode == 0
    done = run("relay", "ca", "issue", str(tmp_path / "pki"), "--client", "site-a")
    assert done.returncode == 0 and "client-only" in done.stdout
    assert (tmp_path / "pki" / "site-a.pem").exists() and (tmp_path / "pki" / "site-a.key").stat().st_mode & 0o077 == 0


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (("relay", "ca", "init", "{root}/ca"), "already holds a CA"),
        (("relay", "ca", "issue", "{root}/nowhere", "--client", "x"), "no CA there"),
        (("relay", "ca", "issue", "{root}/ca", "--client", "../x"), "--client ../x: certificate name"),
        (("relay", "ca", "issue", "{root}/ca", "--client", "site-a"),
         "--client site-a: {root}/ca/site-a.pem already issued: remove it first, or pick another name"),
        (("relay", "serve", "--listen", "127.0.0.1:9", "--ca", "{root}/ca/ca.pem", "--cert", "{root}/ca/site-a.pem",
          "--key", "{root}/ca/site-a.key"), "--cert {root}/ca/site-a.pem: server certificate wanted, got a client-only"),
        (("relay", "serve", "--listen", "127.0.0.1:9", "--ca", "{root}/ca/ca.pem", "--cert", "{root}/ca/hub.pem",
          "--key", "{root}/ca/site-a.key"), "--key: key {root}/ca/site-a.key does not belong"),
        (("node", "--create", "--relay", "127.0.0.1:7777"), "--relay needs --relay-ca, --relay-cert, --relay-key"),
        (("node", "--create", "--relay-ca", "x"), "need --relay HOST:PORT"),
        (("lan", "join", "--game-key", "ee182a63e216cdb1f51ad4bed8cf6508", "--relay", "127.0.0.1:7777", "--relay-ca",
          "{root}/ca/ca.pem", "--relay-cert", "{root}/ca/hub.pem", "--relay-key", "{root}/ca/hub.key"),
         "--relay-cert {root}/ca/hub.pem: client certificate wanted, got a server-only"),
        (("ldn", "scan", "--relay", "127.0.0.1:7777"), "--relay needs --relay-ca, --relay-cert, --relay-key"),
        (("ldn", "host", "--game-key", "ee182a63e216cdb1f51ad4bed8cf6508", "--address", "169.254.3.1", "--relay",
          "127.0.0.1:7777", "--relay-ca", "{root}/ca/ca.pem", "--relay-cert", "{root}/ca/site-a.pem", "--relay-key",
          "{root}/ca/site-a.key"), "--address is for a real link; through --relay the sockets use the site's virtual"),
        (("ldn", "join", "--game-key", "ee182a63e216cdb1f51ad4bed8cf6508", "--relay", "nowhere", "--relay-ca",
          "{root}/ca/ca.pem", "--relay-cert", "{root}/ca/site-a.pem", "--relay-key", "{root}/ca/site-a.key"), "--relay"),
        (("mesh", "--relay", "--relay-ca", "x"), "--relay without HOST:PORT starts a hub of the run's own"),
        (("mesh", "--relay", "127.0.0.1:7777"), "--relay needs --relay-ca, --relay-cert, --relay-key"),
        (("mesh", "--relay", "--processes", "2"), "--relay: the stations of a relayed run share one process"),
        (("mesh", "--relay", "--discovery", "on"), "--relay: a relayed run is formed by hand-off"),
        (("mesh", "--relay", "--loss", "0.1"), "--relay: fault injection applies to loopback links"),
        (("mesh", "--relay", "--relay-room", ""), "--relay-room '': room name must be 1..64 printable characters"),
        (("mesh", "--relay", "--relay-room", "two\nlines"), "--relay-room 'two\\nlines': room name must be 1..64"),
        (("mesh", "--relay", "--relay-room", " lan"), "--relay-room ' lan': room name must be 1..64 printable"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(pki: Pki, argv: tuple[str, ...], needle: str) -> None:
    done = run(*(a.format(root=pki.root) for a in argv))
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    assert needle.format(root=pki.root) in done.stderr


def _flags(pki: Pki, name: str, ca: str, hub: tuple[str, int]) -> list[str]:
    ca_pem, pem, key = pki.files(name, ca)
    return ["--relay", f"{hub[0]}:{hub[1]}", "--relay-ca", str(pki.root / "ca" / "ca.pem"), "--relay-cert", str(pem),
            "--relay-key", str(key)]


async def test_nodes_through_a_hub_and_a_hub_of_another_ca_refused_on_both_sides(pki: Pki) -> None:
    hub_addr = (loopback_block() + "1", free_port())
    rogue_addr = (hub_addr[0], free_port())
    ca, pem, key = pki.files("hub")
    rca, rpem, rkey = pki.files("rogue-hub", "other")
    rogue = CliProcess([*PIANODE, "relay", "serve", "--listen", f"{rogue_addr[0]}:{rogue_addr[1]}", "--ca", str(rca),
                        "--cert", str(rpem), "--key", str(rkey), "--report", "0"])  # fmt: skip
    hub = CliProcess([*PIANODE, "relay", "serve", "--listen", f"{hub_addr[0]}:{hub_addr[1]}", "--ca", str(ca),
                      "--cert", str(pem), "--key", str(key), "--report", "0"])  # fmt: skip
    key_hex = "00112233445566778899aabbccddeeff"
    create = CliProcess([*PIANODE, "node", "--create", "--session-key", key_hex, "--format", "jsonl", "--interval", "0.2",
                         "--duration", "30", *_flags(pki, "site-a", "ca", hub_addr)])  # fmt: skip
    join = CliProcess([*PIANODE, "node", "--join", "10.77.0.1:0", "--session-key", key_hex, "--format", "jsonl",
                       "--interval", "0.2", "--duration", "30", *_flags(pki, "site-b", "ca", hub_addr)])  # fmt: skip
    join.argv[join.argv.index("10.77.0.1:0")] = "10.77.0.1:49152"
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(hub.run)
            await until(lambda: bool(hub.lines))
            await nursery.start(create.run)
            await until(lambda: bool(create.lines) or create.returncode is not None)
            await nursery.start(join.run)
            await until(lambda: any(r["event"] == "data" for r in join.records()) or join.returncode is not None)
            await nursery.start(rogue.run)
            await until(lambda: bool(rogue.lines))
            stranger = await trio.run_process([*PIANODE, "node", "--create", *_flags(pki, "site-c", "ca", rogue_addr)],
                                              capture_stdout=True, capture_stderr=True, check=False)  # fmt: skip
            await until(lambda: any("refused" in line for line in rogue.lines))
            rogue.stop()
            join.stop()
            create.stop()
            await until(lambda: join.returncode is not None and create.returncode is not None)
            hub.stop()
    assert create.records()[0]["address"] == "10.77.0.1:49152"
    assert "--join 10.77.0.1:49152" in create.records()[0]["join_with"] and "--relay " in create.records()[0]["join_with"]
    assert join.returncode == 0, join.stderr.decode()
    joined = [r for r in join.records() if r["event"] == "joined"][0]
    assert joined["address"].startswith("10.77.0.2:")
    assert stranger.returncode == 1
    err = stranger.stderr.decode()
    assert err.splitlines() == [
        f"pianode node: relay {rogue_addr[0]}:{rogue_addr[1]}: refused the hub: server certificate is not issued by this relay's CA"
    ], err
    refusal = [line for line in rogue.lines if "refused" in line]
    assert len(refusal) == 1 and refusal[0].endswith(
        "refused by the site: server certificate is not issued by this relay's CA"), rogue.lines
    assert not any("joined" in line for line in rogue.lines)


def _hub(pki: Pki, addr: tuple[str, int]) -> CliProcess:
    ca, pem, key = pki.files("hub")
    return CliProcess([*PIANODE, "relay", "serve", "--listen", f"{addr[0]}:{addr[1]}", "--ca", str(ca), "--cert",
                       str(pem), "--key", str(key), "--report", "0"])  # fmt: skip


async def test_an_ldn_host_and_an_ldn_join_form_a_network_through_the_relay(pki: Pki) -> None:
    """Each process a site of one room: the advertisement reaches the scanner through the hub, the
    joiner gets an LDN address from the host and both exchange reliable messages in one mesh."""
    hub_addr = (loopback_block() + "1", free_port())
    hub = _hub(pki, hub_addr)
    game = ["--game-key", "667c18475889faab61f93ef1da180971", "--version", "5.29", "--format", "jsonl"]
    discovery = ["--discovery-port", str(free_port())]  # a port no other test's LDN network advertises on
    exchange = ["--stations", "2", "--messages", "5", "--duration", "30"]
    host = CliProcess([*PIANODE, "ldn", "host", *game, *discovery, *exchange, *_flags(pki, "site-a", "ca", hub_addr)])
    scan = [*PIANODE, "ldn", "scan", *game, *discovery, "--timeout", "3", *_flags(pki, "site-c", "ca", hub_addr)]
    join = CliProcess([*PIANODE, "ldn", "join", *game, *discovery, *exchange, "--timeout", "5",
                       *_flags(pki, "site-b", "ca", hub_addr)])  # fmt: skip
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(hub.run)
            await until(lambda: bool(hub.lines))
            await nursery.start(host.run)
            await until(lambda: bool(host.lines) or host.returncode is not None)
            scanned = await trio.run_process(scan, capture_stdout=True, capture_stderr=True, check=False)
            await nursery.start(join.run)
            await until(lambda: host.returncode is not None and join.returncode is not None)
            hub.stop()
    assert host.returncode == 0 and join.returncode == 0, (host.stderr.decode(), join.stderr.decode())
    network = host.records()[0]
    assert network["event"] == "network" and network["host"].startswith("169.254.")  # the LDN network's own address
    assert network["socket"] == "10.77.0.1"  # its sockets: the site's virtual address
    found = [__import__("json").loads(line) for line in scanned.stdout.decode().splitlines()]
    assert scanned.returncode == 0 and found[0]["ssid"] == network["ssid"] and found[0]["socket"] == "10.77.0.1", found
    joined = next(r for r in join.records() if r["event"] == "joined")
    assert joined["host"] == network["host"] and joined["ip"].startswith(network["host"].rsplit(".", 1)[0] + ".")
    assert joined["socket"].startswith("10.77.0.") and joined["socket"] != "10.77.0.1"
    summaries = [p.records()[-1] for p in (host, join)]
    assert [s["ok"] for s in summaries] == [True, True] and all(s["received"] for s in summaries), summaries
    assert summaries[0]["received"] == {"1": 5} and summaries[1]["received"] == {"0": 5}


async def test_mesh_through_a_running_hub_and_through_its_own(pki: Pki) -> None:
    hub_addr = (loopback_block() + "1", free_port())
    hub = _hub(pki, hub_addr)
    with trio.fail_after(90):
        async with trio.open_nursery() as nursery:
            await nursery.start(hub.run)
            await until(lambda: bool(hub.lines))
            given = await trio.run_process(
                [*PIANODE, "mesh", "-n", "4", "--duration", "1", "--messages", "5", "--format", "jsonl",
                 "--relay-room", "mesh-test", *_flags(pki, "site-a", "ca", hub_addr)],
                capture_stdout=True, capture_stderr=True, check=False)  # fmt: skip
            hub.stop()
        own = await trio.run_process([*PIANODE, "mesh", "--relay", "-n", "3", "--rate", "60", "--duration", "1",
                                      "--format", "jsonl"], capture_stdout=True, capture_stderr=True, check=False)  # fmt: skip
    import json

    for done in (given, own):
        assert done.returncode == 0, done.stderr.decode()
    summary = json.loads(given.stdout.decode())
    assert summary["ok"] and summary["reliable"]["delivered"] == 4 * 3 * 5
    assert sorted(r["address"].split(":")[0] for r in summary["stations"]) == ["10.77.0.1", "10.77.0.2", "10.77.0.3",
                                                                               "10.77.0.4"]  # fmt: skip
    room = [line for line in hub.lines if line.startswith("room mesh-test")]
    assert room and "4 join(s)" in room[-1] and " relayed 0 datagram" not in room[-1], hub.lines
    summary = json.loads(own.stdout.decode())
    assert summary["ok"] and summary["frames"]["delivered"] == summary["frames"]["expected"] > 0
    assert summary["formation"].endswith("through a relay hub")


async def test_mesh_and_node_through_a_hub_connect_from_the_bind_address(pki: Pki) -> None:
    """--bind IP through a relay: each station's connection to the hub goes out from that address (the
    stations of a mesh from IP, IP+1, ...), as their sockets do without a relay; the port stays the
    stations' port on their virtual addresses."""
    import json

    block = loopback_block()
    hub_addr = (block + "1", free_port())
    hub = _hub(pki, hub_addr)
    with trio.fail_after(90):
        async with trio.open_nursery() as nursery:
            await nursery.start(hub.run)
            await until(lambda: bool(hub.lines))
            meshed = await trio.run_process(
                [*PIANODE, "mesh", "-n", "2", "--duration", "0.2", "--messages", "2", "--format", "jsonl",
                 "--bind", f"{block}20:40123", *_flags(pki, "site-a", "ca", hub_addr)],
                capture_stdout=True, capture_stderr=True, check=False)  # fmt: skip
            noded = await trio.run_process(
                [*PIANODE, "node", "--create", "--duration", "0.1", "--bind", f"{block}30",
                 *_flags(pki, "site-b", "ca", hub_addr)], capture_stdout=True, capture_stderr=True, check=False)  # fmt: skip
            await until(lambda: sum("left:" in line for line in hub.lines) >= 3)
            hub.stop()
    assert meshed.returncode == 0 and noded.returncode == 0, (meshed.stderr.decode(), noded.stderr.decode())
    summary = json.loads(meshed.stdout.decode())
    assert sorted(r["address"] for r in summary["stations"]) == ["10.77.0.1:40123", "10.77.0.2:40123"]
    joined = [line for line in hub.lines if "joined:" in line]
    sources = sorted(line.split(" from ")[1].split(":")[0] for line in joined)
    assert sources == [f"{block}20", f"{block}21", f"{block}30"], hub.lines


@pytest.mark.parametrize(
    "command",
    [["mesh"], ["node", "--create"], ["lan", "browse", "--game-key", "ee182a63e216cdb1f51ad4bed8cf6508"],
     ["lan", "join", "--game-key", "ee182a63e216cdb1f51ad4bed8cf6508"],
     ["lan", "host", "--game-key", "ee182a63e216cdb1f51ad4bed8cf6508"]],
    ids=lambda argv: " ".join(argv[:2]),
)
def test_a_loopback_bind_cannot_reach_a_hub_elsewhere(pki: Pki, command: list[str]) -> None:
    done = run(*command, "--bind", "127.0.0.5", *_flags(pki, "site-a", "ca", ("192.0.2.1", 7777)))
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [
        f"pianode {' '.join(command[:2 if command[0] == 'lan' else 1])}: --bind 127.0.0.5: a loopback address cannot "
        "reach the relay at 192.0.2.1:7777"
    ], done.stderr


def test_a_listen_port_in_use_is_refused_with_advice_the_command_takes(pki: Pki) -> None:
    """It advised '0 for any free one', which --listen refuses ('port must be 1..65535')."""
    import socket

    ip = loopback_block() + "1"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as held:
        held.bind((ip, 0))
        port = held.getsockname()[1]
        ca, pem, key = pki.files("hub")
        done = run("relay", "serve", "--listen", f"{ip}:{port}", "--ca", str(ca), "--cert", str(pem), "--key", str(key))
    assert done.returncode == 2 and len(done.stderr.splitlines()) == 1, done.stderr
    assert "already in use" in done.stderr
    if "or 0 for" in done.stderr:
        zero = run("relay", "serve", "--listen", f"{ip}:0", "--ca", str(ca), "--cert", str(pem), "--key", str(key),
                   "--duration", "0.1")
        assert zero.returncode == 0, zero.stderr


@pytest.mark.parametrize("which", ["--ca", "--cert", "--key"])
@pytest.mark.parametrize("kind", ["fifo", "large"])
def test_a_certificate_file_that_is_no_file_of_ours_is_one_line_and_exit_2(
    pki: Pki, tmp_path: pathlib.Path, which: str, kind: str
) -> None:
    """A FIFO given as --ca, --cert or --key waited for a writer for good, a device such as /dev/zero
    was read until memory ran out ('internal error: MemoryError'), and a file of gigabytes was read whole."""
    wrong = tmp_path / kind
    if kind == "fifo":
        os.mkfifo(wrong)
    else:
        wrong.write_bytes(b"-----BEGIN CERTIFICATE-----\n" + b"A" * (2 * 1024 * 1024))
    files = dict(zip(("--ca", "--cert", "--key"), pki.files("hub")))
    files[which] = wrong
    done = run("relay", "serve", "--listen", f"127.0.0.1:{free_port()}", *(str(x) for kv in files.items() for x in kv),
               timeout=20)  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    why = "not a regular file" if kind == "fifo" else "larger than"
    assert f"{which}: " in done.stderr and str(wrong) in done.stderr and why in done.stderr, done.stderr


def _bounded_run(*argv: str) -> subprocess.CompletedProcess[str]:
    """Run pianode with at most 20 s and 2 GiB of address space: a command reading a FIFO or a device
    whole fails the test instead of hanging it or exhausting the machine's memory."""
    import resource

    def limit_memory() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (2 * 1024**3, 2 * 1024**3))

    return subprocess.run([*PIANODE, *argv], capture_output=True, text=True, timeout=20, preexec_fn=limit_memory)


def _assert_refused_naming(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stdout == "", done.stdout
    for needle in needles:
        assert needle in done.stderr, done.stderr


@pytest.mark.parametrize(("which", "label"), [("ca.pem", "CA certificate"), ("ca.key", "CA key")])
@pytest.mark.parametrize("kind", ["fifo", "device", "directory", "garbage", "empty", "large"])
def test_a_ca_file_that_is_no_file_of_ours_is_named_one_line_and_exit_2(
    tmp_path: pathlib.Path, which: str, label: str, kind: str
) -> None:
    """`ca issue` read DIR/ca.pem and DIR/ca.key whole: a FIFO waited for a writer for good, a symlink
    to /dev/zero was read until memory ran out, and a bad file was blamed on '--client site-a'."""
    from pianode.relay.certificates import init_ca

    d = tmp_path / "pki"
    init_ca(d)
    wrong = d / which
    wrong.unlink()
    not_pem = "not a PEM certificate" if which == "ca.pem" else "not an unencrypted PEM private key"
    why = {"fifo": "not a regular file", "device": "not a regular file", "directory": "Is a directory",
           "garbage": not_pem, "empty": not_pem, "large": "larger than"}[kind]  # fmt: skip
    if kind == "fifo":
        os.mkfifo(wrong)
    elif kind == "device":
        wrong.symlink_to("/dev/zero")
    elif kind == "directory":
        wrong.mkdir()
    elif kind == "garbage":
        wrong.write_bytes(b"no PEM here\n")
    elif kind == "empty":
        wrong.write_bytes(b"")
    else:
        wrong.write_bytes(b"-----BEGIN CERTIFICATE-----\n" + b"A" * (2 * 1024 * 1024))
    done = _bounded_run("relay", "ca", "issue", str(d), "--client", "site-a")
    _assert_refused_naming(done, f"{label} {wrong}: {why}")
    assert "--client" not in done.stderr, done.stderr
    assert not (d / "site-a.pem").exists() and not (d / "site-a.key").exists()


@pytest.mark.parametrize("case", ["a ca.key of another certificate", "a ca.pem that is not a CA"])
def test_a_ca_that_cannot_issue_is_refused(pki: Pki, tmp_path: pathlib.Path, case: str) -> None:
    """With the hub's key as ca.key, `ca issue` said 'issued a client-only certificate' (exit 0) and the
    certificate did not verify under the CA; with the hub's server certificate and key as ca.pem and ca.key,
    it issued a certificate under one whose basic constraints say CA:FALSE (exit 0)."""
    d = tmp_path / "pki"
    d.mkdir()
    ca_pem, hub_pem, hub_key = pki.files("hub")
    shutil.copy(ca_pem if case == "a ca.key of another certificate" else hub_pem, d / "ca.pem")
    shutil.copy(hub_key, d / "ca.key")
    done = _bounded_run("relay", "ca", "issue", str(d), "--client", "site-a")
    if case == "a ca.key of another certificate":
        _assert_refused_naming(done, f"CA key {d / 'ca.key'}", f"does not belong to CA certificate {d / 'ca.pem'}")
    else:
        _assert_refused_naming(done, f"CA certificate {d / 'ca.pem'}: not a CA certificate")
    assert sorted(p.name for p in d.iterdir()) == ["ca.key", "ca.pem"]


@pytest.mark.parametrize(("present", "absent"), [("ca.pem", "ca.key"), ("ca.key", "ca.pem")])
def test_ca_init_beside_half_a_ca_names_the_file_there(tmp_path: pathlib.Path, present: str, absent: str) -> None:
    """With only ca.pem in DIR, `ca init` said DIR 'already holds a CA (ca.pem/ca.key)'."""
    d = tmp_path / "pki"
    d.mkdir()
    (d / present).write_bytes(b"kept\n")
    done = run("relay", "ca", "init", str(d))
    _assert_refused_naming(done, f"{d} already holds {present} (no {absent} beside it)")
    assert (d / present).read_bytes() == b"kept\n" and not (d / absent).exists()


@pytest.mark.parametrize(("present", "absent"), [("ca.pem", "ca.key"), ("ca.key", "ca.pem")])
def test_ca_issue_beside_half_a_ca_does_not_advise_ca_init_alone(tmp_path: pathlib.Path, present: str, absent: str) -> None:
    """With only one CA file in DIR, `ca issue` advised `ca init DIR`, which refuses while that file is there."""
    d = tmp_path / "pki"
    d.mkdir()
    (d / present).write_bytes(b"kept\n")
    done = run("relay", "ca", "issue", str(d), "--client", "site-a")
    _assert_refused_naming(done, f"{d / absent} missing beside {present}: put it back, or remove {present}")
    assert (d / present).read_bytes() == b"kept\n" and not (d / absent).exists()
