"""Output files written whole or not at all: a run's recording, an export, a report.

Theory of operation: :func:`output_file` writes into a hidden temporary file beside
the target and renames it over the target only once everything was written and
closed, so a full disk, a write error or Ctrl-C leaves the target as it was (no
half-written file) and the temporary file is removed.  A target that is not a
regular file (``/dev/null``, ``/dev/stdout``, a FIFO a reader waits on) is written
directly instead: renaming over it would replace the device or the pipe with a
file.  A symbolic link is followed, so the file it points to is replaced, not the
link.  ``-`` is not special here; a command that lets ``-`` mean standard output
says so itself.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from typing import IO, Any

__all__ = ["is_special", "output_file"]


def is_special(path: str | os.PathLike[str]) -> bool:
    """Whether *path* exists and is not a regular file or a folder (a device, a FIFO, a socket)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


@contextlib.contextmanager
def output_file(path: str | os.PathLike[str], mode: str = "wb", **kwargs: Any) -> Iterator[IO[Any]]:
    """Open *path* for writing (*mode* ``"wb"`` or ``"w"``); the file appears complete when the block ends
    without an exception, and is left as it was when it raises (the exception goes on)."""
    # A device or pipe is opened by the name given: /dev/fd/63 (bash's >(...)) resolves to "pipe:[1234]",
    # which is no path at all.
    target = os.fspath(path) if is_special(path) else os.path.realpath(path)
    try:
        with _output_file(target, mode, **kwargs) as f:
            yield f
    except OSError as exc:
        if exc.filename is not None or exc.errno is None:
            raise
        # A write or close that failed (a full disk) names no file: name the one being written.
        raise OSError(exc.errno, exc.strerror, os.fspath(path)) from exc


@contextlib.contextmanager
def _output_file(target: str, mode: str, **kwargs: Any) -> Iterator[IO[Any]]:
    if is_special(target):
        with open(target, mode, **kwargs) as f:
            yield f
        return
    directory, name = os.path.split(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".part", dir=directory or ".")
    try:
        existing = os.stat(target).st_mode & 0o7777
    except OSError:
        existing = 0o666 & ~_umask()
    try:
        os.fchmod(fd, existing)
        with os.fdopen(fd, mode, **kwargs) as f:
            yield f
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
