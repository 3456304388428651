"""``pianode prudp serve`` and ``pianode prudp connect`` as real processes on loopback."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from protocols.prudp.rendezvous import generate_key, public_bytes


def _run(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pianode", *argv], capture_output=True, text=True, timeout=timeout)


class Server:
    def __init__(self, *argv: str) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pianode", "prudp", "serve", *argv, "--duration", "30"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.lines: list[str] = []
        for _ in range(3):
            line = self.proc.stdout.readline()
            self.lines.append(line)
            if m := re.search(r"listening on (127\.0\.0\.1):(\d+)", line):
                self.address = f"{m[1]}:{m[2]}"
                return
        self.close()
        raise AssertionError(f"server did not start: {self.lines}")

    def close(self) -> None:
        self.proc.kill()
        self.proc.communicate(timeout=10)  # reaps the process and closes both pipes


@pytest.fixture
def server(request: pytest.FixtureRequest) -> Iterator[Server]:
    s = Server(*request.param)
    try:
        yield s
    finally:
        s.close()


@pytest.mark.parametrize(
    "server", [("--variant", "nintendo-v0", "--access-key", "6f599f81"), ("--variant", "quazal-v0")], indirect=True
)
def test_connect_prints_round_trips(server: Server) -> None:
    variant = server.proc.args[server.proc.args.index("--variant") + 1]  # type: ignore[union-attr]
    extra = ["--access-key", "6f599f81"] if variant == "nintendo-v0" else []
    out = _run("prudp", "connect", "--variant", variant, *extra, server.address, "--count", "4", "--size", "3000")
    assert out.returncode == 0, out.stderr
    assert len(re.findall(r"^seq=\d+ bytes=3000 rtt=[\d.]+ ms$", out.stdout, re.M)) == 4
    assert re.search(r"4 messages, 0 mismatched; rtt min/avg/max/stdev = [\d.]+/[\d.]+/[\d.]+/[\d.]+ ms", out.stdout)


@pytest.mark.parametrize("server", [("--variant", "rendezvous")], indirect=True)
def test_rendezvous_trust_and_refusal(server: Server) -> None:
    key = re.search(r"--trust\): ([0-9a-f]{128})", "".join(server.lines))
    assert key is not None
    ok = _run("prudp", "connect", "--variant", "rendezvous", server.address, "--trust", key[1], "--count", "2")
    assert ok.returncode == 0, ok.stderr
    other = public_bytes(generate_key()).hex()
    bad = _run("prudp", "connect", "--variant", "rendezvous", server.address, "--trust", other, "--count", "2")
    assert bad.returncode == 1  # a failure at run time, not bad input
    assert "host key signature does not verify" in bad.stderr
    assert bad.stderr.count("\n") == 1  # one line, no traceback


def test_wrong_access_key_gets_no_answer_and_the_server_says_why() -> None:
    s = Server("--variant", "nintendo-v0", "--access-key", "aaaaaaaa")
    try:
        out = _run("prudp", "connect", "--variant", "nintendo-v0", "--access-key", "bbbbbbbb", s.address, "--timeout", "3")
    finally:
        s.proc.terminate()
        server_out, _ = s.proc.communicate(timeout=10)
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "no answer" in out.stderr and "does the server use --variant nintendo-v0 and --access-key 'bbbbbbbb'?" in out.stderr
    assert re.search(r"dropped \d+ packet\(s\) that had a checksum that did not verify with this --access-key "
                     r"\[bad_checksum\]", server_out)


def _serve_and_connect(server: tuple[str, ...], client: tuple[str, ...]) -> tuple[subprocess.CompletedProcess[str], str]:
    """Run a server and one client against it; the client's result and everything the server printed."""
    s = Server(*server)
    try:
        out = _run("prudp", "connect", *client, s.address, "--timeout", "2", "--count", "2")
        time.sleep(0.6)  # the server reports its drops every 0.5 s
    finally:
        s.proc.terminate()
        server_out, _ = s.proc.communicate(timeout=10)
    return out, "".join(s.lines) + server_out


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [("nintendo-v0", "nintendo-v1"), ("nintendo-v1", "nintendo-v0"), ("nintendo-v0", "nintendo-v0-friends"),
     ("nintendo-v1", "quazal-v0")],
)  # fmt: skip
def test_another_variant_is_named_and_the_access_key_is_not_blamed(ours: str, theirs: str) -> None:
    key = ("--access-key", "6f599f81")
    out, server_out = _serve_and_connect(("--variant", ours, *key), ("--variant", theirs, *key))
    assert out.returncode == 1
    assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert "--variant" in out.stderr and "is the access key right?" not in out.stderr
    drops = [line for line in server_out.splitlines() if line.startswith("dropped ")]
    assert drops, server_out
    assert any(re.fullmatch(rf"dropped \d+ packet\(s\) that were of PRUDP variant [a-z0-9 -]*\b{theirs}\b[a-z0-9 -]*, "
                            rf"not --variant {ours} \(ignored: both ends need the same variant\) \[other_variant\]",
                            line) for line in drops), drops  # fmt: skip
    assert not any("--access-key" in line for line in drops), drops
    assert all(re.search(r" \[[a-z_]+\]$", line) for line in drops), drops


@pytest.mark.parametrize(("variant", "tag"), [("nintendo-v0", "bad_checksum"), ("nintendo-v1", "bad_signature")])
def test_the_same_variant_with_another_access_key_blames_the_access_key(variant: str, tag: str) -> None:
    out, server_out = _serve_and_connect(("--variant", variant, "--access-key", "aaaaaaaa"),
                                         ("--variant", variant, "--access-key", "bbbbbbbb"))  # fmt: skip
    assert out.returncode == 1 and out.stderr.count("\n") == 1
    drops = [line for line in server_out.splitlines() if line.startswith("dropped ")]
    assert any(line.endswith(f"did not verify with this --access-key [{tag}]") for line in drops), drops
    assert all(re.search(r" \[[a-z_]+\]$", line) for line in drops), drops
    assert not any("variant" in line for line in drops), drops


def test_every_drop_reason_of_the_endpoint_has_words_and_a_snake_case_tag() -> None:
    from pianode.cli.prudp import DROP_HINTS
    from pianode.prudp.core import DROP_REASONS

    assert set(DROP_HINTS) == set(DROP_REASONS)
    assert all(re.fullmatch(r"[a-z]+(_[a-z]+)*", reason) for reason in DROP_REASONS)


def test_refused_connection_requests_are_reported_with_their_reason() -> None:
    """prudp serve prints a line for each kind of refused CONNECT (a replayed one, another key, a full host)
    as it does for dropped packets: before, refusals were only counted."""
    from pianode.cli.prudp import drop_lines

    why = "a CONNECT for a live connection did not verify (replayed or forged)"
    stats = {"refused_connect": 3, f"refused: {why}": 3, "dropped_no_connection": 1}
    lines = drop_lines(stats, {f"refused: {why}": 1}, "nintendo-v1")
    assert f"refused 2 connection request(s): {why} [refused_connect]" in lines
    assert any(line.startswith("dropped 1 packet(s) that belonged to no connection") for line in lines)


@pytest.mark.parametrize("command", [["serve"], ["connect", "127.0.0.1:9"]])
def test_a_fragment_size_beyond_what_a_packet_holds_is_refused_naming_the_flag(command: list[str]) -> None:
    """``--fragment-size`` took up to 65000 at parse time while the endpoint takes at most 60000 (a fragment and its
    header in one u16-sized payload): 60001 got past the flag check and ended with the setting's own words
    (``fragment_size``), not the flag's.  Now the flag states and checks the real range."""
    result = _run("prudp", command[0], "--variant", "nintendo-v1", "--fragment-size", "60001", *command[1:])
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "--fragment-size" in result.stderr and "60000" in result.stderr


@pytest.mark.parametrize("address", ["255.255.255.255:5000", "224.0.0.1:5000", "239.1.2.3:5000"])
def test_a_connection_to_a_broadcast_or_multicast_address_is_refused(address: str) -> None:
    """A PRUDP connection has one peer: to the broadcast address the SYN cannot even be sent (EACCES), to a group it
    reaches no server.  Before, the client tried for its whole timeout and blamed --variant/--access-key; now the
    address is refused at once (one line, exit 2)."""
    result = _run("prudp", "connect", "--variant", "nintendo-v1", address, "--timeout", "10")
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "HOST:PORT" in result.stderr and address.split(":")[0] in result.stderr


def _pem(tmp_path: object, name: str, curve: str, *, private: bool) -> str:
    import pathlib

    from Crypto.PublicKey import ECC

    key = ECC.generate(curve=curve)
    path = pathlib.Path(str(tmp_path)) / name
    path.write_text((key if private else key.public_key()).export_key(format="PEM"))
    return str(path)


@pytest.mark.parametrize(("curve", "private"), [("P-256", False), ("P-384", True), ("Ed25519", True)])
def test_a_certificate_key_the_key_exchange_cannot_sign_with_is_refused(tmp_path: object, curve: str,
                                                                       private: bool) -> None:  # fmt: skip
    """The Rendez-Vous host signs its key exchange with a P-256 private key (spec §4.3).  A public key, or a key on
    another curve, was taken: the server started and then refused every CONNECT.  Now the flag is refused at once
    (one line, exit 2)."""
    pem = _pem(tmp_path, "cert.pem", curve, private=private)
    result = _run("prudp", "serve", "--variant", "rendezvous", "--certificate-key", pem, "--duration", "1")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and "--certificate-key" in result.stderr


@pytest.mark.parametrize("curve", ["P-384", "Ed25519"])
def test_a_trusted_key_on_another_curve_is_refused(tmp_path: object, curve: str) -> None:
    """``--trust`` must be the host's P-256 certificate key (spec §4.3); one on another curve could never verify the
    host, and the client tried anyway.  Now it is refused at once (one line, exit 2)."""
    pem = _pem(tmp_path, "trust.pem", curve, private=False)
    result = _run("prudp", "connect", "--variant", "rendezvous", "--trust", pem, "127.0.0.1:9", "--timeout", "5")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and "--trust" in result.stderr
