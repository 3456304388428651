"""The relay's certificate authority and the checks each side makes of the other (seed 004).

Theory of operation
-------------------
As the seed describes: one authority of the deployment's own (``ca init``)
issues server-only certificates for hubs and client-only certificates for
sites (``ca issue``), each with the extended key usage of its role
(``serverAuth`` or ``clientAuth``) and a short name in its subject
alternative name.  The authority's key never leaves the operator's directory;
a hub and a site each get the authority's certificate, their own certificate
and its key.

Each side checks the other's certificate itself, right after the TLS handshake
proved the peer holds the key, and before any Pia datagram moves
(``pianode.relay.quic``): aioquic neither asks a client for a certificate nor
checks extended key usages.  :func:`check_peer` names the first reason that
applies in words an operator acts on (none, self-signed, another authority,
expired, wrong role), then runs ``cryptography``'s X.509 path validation
(:mod:`cryptography.x509.verification`) for the role, which must also pass.
Certificates are ECDSA P-256: both aioquic's TLS and that validation take them.
"""

from __future__ import annotations

import datetime
import errno
import os
import pathlib
import re
import stat

import attrs
from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from cryptography.x509.verification import DNSName, PolicyBuilder, Store, VerificationError

__all__ = [
    "CA_CERT", "CA_KEY", "CaUnusable", "CertificateRefused", "Credentials", "check_peer", "init_ca", "issue",
    "load_credentials",
]  # fmt: skip

CA_CERT = "ca.pem"
CA_KEY = "ca.key"
#: Largest certificate or key file read: the relay's are under 1 KiB; a CA bundle may be longer.
MAX_PEM_FILE = 1024 * 1024
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,62}")


class CertificateRefused(Exception):
    """The peer's certificate does not admit it; ``str()`` is the one-line reason."""


class CaUnusable(ValueError):
    """The CA in the directory ``issue`` was given cannot issue; ``str()`` names the file and the reason on one line."""


@attrs.frozen
class Credentials:
    """What one side holds: the authority's certificate, its own certificate and key."""

    ca: x509.Certificate
    certificate: x509.Certificate
    key: ec.EllipticCurvePrivateKey


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def _write(path: pathlib.Path, data: bytes, *, private: bool) -> None:
    # Never over or through what is there (a symlink, dangling or not, included): the callers checked,
    # and O_EXCL makes that check hold at the moment of writing.
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


def init_ca(directory: str | os.PathLike[str], *, name: str = "pianode relay CA", days: int = 3650) -> pathlib.Path:
    """Make ``DIR/ca.pem`` and ``DIR/ca.key``; refuses to overwrite an existing authority."""
    d = pathlib.Path(directory)
    if d.exists() and not d.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, "is a file, not a folder", str(d))
    d.mkdir(parents=True, exist_ok=True)
    present = [n for n in (CA_CERT, CA_KEY) if os.path.lexists(d / n)]  # a dangling symlink is there too
    if len(present) == 2:
        raise FileExistsError(f"{d} already holds a CA ({CA_CERT} and {CA_KEY}); remove them first to make a new one")
    if present:
        (there,) = present
        missing = CA_KEY if there == CA_CERT else CA_CERT
        raise FileExistsError(f"{d} already holds {there} (no {missing} beside it); remove it first to make a new CA")
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = _now()
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True
        )  # keyCertSign, cRLSign
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    _write(d / CA_KEY, _key_pem(key), private=True)
    _write(d / CA_CERT, cert.public_bytes(serialization.Encoding.PEM), private=False)
    return d / CA_CERT


def _read_pem_file(path: str | os.PathLike[str], what: str) -> bytes:
    """The bytes of a certificate or key file; ValueError ``"{what} {path}: why"`` when it is no file of ours."""
    # Opened without blocking and checked before reading: a FIFO waited for a writer for good, a
    # device (/dev/zero) was read until memory ran out, a huge file was read whole.
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ValueError(f"{what} {path}: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        why = "Is a directory" if stat.S_ISDIR(mode) else "not a regular file (a PEM file is)"
        raise ValueError(f"{what} {path}: {why}")
    with os.fdopen(fd, "rb") as f:
        try:
            data = f.read(MAX_PEM_FILE + 1)
        except OSError as exc:
            raise ValueError(f"{what} {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_PEM_FILE:
        raise ValueError(f"{what} {path}: larger than {MAX_PEM_FILE // 1024} KiB, not one of the relay's PEM files")
    return data


def _parse_certificate(data: bytes, what: str, path: str | os.PathLike[str]) -> x509.Certificate:
    try:
        return x509.load_pem_x509_certificate(data)
    except ValueError as exc:
        raise ValueError(f"{what} {path}: not a PEM certificate ({exc})") from None


def _parse_ecdsa_key(data: bytes, what: str, path: str | os.PathLike[str], remedy: str) -> ec.EllipticCurvePrivateKey:
    try:
        private = serialization.load_pem_private_key(data, None)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{what} {path}: not an unencrypted PEM private key ({exc})") from None
    if not isinstance(private, ec.EllipticCurvePrivateKey):
        raise ValueError(f"{what} {path}: not an ECDSA key ({remedy})")
    return private


def _check_key_belongs(
    private: ec.EllipticCurvePrivateKey, cert: x509.Certificate,
    key_what: str, key_path: str | os.PathLike[str], cert_what: str, cert_path: str | os.PathLike[str],
) -> None:
    """ValueError unless *private* is the key of *cert*'s public key."""
    # Compared as encoded public keys: a certificate of another key type (Ed25519) has no public_numbers.
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    try:
        cert_key = cert.public_key().public_bytes(*spki)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise ValueError(f"{cert_what} {cert_path}: its public key cannot be read ({exc})") from None
    if private.public_key().public_bytes(*spki) != cert_key:
        raise ValueError(f"{key_what} {key_path} does not belong to {cert_what} {cert_path}")


def _load_ca(d: pathlib.Path) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    """The CA certificate and key in *d*, checked to be a CA and its key.

    Raises:
        FileNotFoundError: a CA file is not there (the directory holds no CA).
        CaUnusable: a CA file is there but cannot issue; the message names the file.
    """
    cert_path, key_path = d / CA_CERT, d / CA_KEY
    for path in (cert_path, key_path):
        if not os.path.lexists(path):
            raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT), str(path))
    cert_what, key_what = "CA certificate", "CA key"
    remake = "make a CA with pianode relay ca init"
    try:
        ca_cert = _parse_certificate(_read_pem_file(cert_path, cert_what), cert_what, cert_path)
        try:
            constraints = ca_cert.extensions.get_extension_for_class(x509.BasicConstraints).value
        except x509.ExtensionNotFound:
            constraints = None
        except ValueError as exc:  # an extension that does not parse
            raise ValueError(f"{cert_what} {cert_path}: its extensions cannot be read ({exc})") from None
        if constraints is None or not constraints.ca:
            raise ValueError(f"{cert_what} {cert_path}: not a CA certificate (its basic constraints do not say "
                             f"CA:TRUE: a hub's or a site's certificate?); {remake}")  # fmt: skip
        ca_key = _parse_ecdsa_key(_read_pem_file(key_path, key_what), key_what, key_path, remake)
        _check_key_belongs(ca_key, ca_cert, key_what, key_path, cert_what, cert_path)
    except ValueError as exc:
        raise CaUnusable(str(exc)) from None
    return ca_cert, ca_key


def issue(
    directory: str | os.PathLike[str], name: str, *, role: str, days: int = 825,
    not_before: datetime.datetime | None = None,
) -> tuple[pathlib.Path, pathlib.Path]:
    """Issue ``DIR/NAME.pem`` and ``DIR/NAME.key`` for *role* ``server`` or ``client`` from the CA in *directory*."""
    if role not in ("server", "client"):
        raise ValueError(f"role must be server or client, got {role!r}")
    if not _NAME.fullmatch(name) or name == "ca":
        raise ValueError(
            f"certificate name must be 1..63 characters: letters, digits and '-' (not first), not 'ca'; got {name!r}"
        )
    d = pathlib.Path(directory)
    for taken in (d / f"{name}.pem", d / f"{name}.key"):
        if os.path.lexists(taken):  # a dangling symlink too: the key would be written where it points
            # A site or hub may be running with it: an issued key is never replaced behind its back.
            raise FileExistsError(errno.EEXIST, "already issued: remove it first, or pick another name", str(taken))
    ca_cert, ca_key = _load_ca(d)
    key = ec.generate_private_key(ec.SECP256R1())
    start = not_before or (_now() - datetime.timedelta(minutes=5))
    usage = ExtendedKeyUsageOID.SERVER_AUTH if role == "server" else ExtendedKeyUsageOID.CLIENT_AUTH
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.KeyUsage(True, False, False, False, False, False, False, False, False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(name)]), critical=False)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    pem, key_path = d / f"{name}.pem", d / f"{name}.key"
    _write(key_path, _key_pem(key), private=True)
    _write(pem, cert.public_bytes(serialization.Encoding.PEM), private=False)
    return pem, key_path


def load_credentials(ca: str | os.PathLike[str], cert: str | os.PathLike[str], key: str | os.PathLike[str]) -> Credentials:
    """Read the three PEM files; ValueError with the file's name when one is not what it should be."""
    ca_bytes = _read_pem_file(ca, "CA certificate")
    cert_bytes = _read_pem_file(cert, "certificate")
    key_bytes = _read_pem_file(key, "key")
    ca_cert = _parse_certificate(ca_bytes, "CA certificate", ca)
    own = _parse_certificate(cert_bytes, "certificate", cert)
    private = _parse_ecdsa_key(key_bytes, "key", key, "issue one with pianode relay ca issue")
    _check_key_belongs(private, own, "key", key, "certificate", cert)
    return Credentials(ca_cert, own, private)


def _signed_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _has_usage(cert: x509.Certificate, oid: x509.ObjectIdentifier) -> bool:
    try:
        eku = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    except x509.ExtensionNotFound:
        return False
    return oid in eku


def _dns_name(cert: x509.Certificate) -> str | None:
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return None
    names = san.get_values_for_type(x509.DNSName)
    return names[0] if names else None


def check_peer(
    certificate: x509.Certificate | None,
    chain: list[x509.Certificate],
    ca: x509.Certificate,
    *,
    role: str,
    now: datetime.datetime | None = None,
) -> str:
    """Admit a peer holding *certificate* for *role* (``client`` or ``server``); returns its name.

    Raises:
        CertificateRefused: with the one-line reason.
    """
    who = f"{role} certificate"
    if certificate is None:
        raise CertificateRefused(f"no {role} certificate presented")
    now = now or _now()
    if certificate.issuer == certificate.subject and _signed_by(certificate, certificate):
        raise CertificateRefused(f"{who} is self-signed, not issued by this relay's CA")
    if certificate.issuer != ca.subject or not _signed_by(certificate, ca):
        raise CertificateRefused(f"{who} is not issued by this relay's CA")
    if now > certificate.not_valid_after_utc:
        raise CertificateRefused(f"{who} expired on {certificate.not_valid_after_utc:%Y-%m-%d %H:%M} UTC")
    if now < certificate.not_valid_before_utc:
        raise CertificateRefused(f"{who} is not valid before {certificate.not_valid_before_utc:%Y-%m-%d %H:%M} UTC")
    wanted = ExtendedKeyUsageOID.CLIENT_AUTH if role == "client" else ExtendedKeyUsageOID.SERVER_AUTH
    if not _has_usage(certificate, wanted):
        other = "server" if role == "client" else "client"
        only = f"{other}-only" if _has_usage(certificate, ExtendedKeyUsageOID.SERVER_AUTH if role == "client" else ExtendedKeyUsageOID.CLIENT_AUTH) else "without that usage"
        raise CertificateRefused(f"{who} wanted, got a {only} certificate (extended key usage lacks {role}Auth)")
    name = _dns_name(certificate)
    if name is None:
        raise CertificateRefused(f"{who} has no DNS name in its subject alternative name")
    builder = PolicyBuilder().store(Store([ca])).time(now).max_chain_depth(1)
    try:
        if role == "client":
            builder.build_client_verifier().verify(certificate, chain)
        else:
            # The name is the certificate's own: the seed's rule is "issued by our CA for this role",
            # and a site dials the hub by address.
            builder.build_server_verifier(DNSName(name)).verify(certificate, chain)
    except VerificationError as exc:
        raise CertificateRefused(f"{who} failed X.509 path validation: {exc}") from None
    return name

