"""The ``--decrypted-pcap`` step of ``pianode decode`` (kept here so the decode command gains three lines)."""

from __future__ import annotations

import os
import sys

from pianode.capture.output import output_file
from pianode.capture.pcap import Capture
from pianode.cli.common import CliError
from pianode.capture.decode import Decoder
from pianode.wireshark.export import export_decrypted

__all__ = ["write_export"]


def write_export(cap: Capture, decoder: Decoder, path: str) -> str:
    """Export *cap* to *path* (``-``: standard output); returns the summary line to print; a file that cannot
    be written is a CliError.  The file appears whole or not at all (:func:`pianode.capture.output.output_file`:
    a full disk or ^C leaves no partial file, and a device or FIFO is written into, not replaced)."""
    if os.path.isdir(path):
        raise CliError(f"--decrypted-pcap {path}: is a folder")
    try:
        if path == "-":
            stats = export_decrypted(cap, decoder, sys.stdout.buffer)
            sys.stdout.buffer.flush()
        else:
            with output_file(path, "wb") as out:
                stats = export_decrypted(cap, decoder, out)
    except BrokenPipeError:
        raise
    except OSError as exc:
        where = "cannot write standard output: " if path == "-" else ""
        raise CliError(f"--decrypted-pcap {path}: {where}{exc.strerror or exc}") from None
    where = "standard output" if path == "-" else path
    others = stats.datagrams - stats.decrypted - stats.plain - stats.kept_encrypted
    return (
        f"wrote {stats.datagrams} datagrams to {where}: {stats.decrypted} Pia packets decrypted, {stats.plain} plain,"
        f" {stats.kept_encrypted} kept encrypted ({stats.auth_failed} failed authentication)"
        + (f"; {others} other datagrams (LAN browse, LDN link frames, PRUDP or not recognised)" if others else "")
    )
