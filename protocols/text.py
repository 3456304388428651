"""Text heard from the network, made safe to show: one line, nothing a terminal acts on.

Theory of operation: a name, a reason or a comment a peer chose reaches logs and
tables; :func:`printable` escapes every character a terminal would act on rather
than show, so such text cannot move the cursor, colour the screen, start a line
that looks like one of ours, or reorder what follows; :func:`one_line` also
bounds its length.
"""

from __future__ import annotations

__all__ = ["one_line", "printable"]

#: Characters a terminal acts on rather than shows (C0 and C1 controls, line and paragraph separators,
#: bidirectional overrides and isolates), each shown escaped instead; and lone surrogates (a byte of a
#: file name or an argument that is no UTF-8, as Python reads it), which no UTF-8 stream can write.
_UNPRINTABLE = {
    c: f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"
    for c in [*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029, 0x200E, 0x200F, *range(0x202A, 0x202F), *range(0x2066, 0x206A),
              *range(0xD800, 0xE000)]
}


def printable(text: str) -> str:
    """*text* with the characters of :data:`_UNPRINTABLE` escaped (``\\x1b``, ``\\u202e``)."""
    return text.translate(_UNPRINTABLE)


def one_line(text: str, limit: int = 200) -> str:
    """:func:`printable` *text*, cut to *limit* characters (marked with an ellipsis) when longer."""
    shown = printable(text)
    return shown if len(shown) <= limit else shown[: limit - 1] + "…"
