"""``pianode prudp serve`` and ``pianode prudp connect`` as real processes on loopback."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from protocols.prudp.rendezvous import generate_key, public_bytes


def _run(*argv: str, timeout: float = 60, cwd: object = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pianode", *argv], capture_output=True, text=True, timeout=timeout,
                          cwd=cwd)  # fmt: skip


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


def _connect_trusting(trust: str, *, cwd: object = None) -> subprocess.CompletedProcess[str]:
    """A client that trusts *trust*, pointed at the discard port: a good key would only time out there (exit 1)."""
    return _run("prudp", "connect", "--variant", "rendezvous", "127.0.0.1:9", "--trust", trust, "--timeout", "5",
                cwd=cwd)  # fmt: skip


#: The field prime of P-256, and a point of the curve whose X (5) plus the prime still fits 32 bytes.
_P256_PRIME = 0xFFFFFFFF00000001000000000000000000000000FFFFFFFFFFFFFFFFFFFFFFFF
_SMALL_POINT = (5, 0x459243B9AA581806FE913BCE99817ADE11CA503C64D9A3C533415C083248FBCC)


@pytest.mark.parametrize(
    ("key", "words"),
    [
        ("00" * 64, "point at infinity"),
        ((_SMALL_POINT[0] + _P256_PRIME).to_bytes(32, "big").hex() + _SMALL_POINT[1].to_bytes(32, "big").hex(),
         "field prime"),
    ],
    ids=["zeros", "unreduced"],
)
def test_a_trusted_key_that_is_no_real_point_is_refused_as_bad_input(key: str, words: str) -> None:
    """64 zero bytes are the point at infinity to PyCryptodome, and X + p another spelling of the point X: both got
    past the check, and the client went on to fail at run time (exit 1, "host key signature does not verify") while an
    off-curve key was refused at once.  Now both are refused as what they are (one line, exit 2)."""
    result = _connect_trusting(key)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and "--trust" in result.stderr and words in result.stderr


def test_a_trusted_pem_key_at_infinity_is_refused(tmp_path: object) -> None:
    """A PEM public key can spell the point at infinity too (04 and 64 zero bytes); PyCryptodome imports it."""
    import pathlib

    from Crypto.Util.asn1 import DerBitString, DerObjectId, DerSequence

    algorithm = DerSequence([DerObjectId("1.2.840.10045.2.1").encode(), DerObjectId("1.2.840.10045.3.1.7").encode()])
    der = DerSequence([algorithm.encode(), DerBitString(b"\x04" + bytes(64)).encode()]).encode()
    body = base64.encodebytes(der).decode()
    path = pathlib.Path(str(tmp_path)) / "infinity.pem"
    path.write_text(f"-----BEGIN PUBLIC KEY-----\n{body}-----END PUBLIC KEY-----\n")
    result = _connect_trusting(str(path))
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and "--trust" in result.stderr and "point at infinity" in result.stderr


def test_a_trusted_path_that_is_not_a_key_file_is_named_as_such(tmp_path: object) -> None:
    """Anything but a regular file was read as hex, so a directory, a missing file or /dev/null all got "not a P-256
    public key: non-hexadecimal number found in fromhex() arg".  Now the line says what the path is."""
    import pathlib

    folder = pathlib.Path(str(tmp_path)) / "keys"
    folder.mkdir()
    cases = [
        (str(folder), f"--trust {folder}: is a directory, not a key file"),
        (str(folder / "missing.pem"), f"--trust {folder / 'missing.pem'}: no such file"),
        ("/dev/null", "--trust /dev/null: is a character device, not a key file"),
    ]
    for trust, line in cases:
        result = _connect_trusting(trust)
        assert result.returncode == 2, (trust, result.stdout, result.stderr)
        assert result.stderr.count("\n") == 1 and line in result.stderr, result.stderr
        assert "fromhex" not in result.stderr
    relative = _connect_trusting("keys", cwd=tmp_path)  # no slash, but it names the directory there
    assert relative.returncode == 2 and "--trust keys: is a directory, not a key file" in relative.stderr
    named = _connect_trusting("server.pem", cwd=tmp_path)  # no slash, but a name hex never is
    assert named.returncode == 2 and "--trust server.pem: no such file" in named.stderr


@pytest.mark.parametrize("empty", ["", " "])
def test_an_empty_trusted_key_is_called_empty(empty: str) -> None:
    """The empty text must not become the path "." (a directory) in the line that refuses it."""
    result = _connect_trusting(empty)
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "--trust is empty" in result.stderr


def test_a_trusted_key_in_hex_that_is_no_path_still_reads_as_hex() -> None:
    """Text with no slash that names nothing is the key in hex: a bad one is refused as hex, not as a missing file."""
    result = _connect_trusting("zz")
    assert result.returncode == 2 and result.stderr.count("\n") == 1
    assert "--trust: not a P-256 public key" in result.stderr and "no such file" not in result.stderr


def test_an_empty_certificate_key_is_called_empty() -> None:
    """``--certificate-key ''`` became the path ".", so the line said "--certificate-key .: is a directory"."""
    result = _run("prudp", "serve", "--variant", "rendezvous", "--certificate-key", "", "--duration", "1")
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert result.stderr.count("\n") == 1 and "--certificate-key" in result.stderr and "empty" in result.stderr
    assert "--certificate-key ." not in result.stderr
