"""A listener the command cannot have is one line naming --listen, exit 2, before any work: a port another
process holds (lan host's browse listener shares its port only with sockets that share it too), and an
IPv6 address for the relay hub, whose socket and sites are IPv4."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from loopback_addresses import free_port, loopback_block
from support.cli_processes import pianode


@pytest.fixture
def held() -> Iterator[tuple[str, int]]:
    """A UDP port held by a socket that does not share it."""
    ip = loopback_block() + "2"
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind((ip, free_port()))
        yield s.getsockname()


def _hub_files(tmp_path: Path) -> list[str]:
    ca = tmp_path / "ca"
    assert pianode("relay", "ca", "init", str(ca)).returncode == 0
    assert pianode("relay", "ca", "issue", str(ca), "--server", "hub").returncode == 0
    return ["--ca", str(ca / "ca.pem"), "--cert", str(ca / "hub.pem"), "--key", str(ca / "hub.key")]


def test_lan_host_names_a_busy_listen_port(held: tuple[str, int]) -> None:
    ip, port = held
    done = pianode("lan", "host", "--game-key", "0123456789abcdef", "--bind", ip, "--listen", f"{ip}:{port}",
                   "--duration", "1")  # fmt: skip
    assert (done.returncode, done.stdout) == (2, "")
    # (--listen takes no port 0: its browsers must be told the port, so no such advice here)
    assert done.stderr == (f"pianode lan host: --listen: UDP port {port} on {ip} is already in use"
                           " (pick another port)\n")


def test_relay_serve_names_a_busy_or_ipv6_listen(held: tuple[str, int], tmp_path: Path) -> None:
    ip, port = held
    files = _hub_files(tmp_path)
    done = pianode("relay", "serve", "--listen", f"{ip}:{port}", *files, "--duration", "1")
    assert (done.returncode, done.stdout) == (2, "")
    # (--listen of a hub takes no port 0: its sites must be told the port, so no such advice here)
    assert done.stderr == (f"pianode relay serve: --listen: UDP port {port} on {ip} is already in use"
                           " (pick another port)\n")
    done = pianode("relay", "serve", "--listen", f"[::1]:{port}", *files, "--duration", "1")
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == (f"pianode relay serve: --listen [::1]:{port}: the hub listens on IPv4 (sites reach it with"
                           " --relay IPv4:PORT); give an IPv4 address, or 0.0.0.0 for every interface\n")
