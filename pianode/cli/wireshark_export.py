"""The ``--decrypted-pcap`` step of ``pianode decode`` (kept here so the decode command gains three lines)."""

from __future__ import annotations

import os

from pianode.capture.pcap import Capture
from pianode.cli.common import CliError
from pianode.capture.decode import Decoder
from pianode.wireshark.export import export_decrypted

__all__ = ["write_export"]


def write_export(cap: Capture, decoder: Decoder, path: str) -> str:
    """Export *cap* to *path*; returns the summary line to print; a file that cannot be written is a CliError."""
    if os.path.isdir(path):
        raise CliError(f"--decrypted-pcap {path}: is a folder")
    tmp = f"{path}.part"
    try:
        out = open(tmp, "wb")  # noqa: SIM115 (closed below, before the rename)
    except OSError as exc:
        raise CliError(f"--decrypted-pcap {path}: {exc.strerror or exc}") from None
    try:
        with out:
            stats = export_decrypted(cap, decoder, out)
        os.replace(tmp, path)
    except BaseException as exc:
        # Whatever stopped the export (an unreadable capture, a full disk, ^C): no partial file is left.
        try:
            os.unlink(tmp)
        except OSError:
            pass
        if isinstance(exc, OSError):
            raise CliError(f"--decrypted-pcap {path}: {exc.strerror or exc}") from None
        raise
    others = stats.datagrams - stats.decrypted - stats.plain - stats.kept_encrypted
    return (
        f"wrote {stats.datagrams} datagrams to {path}: {stats.decrypted} Pia packets decrypted, {stats.plain} plain,"
        f" {stats.kept_encrypted} kept encrypted ({stats.auth_failed} failed authentication)"
        + (f"; {others} other datagrams (LAN browse, LDN link frames, PRUDP or not recognised)" if others else "")
    )
