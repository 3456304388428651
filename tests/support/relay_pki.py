"""Certificates for relay tests: one CA with a hub and two sites, and a second CA for strangers."""

from __future__ import annotations

import datetime
import pathlib

import attrs

from pianode.relay.certificates import Credentials, init_ca, issue, load_credentials


@attrs.frozen
class Pki:
    root: pathlib.Path

    def files(self, name: str, ca: str = "ca") -> tuple[pathlib.Path, pathlib.Path, pathlib.Path]:
        """(CA certificate, NAME.pem, NAME.key) in the *ca* directory."""
        d = self.root / ca
        return d / "ca.pem", d / f"{name}.pem", d / f"{name}.key"

    def credentials(self, name: str, ca: str = "ca", trust: str | None = None) -> Credentials:
        """*name*'s own certificate from *ca*, trusting the CA of *trust* (default: the same)."""
        _, pem, key = self.files(name, ca)
        return load_credentials(self.root / (trust or ca) / "ca.pem", pem, key)


def make_pki(root: pathlib.Path) -> Pki:
    init_ca(root / "ca")
    issue(root / "ca", "hub", role="server")
    for site in ("site-a", "site-b", "site-c"):
        issue(root / "ca", site, role="client")
    issue(root / "ca", "hub-as-client", role="server")  # a server-only certificate offered by a site
    long_ago = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=30)
    issue(root / "ca", "site-expired", role="client", days=2, not_before=long_ago)
    init_ca(root / "other")
    issue(root / "other", "stranger", role="client")
    issue(root / "other", "rogue-hub", role="server")
    return Pki(root)
