"""The relay's CA tooling and the checks of a peer's certificate, each refusal with its reason."""

from __future__ import annotations

import datetime
import pathlib

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import NameOID

from pianode.relay.certificates import CertificateRefused, check_peer, init_ca, issue, load_credentials


def _cert(path: pathlib.Path) -> x509.Certificate:
    return x509.load_pem_x509_certificate(path.read_bytes())


@pytest.fixture
def pki(tmp_path: pathlib.Path) -> dict[str, pathlib.Path]:
    init_ca(tmp_path / "ca")
    init_ca(tmp_path / "other")
    out = {"ca": tmp_path / "ca" / "ca.pem", "other_ca": tmp_path / "other" / "ca.pem"}
    out["hub"], out["hub_key"] = issue(tmp_path / "ca", "hub", role="server")
    out["site"], out["site_key"] = issue(tmp_path / "ca", "site-a", role="client")
    out["stranger"], _ = issue(tmp_path / "other", "site-x", role="client")
    out["rogue_hub"], _ = issue(tmp_path / "other", "hub", role="server")
    return out


def test_issued_certificates_carry_the_usage_of_their_role(pki: dict[str, pathlib.Path]) -> None:
    ca = _cert(pki["ca"])
    assert check_peer(_cert(pki["site"]), [], ca, role="client") == "site-a"
    assert check_peer(_cert(pki["hub"]), [], ca, role="server") == "hub"
    eku = _cert(pki["site"]).extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(eku) == [x509.oid.ExtendedKeyUsageOID.CLIENT_AUTH]
    assert oct(pki["site_key"].stat().st_mode & 0o777) == "0o600"
    creds = load_credentials(pki["ca"], pki["site"], pki["site_key"])
    assert creds.certificate == _cert(pki["site"])


@pytest.mark.parametrize(
    ("cert", "role", "reason"),
    [
        (None, "client", "no client certificate presented"),
        ("stranger", "client", "is not issued by this relay's CA"),
        ("hub", "client", "got a server-only certificate"),
        ("site", "server", "got a client-only certificate"),
        ("rogue_hub", "server", "is not issued by this relay's CA"),
        ("other_ca", "client", "is self-signed"),
    ],
)
def test_refusals_name_their_reason(pki: dict[str, pathlib.Path], cert: str | None, role: str, reason: str) -> None:
    with pytest.raises(CertificateRefused, match=reason) as info:
        check_peer(None if cert is None else _cert(pki[cert]), [], _cert(pki["ca"]), role=role)
    assert "\n" not in str(info.value)


def test_an_expired_certificate_is_refused(tmp_path: pathlib.Path) -> None:
    init_ca(tmp_path)
    old = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=30)
    pem, _ = issue(tmp_path, "late", role="client", days=2, not_before=old)
    with pytest.raises(CertificateRefused, match="expired on"):
        check_peer(_cert(pem), [], _cert(tmp_path / "ca.pem"), role="client")


def test_ca_init_does_not_overwrite_and_issue_checks_names(tmp_path: pathlib.Path) -> None:
    init_ca(tmp_path)
    with pytest.raises(FileExistsError):
        init_ca(tmp_path)
    with pytest.raises(ValueError):
        issue(tmp_path, "../x", role="client")
    with pytest.raises(ValueError):
        issue(tmp_path, "x", role="both")


def test_a_key_of_another_certificate_is_refused_on_load(pki: dict[str, pathlib.Path]) -> None:
    with pytest.raises(ValueError, match="does not belong"):
        load_credentials(pki["ca"], pki["site"], pki["hub_key"])


@pytest.mark.parametrize("kind", ["ed25519", "rsa"])
def test_a_certificate_of_another_key_type_beside_an_ecdsa_key_is_refused_on_load(
    pki: dict[str, pathlib.Path], tmp_path: pathlib.Path, kind: str
) -> None:
    """An Ed25519 certificate beside an ECDSA key ended ``pianode relay serve`` in an internal error
    (AttributeError: no public_numbers), exit 1, where a key of another certificate is one line, exit 2."""
    key = ed25519.Ed25519PrivateKey.generate() if kind == "ed25519" else rsa.generate_private_key(65537, 2048)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, kind)])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(1).not_valid_before(now).not_valid_after(now + datetime.timedelta(days=1))
        .sign(key, None if kind == "ed25519" else hashes.SHA256())
    )  # fmt: skip
    path = tmp_path / f"{kind}.pem"
    path.write_bytes(cert.public_bytes(Encoding.PEM))
    with pytest.raises(ValueError, match=f"key {pki['hub_key']} does not belong to certificate {path}"):
        load_credentials(pki["ca"], path, pki["hub_key"])


@pytest.mark.parametrize("which", [0, 1, 2])
def test_a_directory_or_missing_file_is_named_as_such_not_as_a_bad_pem(
    pki: dict[str, pathlib.Path], tmp_path: pathlib.Path, which: int
) -> None:
    """It said 'CA certificate pki: not a PEM certificate (CA certificate pki: Is a directory)'."""
    for wrong, why in ((tmp_path, "Is a directory"), (tmp_path / "missing.pem", "No such file")):
        paths = [pki["ca"], pki["site"], pki["site_key"]]
        paths[which] = wrong
        with pytest.raises(ValueError) as caught:
            load_credentials(*paths)
        assert why in str(caught.value) and "not a PEM" not in str(caught.value) and str(caught.value).count(str(wrong)) == 1


def test_a_name_too_long_is_refused_for_its_length(tmp_path: pathlib.Path) -> None:
    """A 70-letter name was refused as not 'letters, digits and -', which it was."""
    init_ca(tmp_path)
    with pytest.raises(ValueError, match="1..63 characters"):
        issue(tmp_path, "a" * 70, role="client")


def test_ca_init_on_a_file_says_it_is_a_file(tmp_path: pathlib.Path) -> None:
    """It said '[Errno 17] File exists: ...'."""
    (tmp_path / "f").write_text("x")
    with pytest.raises(NotADirectoryError, match="is a file, not a folder"):
        init_ca(tmp_path / "f")


def test_a_certificate_not_yet_valid_is_refused(tmp_path: pathlib.Path) -> None:
    init_ca(tmp_path)
    soon = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(days=1)
    pem, _ = issue(tmp_path, "early", role="client", not_before=soon)
    with pytest.raises(CertificateRefused, match="is not valid before"):
        check_peer(_cert(pem), [], _cert(tmp_path / "ca.pem"), role="client")


@pytest.mark.parametrize("name", ["site-a.key", "site-a.pem", "ca.key", "ca.pem"])
def test_a_symlink_where_a_file_goes_is_not_written_through(tmp_path: pathlib.Path, name: str) -> None:
    """A dangling symlink in place of an issued file (or of the CA's) passed the check that the file
    was not there, and the key was written through it, wherever it pointed."""
    d = tmp_path / "pki"
    if name.startswith("site-a"):
        init_ca(d)
    else:
        d.mkdir()
    target = tmp_path / "elsewhere"
    (d / name).symlink_to(target)
    with pytest.raises(FileExistsError):
        if name.startswith("site-a"):
            issue(d, "site-a", role="client")
        else:
            init_ca(d)
    assert not target.exists()
    assert sorted(p.name for p in d.iterdir()) == sorted({name, *(["ca.key", "ca.pem"] if name.startswith("site-a") else [])})
