"""Interop with nintendoclients 5.0.0 (PyPI, MIT): our PRUDP against its client and its server, on loopback.

A session fixture builds a Python 3.12 virtual environment with the library in
pytest's cache directory (reused by later runs).  Its peer script is
scripts/interop/prudp_nc_peer.py.  Both directions, v0 with the library's 3DS
settings and v1 with its default (Wii U) settings, with and without zlib, with
messages from 1 byte to 64 KiB that span many fragments.
"""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest
from peers import peer_unavailable
import trio

from pianode.prudp import Settings
from pianode.prudp.endpoint import PrudpEndpoint
from protocols.prudp import Variant, variant_for
from protocols.prudp.variants import nintendo_v0

from prudp_echo import serve_echo

pytestmark = pytest.mark.interop

ROOT = pathlib.Path(__file__).resolve().parents[2]
PEER = ROOT / "scripts" / "interop" / "prudp_nc_peer.py"
PY312 = ["/root/.pyenv/versions/3.12.1/bin/python3", "python3.12", "python3.13"]
KEY = "6f599f81"
SIZES = [1, 2, 100, 961, 962, 963, 1299, 1300, 1301, 4096, 20000, 65535, 65536]
MODES = [("v0", "nintendo-v0"), ("v1", "nintendo-v1")]
EXTRA_MODES = [
    ("friends", variant_for("nintendo-v0-friends")),
    ("v0-alt", nintendo_v0(checksum_version=0, flags_version=0)),
]


@pytest.fixture(scope="session")
def nc_python(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    def usable(exe: str | None) -> bool:
        check = [str(exe), "-c", "import sys; assert sys.version_info >= (3, 12)"]
        return exe is not None and subprocess.run(check, capture_output=True).returncode == 0

    base = next(
        (exe for c in PY312 if usable(exe := shutil.which(c) or (c if pathlib.Path(c).exists() else None))), None
    )
    if base is None:
        peer_unavailable("INTEROP NOT RUN: no Python 3.12 found for nintendoclients (needs >= 3.12)")
    cache = getattr(request.config, "cache", None)  # absent under -p no:cacheprovider
    home = cache.mkdir("nintendoclients-5.0.0") if cache is not None else tmp_path_factory.mktemp("nintendoclients")
    venv = pathlib.Path(home) / "venv"
    py = venv / "bin" / "python"
    probe = [str(py), "-c", "import importlib.metadata as m; assert m.version('nintendoclients') == '5.0.0'"]
    if not py.exists() or subprocess.run(probe, capture_output=True).returncode != 0:
        steps = [
            [base, "-m", "venv", "--clear", str(venv)],
            [str(py), "-m", "pip", "install", "-q", "nintendoclients==5.0.0"],
        ]
        for step in steps:
            done = subprocess.run(step, capture_output=True, text=True, timeout=600)
            if done.returncode != 0:
                peer_unavailable(f"INTEROP NOT RUN: cannot install nintendoclients 5.0.0: {done.stderr.strip()[-500:]}")
    return str(py)


def _flags(compression: bool) -> list[str]:
    return ["--compression"] if compression else []


@pytest.mark.parametrize("compression", [False, True], ids=["plain", "zlib"])
@pytest.mark.parametrize(("mode", "variant"), MODES)
async def test_their_client_against_our_host(
    nc_python: str, mode: str, variant: str, compression: bool, nursery: trio.Nursery
) -> None:
    await _their_client_against_our_host(
        nc_python,
        mode,
        Settings(variant, access_key=KEY, compression=compression or None),
        _flags(compression),
        nursery,
    )


async def test_their_client_against_our_host_with_aggregate_acks_and_pings(
    nc_python: str, nursery: trio.Nursery
) -> None:
    """v1 aggregate acks (spec §6.4, new format) instead of per-packet acks; an idle spell with pings both ways
    (ours every 0.5 s, unreliable; theirs every 2 s, reliable)."""
    settings = Settings("nintendo-v1", access_key=KEY, aggregate_ack=True, ping_interval=0.5)
    host = await _their_client_against_our_host(nc_python, "v1", settings, ["--ping", "2", "--idle", "2.5"], nursery)
    stats = host.statistics()
    assert stats["aggregate_acks_sent"] > 0
    assert stats["pings_sent"] >= 2  # theirs answered ours, or two misses would have ended the connection
    assert stats["pings_received"] >= 1  # their reliable pings took their slots in our window


async def _their_client_against_our_host(
    nc_python: str, mode: str, settings: Settings, extra: list[str], nursery: trio.Nursery
) -> PrudpEndpoint:
    host = PrudpEndpoint(settings)
    _, port = await nursery.start(host.run, ("127.0.0.1", 0))
    host.listen()
    nursery.start_soon(serve_echo, host, nursery)
    argv = [nc_python, str(PEER), "client", "--mode", mode, "--port", str(port), "--access-key", KEY]
    argv += ["--sizes", ",".join(map(str, SIZES)), *extra]
    with trio.fail_after(120):
        done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
    out = done.stdout.decode()
    assert done.returncode == 0, out + done.stderr.decode()
    assert out.split("\n")[: len(SIZES)] == [f"ok {n}" for n in SIZES]
    assert host.statistics().get("dropped_bad_signature", 0) == 0
    return host


async def _read_port(proc: trio.Process) -> int:
    assert proc.stdout is not None
    buf = b""
    while b"\n" not in buf:
        chunk = await proc.stdout.receive_some()
        if not chunk:
            raise AssertionError(f"nintendoclients server exited: {buf!r}")
        buf += chunk
    first = buf.split(b"\n")[0].decode()
    assert first.startswith("listening "), first
    return int(first.split()[1])


@pytest.mark.parametrize("compression", [False, True], ids=["plain", "zlib"])
@pytest.mark.parametrize(("mode", "variant"), MODES)
async def test_our_client_against_their_server(
    nc_python: str, mode: str, variant: str, compression: bool, nursery: trio.Nursery
) -> None:
    settings = Settings(variant, access_key=KEY, compression=compression or None)
    await _our_client_against_their_server(nc_python, mode, settings, _flags(compression), nursery)


async def test_our_client_against_their_server_with_aggregate_acks_and_pings(
    nc_python: str, nursery: trio.Nursery
) -> None:
    settings = Settings("nintendo-v1", access_key=KEY, aggregate_ack=True, ping_interval=0.5)
    client = await _our_client_against_their_server(nc_python, "v1", settings, ["--ping", "2"], nursery, idle=2.5)
    stats = client.statistics()
    assert stats["aggregate_acks_sent"] > 0
    assert stats["pings_sent"] >= 2
    assert stats["pings_received"] >= 1


async def _our_client_against_their_server(
    nc_python: str, mode: str, settings: Settings, extra: list[str], nursery: trio.Nursery, idle: float = 0.0
) -> PrudpEndpoint:
    argv = [nc_python, str(PEER), "server", "--mode", mode, "--access-key", KEY, *extra]
    proc = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        with trio.fail_after(120):
            port = await _read_port(proc)
            client = PrudpEndpoint(settings)
            await nursery.start(client.run, ("127.0.0.1", 0))
            conn = await client.connect(("127.0.0.1", port))
            await trio.sleep(idle)  # keep-alive pings run both ways meanwhile
            for n in SIZES:
                message = bytes((i * 29 + n) & 0xFF for i in range(n))
                await conn.send(message)
                assert await conn.receive() == message, n
            await conn.close()
        assert conn.closed_reason == "closed"
        assert client.statistics().get("dropped_bad_signature", 0) == 0
        return client
    finally:
        proc.kill()
        await proc.wait()
        assert proc.stdout is not None
        await proc.stdout.aclose()


@pytest.mark.parametrize(("mode", "variant"), EXTRA_MODES, ids=[m for m, _ in EXTRA_MODES])
async def test_other_v0_settings_both_ways(nc_python: str, mode: str, variant: Variant, nursery: trio.Nursery) -> None:
    """Friends (signature version 1) and the 1-byte-flags/4-byte-checksum v0, in both directions."""
    settings = Settings(variant, access_key=KEY)
    await _their_client_against_our_host(nc_python, mode, settings, [], nursery)
    await _our_client_against_their_server(nc_python, mode, settings, [], nursery)


async def test_our_connect_cli_says_what_is_missing_when_their_server_answers_no_echo(nc_python: str) -> None:
    """An empty message: their echo sends it back as nothing (their send() loops ``while data``), so no
    echo comes.  The connection went through, so the command must not ask whether the variant or the
    access key is the server's (it did before: the question for a server that never answered)."""
    argv = [nc_python, str(PEER), "server", "--mode", "v1", "--access-key", KEY]
    proc = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        with trio.fail_after(60):
            port = await _read_port(proc)
            cli = [sys.executable, "-m", "pianode", "prudp", "connect", f"127.0.0.1:{port}", "--variant", "nintendo-v1",
                   "--access-key", KEY, "--count", "2", "--size", "0", "--timeout", "3"]  # fmt: skip
            done = await trio.run_process(cli, capture_stdout=True, capture_stderr=True, check=False)
    finally:
        proc.kill()
        await proc.wait()
        assert proc.stdout is not None
        await proc.stdout.aclose()
    assert done.returncode == 1, done.stderr
    assert done.stdout.decode().startswith(f"connected to 127.0.0.1:{port} in "), done.stdout
    assert done.stderr.decode().splitlines() == [
        f"pianode prudp connect: connected to 127.0.0.1:{port}, but message 0 (0 bytes) got no echo within --timeout 3 s:"
        " does the server echo it, and sign data as --variant nintendo-v1 does? (variants that differ only in data"
        " connect alike)"
    ]


#: Messages on two substreams take turns (message k on substream k mod 2), many fragments each.
SUBSTREAM_SIZES = [1, 1299, 1300, 1301, 20000, 3]
#: Unreliable messages are never split: up to one fragment of their v1 settings (1300 bytes).
UNRELIABLE_SIZES = [0, 1, 15, 16, 17, 1000, 1300]


@pytest.mark.parametrize("compression", [False, True], ids=["plain", "zlib"])
async def test_their_client_on_two_substreams_and_unreliable_against_our_host(
    nc_python: str, compression: bool, nursery: trio.Nursery
) -> None:
    """v1 with two reliable substreams (max_substream_id 1): each message comes back on its substream, where
    their client waits for it (recv(substream)); then unreliable DATA, echoed unreliably (recv_unreliable()).
    Before, our echo answered everything reliably on substream 0 and their client waited for ever.  With zlib
    each side must read the other's payload (an echo of RC4 garbage under the wrong key reads back right):
    substream 1 starts from the default key itself, as theirs does (it keyed it "CD&ML" derived before)."""
    settings = Settings("nintendo-v1", access_key=KEY, max_substream=1, compression=compression or None)
    host = PrudpEndpoint(settings)
    _, port = await nursery.start(host.run, ("127.0.0.1", 0))
    host.listen()
    nursery.start_soon(serve_echo, host, nursery)
    for sizes, extra in ((SUBSTREAM_SIZES, ["--substreams", "2"]), (UNRELIABLE_SIZES, ["--unreliable"])):
        argv = [nc_python, str(PEER), "client", "--mode", "v1", "--port", str(port), "--access-key", KEY,
                "--sizes", ",".join(map(str, sizes)), "--duration", "30", *extra, *_flags(compression)]  # fmt: skip
        with trio.fail_after(40):
            done = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False)
        out = done.stdout.decode()
        assert done.returncode == 0, out + done.stderr.decode()
        assert out.split("\n")[: len(sizes)] == [f"ok {n}" for n in sizes], out
    stats = host.statistics()
    assert stats.get("dropped_bad_signature", 0) == 0 and stats.get("dropped_bad_payload", 0) == 0, stats


@pytest.mark.parametrize("compression", [False, True], ids=["plain", "zlib"])
async def test_our_client_on_two_substreams_and_unreliable_against_their_server(
    nc_python: str, compression: bool, nursery: trio.Nursery
) -> None:
    """The other way: our client on substreams 0 and 1 and unreliably; their server echoes each in kind."""
    argv = [nc_python, str(PEER), "server", "--mode", "v1", "--access-key", KEY, "--substreams", "2",
            *_flags(compression)]  # fmt: skip
    proc = await trio.lowlevel.open_process(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        with trio.fail_after(60):
            port = await _read_port(proc)
            client = PrudpEndpoint(Settings("nintendo-v1", access_key=KEY, max_substream=1,
                                            compression=compression or None))  # fmt: skip
            await nursery.start(client.run, ("127.0.0.1", 0))
            conn = await client.connect(("127.0.0.1", port))
            got, sent = [], []
            for k, n in enumerate(SUBSTREAM_SIZES):
                message = bytes((i * 31 + n) & 0xFF for i in range(n))
                await conn.send(message, k % 2)
                sent.append((message, k % 2, True))
                m = await conn.receive_message()
                got.append((m.data, m.substream, m.reliable))
            for n in UNRELIABLE_SIZES:
                message = bytes((i * 7 + n) & 0xFF for i in range(n))
                await conn.send_unreliable(message)
                sent.append((message, 0, False))
                m = await conn.receive_message()
                got.append((m.data, m.substream, m.reliable))
            await conn.close()
    finally:
        proc.kill()
        await proc.wait()
        assert proc.stdout is not None
        await proc.stdout.aclose()
    assert got == sent
    assert conn.closed_reason == "closed"
    stats = client.statistics()
    assert stats.get("dropped_bad_signature", 0) == 0 and stats.get("dropped_bad_payload", 0) == 0, stats
