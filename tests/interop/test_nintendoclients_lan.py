"""Interop with nintendoclients 0.0.3 (PyPI, MIT): its LAN browser finds our host, ours finds its host.

The library runs in its own virtualenv (created once, cached under
``$PIANODE_INTEROP_CACHE`` or ``~/.cache/pianode-interop``) through
``scripts/interop/nc_lan.py``, which pins all its traffic to 127.0.0.0/8.  Its
host binds the fixed browse port 30000 and its browser sends to it, so these
tests run serially, each with its own loopback addresses.

For every version the session must be found, its fields must be equal on both
sides, and (5.9+) the crypto challenge must verify.  The library gates the
challenge on 5.9 (not 5.7, spec §10.3) and reads a 6-byte host address in 5.10
(spec §10.4); our 5.10 host is configured with that form for it.
"""

from __future__ import annotations

import json
import os
import pathlib
import select
import subprocess
import sys
from typing import Any

import attrs
import pytest
from loopback_addresses import free_port
from peers import peer_unavailable
import trio

from pianode.lan.discovery import DEFAULT_BROADCAST, BrowseClient, LanHost, browse, make_session_info
from protocols.pia.lan import LanSessionInfo, lan_session_key
from protocols.pia.versions import profile_for

pytestmark = pytest.mark.interop

#: The browse port of this run: not 30000, so two suite runs on one machine never hear each other.
BROWSE_PORT = free_port()
REPO = pathlib.Path(__file__).resolve().parents[2]
HARNESS = REPO / "scripts" / "interop" / "nc_lan.py"
CACHE = pathlib.Path(os.environ.get("PIANODE_INTEROP_CACHE", pathlib.Path.home() / ".cache" / "pianode-interop"))
GAME_KEY = bytes.fromhex("667c18475889faab61f93ef1da180971")  # Super Mario Maker 2 (spec §3.6)
VERSIONS = ["5.3", "5.9", "5.10", "5.11", "5.18", "5.29"]


@pytest.fixture(scope="session")
def nc_python() -> pathlib.Path:
    """A virtualenv with nintendoclients==0.0.3; created on first use."""
    venv = CACHE / "nc003"
    py = venv / "bin" / "python"
    check = [str(py), "-c", "import importlib.metadata as m, nintendo.pia.lan; print(m.version('nintendoclients'))"]
    ok = py.exists() and subprocess.run(check, capture_output=True, text=True, timeout=60).stdout.strip() == "0.0.3"
    if not ok:
        CACHE.mkdir(parents=True, exist_ok=True)
        steps = [
            [sys.executable, "-m", "venv", "--clear", str(venv)],
            [str(py), "-m", "pip", "install", "--quiet", "nintendoclients==0.0.3"],
        ]
        for cmd in steps:
            res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
            if res.returncode != 0:
                peer_unavailable(
                    "INTEROP NOT RUN: could not install nintendoclients==0.0.3 from PyPI "
                    f"({' '.join(cmd[-2:])} exited {res.returncode}: {res.stderr.strip()[-300:]})"
                )
        got = subprocess.run(check, capture_output=True, text=True, timeout=60)
        assert got.stdout.strip() == "0.0.3", got.stderr
    return py


def our_fields(info: LanSessionInfo, version: tuple[int, int]) -> dict[str, Any]:
    """Our LanSessionInfo in the normalized form the harness prints for the library's."""
    return {
        "game_mode": info.game_mode,
        "network_id": info.network_id,
        "attributes": list(info.attributes),
        "current_participants": info.current_participants,
        "min_participants": info.min_participants,
        "max_participants": info.max_participants,
        "system_communication_version": info.system_communication_version,
        "application_communication_version": info.application_communication_version,
        "session_type": info.session_type,
        "application_data": info.application_data.hex(),
        "is_opened": info.is_opened,
        "host_ip": info.host_ip,
        "host_port": info.host_port,
        "host_constant_id": info.host_constant_id,
        "host_variable_id": info.host_variable_id,
        "host_service_variable_id": info.host_service_variable_id,
        "stations": [
            {"role": s.role, "username": s.username, "constant_id": s.constant_id} for s in info.stations if s.role != 0
        ],
        "session_key_param": info.session_key_param.hex()
        if info.session_key_param is not None and version >= (5, 9)
        else None,
    }


def _addresses(version: str, base: int) -> tuple[str, str]:
    i = VERSIONS.index(version)
    return f"127.0.0.{base + 2 * i}", f"127.0.0.{base + 2 * i + 1}"


def _read_json_line(proc: subprocess.Popen[str], timeout: float) -> dict[str, Any]:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    if not ready:
        proc.kill()
        raise AssertionError(f"harness printed nothing in {timeout} s; stderr: {proc.communicate()[1][-2000:]}")
    line = proc.stdout.readline()
    if not line:
        raise AssertionError(f"harness exited {proc.wait()}; stderr: {proc.communicate()[1][-2000:]}")
    return json.loads(line)  # type: ignore[no-any-return]


@pytest.mark.parametrize("version", VERSIONS)
def test_our_browser_finds_nintendoclients_host(nc_python: pathlib.Path, version: str) -> None:
    prof = profile_for(version)
    host_ip, browser_ip = _addresses(version, 60)
    network_id = 0x5A000000 + VERSIONS.index(version)
    param = bytes(range(100, 132))
    cmd = [
        str(nc_python), str(HARNESS), "host", "--browse-port", str(BROWSE_PORT), "--version", version, "--game-key", GAME_KEY.hex(),
        "--address", host_ip, "--network-id", str(network_id), "--system-version", str(prof.lan_system_version),
        "--app-version", "3", "--app-data", b"interop".hex(), "--max", "8", "--name", "nc-host",
        "--session-param", param.hex(), "--duration", "30",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        theirs = _read_json_line(proc, 30)["session"]
        client = BrowseClient(prof, GAME_KEY, application_version=3)

        async def run() -> list[Any]:
            return await browse(prof, GAME_KEY, broadcast=(DEFAULT_BROADCAST, BROWSE_PORT), bind=(browser_ip, 0), timeout=1.5, client=client)

        found = [f for f in trio.run(run) if f.network_id == network_id]
    finally:
        proc.kill()
        proc.communicate()
    assert len(found) == 1, client.statistics()
    session = found[0]
    assert isinstance(session.info, LanSessionInfo)
    assert our_fields(session.info, prof.version) == theirs
    assert client.statistics().dropped.get("bad_challenge", 0) == 0
    if prof.version >= (5, 9):
        # The challenge reply verified (else the session would have been dropped) and proved a param.
        assert session.challenge_param is not None and len(session.challenge_param) == 32
        assert session.session_key == lan_session_key(GAME_KEY, param)
    else:
        assert session.challenge_param is None and session.session_key is None


async def _their_browse_while_hosting(host: LanHost, cmd: list[str]) -> subprocess.CompletedProcess[bytes]:
    """Run the harness browse *cmd* while *host* answers; its result once it exits (at most 60 s)."""
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            await nursery.start(host.run)
            result = await trio.run_process(cmd, capture_stdout=True, capture_stderr=True, check=False)
            nursery.cancel_scope.cancel()
    return result


@pytest.mark.parametrize("version", VERSIONS)
async def test_nintendoclients_browser_finds_our_host(nc_python: pathlib.Path, version: str) -> None:
    prof = profile_for(version)
    host_ip, browser_ip = _addresses(version, 100)
    info = make_session_info(
        prof, ip=host_ip, max_participants=8, name="pianode-host", game_mode=2, session_type=1,
        attributes=(9, 8, 7, 6, 5, 4), application_version=3, application_data=b"from pianode",
        host_address_size=6 if version == "5.10" else 18,
    )  # fmt: skip
    host = LanHost(prof, GAME_KEY, info, bind=("0.0.0.0", BROWSE_PORT))
    cmd = [
        str(nc_python), str(HARNESS), "browse", "--browse-port", str(BROWSE_PORT), "--version", version, "--game-key", GAME_KEY.hex(),
        "--address", browser_ip, "--app-version", "3", "--timeout", "1.5",
    ]  # fmt: skip
    result = await _their_browse_while_hosting(host, cmd)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    sessions = json.loads(result.stdout.decode().splitlines()[-1])["sessions"]
    theirs = [s for s in sessions if s["network_id"] == info.network_id]
    assert len(theirs) == 1, (sessions, result.stderr.decode()[-2000:])
    published = host.session
    assert isinstance(published, LanSessionInfo)
    assert theirs[0] == our_fields(published, prof.version)
    stats = host.statistics()
    assert stats.answered >= 1 and stats.dropped == {}, stats
    if prof.version >= (5, 9):
        # The library returns a session only when our challenge reply verified; the
        # param our host published came from that request (spec §6.4 step 3).
        assert published.session_key_param is not None


WRONG_KEY = bytes.fromhex("ee182a63e216cdb1f51ad4bed8cf6508")  # Splatoon 2: not the key the other side uses


def test_wrong_game_key_is_refused_by_our_browser(nc_python: pathlib.Path) -> None:
    """The challenge is really checked: a host on another game key is not reported."""
    prof = profile_for("5.18")
    host_ip, browser_ip = "127.0.0.90", "127.0.0.91"
    cmd = [
        str(nc_python), str(HARNESS), "host", "--browse-port", str(BROWSE_PORT), "--version", "5.18", "--game-key", WRONG_KEY.hex(),
        "--address", host_ip, "--network-id", "777", "--system-version", "7", "--duration", "30",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _read_json_line(proc, 30)
        client = BrowseClient(prof, GAME_KEY)

        async def run() -> list[Any]:
            return await browse(prof, GAME_KEY, broadcast=(DEFAULT_BROADCAST, BROWSE_PORT), bind=(browser_ip, 0), timeout=1.0, client=client)

        found = [f for f in trio.run(run) if f.network_id == 777]
    finally:
        proc.kill()
        proc.communicate()
    # Its host cannot open our challenge, so it stays silent; nothing unverified is reported.
    assert found == []


async def test_wrong_game_key_is_refused_by_nintendoclients_browser(nc_python: pathlib.Path) -> None:
    prof = profile_for("5.18")
    info = make_session_info(prof, ip="127.0.0.92", application_version=3)
    host = LanHost(prof, GAME_KEY, info, bind=("0.0.0.0", BROWSE_PORT))
    cmd = [
        str(nc_python), str(HARNESS), "browse", "--browse-port", str(BROWSE_PORT), "--version", "5.18", "--game-key", WRONG_KEY.hex(),
        "--address", "127.0.0.93", "--timeout", "1.0",
    ]  # fmt: skip
    result = await _their_browse_while_hosting(host, cmd)
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    sessions = json.loads(result.stdout.decode().splitlines()[-1])["sessions"]
    assert [s for s in sessions if s["network_id"] == info.network_id] == []
    assert host.statistics().dropped.get("bad_challenge", 0) >= 1


#: (criteria as the harness takes them, whether our host's session below matches them): each criterion
#: alone, on and off its value, range bounds inclusive, attribute lists (up to 20 values) and ranges.
CRITERIA: list[tuple[dict[str, Any], bool]] = [
    ({}, True),
    ({"game_mode": 2}, True), ({"game_mode": 3}, False),
    ({"session_type": 1}, True), ({"session_type": 0}, False),
    ({"min_participants": [2, 2]}, True), ({"min_participants": [3, 5]}, False),
    ({"max_participants": [1, 8]}, True), ({"max_participants": [2, 7]}, False),
    ({"attributes": {"0": [1, 9]}}, True), ({"attributes": {"0": [1, 2]}}, False),
    ({"attributes": {"2": [0] * 19 + [7]}}, True),
    ({"attributes": {"5": {"min": 4, "max": 4}}}, True), ({"attributes": {"5": {"min": 5, "max": 10}}}, False),
    ({"opened_only": True, "vacant_only": True}, True),
    ({"result_range": [0, 1]}, True),
    ({"game_mode": 2, "session_type": 1, "min_participants": [1, 2], "max_participants": [8, 9],
      "attributes": {"0": [9], "1": {"min": 0, "max": 8}, "3": [6]}}, True),
    ({"game_mode": 2, "session_type": 1, "attributes": {"0": [9], "4": [6]}}, False),
]  # fmt: skip


@pytest.mark.parametrize("state", ["open", "full", "closed"])
async def test_nintendoclients_browser_search_criteria_against_our_host(nc_python: pathlib.Path, state: str) -> None:
    """Their browser does not filter what it hears (its browse() keeps every verified reply): what it
    finds is what our host judged to match, by each criterion's flag, as the library's own check()."""
    prof = profile_for("5.18")
    host_ip, browser_ip = {"open": ("127.0.0.140", "127.0.0.141"), "full": ("127.0.0.142", "127.0.0.143"),
                           "closed": ("127.0.0.144", "127.0.0.145")}[state]  # fmt: skip
    info = make_session_info(
        prof, ip=host_ip, max_participants=8, min_participants=2, game_mode=2, session_type=1,
        attributes=(9, 8, 7, 6, 5, 4), application_version=3,
    )  # fmt: skip
    if state == "full":
        info = attrs.evolve(info, current_participants=8)
    elif state == "closed":
        info = attrs.evolve(info, is_opened=False)
    host = LanHost(prof, GAME_KEY, info, bind=("0.0.0.0", BROWSE_PORT))
    cases = CRITERIA if state == "open" else [({}, True), ({"vacant_only": True}, state != "full"),
                                              ({"opened_only": True}, state != "closed"),
                                              ({"opened_only": False, "vacant_only": False}, True)]  # fmt: skip
    found = {}
    with trio.fail_after(180):
        async with trio.open_nursery() as nursery:
            await nursery.start(host.run)
            for criteria, _ in cases:
                cmd = [
                    str(nc_python), str(HARNESS), "browse", "--browse-port", str(BROWSE_PORT), "--version", "5.18",
                    "--game-key", GAME_KEY.hex(), "--address", browser_ip, "--app-version", "3", "--timeout", "1",
                    "--criteria", json.dumps(criteria),
                ]  # fmt: skip
                result = await trio.run_process(cmd, capture_stdout=True, capture_stderr=True, check=False)
                assert result.returncode == 0, result.stderr.decode()[-2000:]
                sessions = json.loads(result.stdout.decode().splitlines()[-1])["sessions"]
                found[json.dumps(criteria)] = any(s["network_id"] == info.network_id for s in sessions)
            nursery.cancel_scope.cancel()
    assert found == {json.dumps(c): expected for c, expected in cases}
    stats = host.statistics()
    assert stats.answered == sum(expected for _, expected in cases), stats


async def test_nintendoclients_browser_finds_every_one_of_many_hosts(nc_python: pathlib.Path) -> None:
    """Six of our hosts share the browse port on one machine (SO_REUSEADDR/SO_REUSEPORT): each hears the
    broadcast request, and their browser gets every session, each with its own fields."""
    prof = profile_for("5.18")
    hosts = []
    for k in range(6):
        info = make_session_info(prof, ip=f"127.0.0.{150 + k}", max_participants=2 + k, game_mode=k,
                                 attributes=(k,) * 6, application_version=3, application_data=b"host %d" % k)  # fmt: skip
        hosts.append(LanHost(prof, GAME_KEY, info, bind=("0.0.0.0", BROWSE_PORT)))
    cmd = [
        str(nc_python), str(HARNESS), "browse", "--browse-port", str(BROWSE_PORT), "--version", "5.18",
        "--game-key", GAME_KEY.hex(), "--address", "127.0.0.160", "--app-version", "3", "--timeout", "1.5",
    ]  # fmt: skip
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for host in hosts:
                await nursery.start(host.run)
            result = await trio.run_process(cmd, capture_stdout=True, capture_stderr=True, check=False)
            nursery.cancel_scope.cancel()
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    sessions = json.loads(result.stdout.decode().splitlines()[-1])["sessions"]
    theirs = {s["network_id"]: s for s in sessions}
    for host in hosts:
        published = host.session
        assert isinstance(published, LanSessionInfo)
        assert theirs.get(published.network_id) == our_fields(published, prof.version), sessions
        assert host.statistics().answered == 1
