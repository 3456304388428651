"""gzip-compressed captures, read as a stream: Wireshark and tshark open a ``.pcap.gz`` / ``.pcapng.gz`` (or any
capture file gzip compressed, whatever its name) as they open the capture inside, and so does ``pianode decode``.

The gzip member header starts with the bytes ``1f 8b`` (RFC 1952 §2.3.1); :func:`gunzip_if_compressed` looks at
the first bytes :func:`pianode.capture.pcap.open_capture` sniffed and, for gzip, hands back a stream of the
decompressed bytes.  A corrupt or cut-off gzip stream never raises: the stream ends there and keeps the reason in
:attr:`GzipInput.problem`, which the reader reports as it reports a capture cut short.
"""

from __future__ import annotations

import gzip
import zlib
from typing import BinaryIO

__all__ = ["GZIP_MAGIC", "GzipInput", "gunzip_if_compressed"]

GZIP_MAGIC = b"\x1f\x8b"


class _Prefixed:
    """A read-only stream: *head* (bytes already read from *raw*), then the rest of *raw*."""

    def __init__(self, head: bytes, raw: BinaryIO) -> None:
        self._head, self._raw = head, raw

    def read(self, n: int = -1) -> bytes:
        if self._head:
            out, self._head = (self._head, b"") if n < 0 or n >= len(self._head) else (self._head[:n], self._head[n:])
            return out
        return self._raw.read(n)


class GzipInput:
    """The decompressed bytes of a gzip stream, with :meth:`read` and :meth:`readline` that never raise."""

    def __init__(self, head: bytes, raw: BinaryIO) -> None:
        self._gz = gzip.GzipFile(fileobj=_Prefixed(head, raw), mode="rb")  # type: ignore[arg-type]
        #: Why the decompressed stream ended early (corrupt or cut off), or None.
        self.problem: str | None = None

    def _guard(self, call: object, n: int) -> bytes:
        if self.problem is not None:
            return b""
        try:
            return call(n)  # type: ignore[operator,no-any-return]
        except EOFError:
            self.problem = "the gzip stream is cut short"
        except (OSError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
            self.problem = f"the gzip stream is corrupt ({' '.join(str(exc).split()) or type(exc).__name__})"
        return b""

    def read(self, n: int = -1) -> bytes:
        # In steps of read1, so that a stream cut off still gives every byte before the cut.
        parts: list[bytes] = []
        got = 0
        while n < 0 or got < n:
            part = self._guard(self._gz.read1, 1 << 16 if n < 0 else min(n - got, 1 << 16))
            if not part:
                break
            parts.append(part)
            got += len(part)
        return b"".join(parts)

    def readline(self, limit: int = -1) -> bytes:
        return self._guard(self._gz.readline, limit)


def gunzip_if_compressed(head: bytes, raw: BinaryIO) -> GzipInput | None:
    """A :class:`GzipInput` over *head* + *raw* when *head* starts a gzip stream, else None."""
    return GzipInput(head, raw) if head[:2] == GZIP_MAGIC else None
