"""Capture timestamps kept exact: integer nanoseconds from pcap and pcapng, and their decimal text.

Theory of operation: a float of seconds since 1970 holds only about 240 ns at today's dates, so a frame's time
goes from the file to the output as an integer of nanoseconds.  A pcap record's fraction is microseconds or
nanoseconds by the file's magic (:data:`PCAP_MAGICS`); a pcapng interface's unit is 10^-v or 2^-v seconds
(``if_tsresol``), kept as an exact fraction of nanoseconds (:func:`pcapng_if_options`), and a unit finer than a
nanosecond is cut to whole nanoseconds, as Wireshark's frame times are.  :func:`time_text` writes nanoseconds as
the decimal seconds they are, the text tshark's ``frame.time_epoch`` gives less its trailing zeros; a JSON Lines
record's ``"time"`` is read into the same integer (:func:`record_time`, from a decimal number of every digit given).

Formats: pcap — draft-ietf-opsawg-pcap (its magic numbers); pcapng — draft-ietf-opsawg-pcapng (the interface
description block's ``if_tsresol`` and ``if_tsoffset`` options).
"""

from __future__ import annotations

import datetime
import decimal
import math
import struct

__all__ = ["PCAP_MAGICS", "pcapng_if_options", "record_time", "time_text"]

#: A pcap file's magic: (byte order, nanoseconds per unit of a record's second fraction).
PCAP_MAGICS = {
    b"\xd4\xc3\xb2\xa1": ("<", 1000),
    b"\xa1\xb2\xc3\xd4": (">", 1000),
    b"\x4d\x3c\xb2\xa1": ("<", 1),
    b"\xa1\xb2\x3c\x4d": (">", 1),
}


def pcapng_if_options(opts: bytes, order: str) -> tuple[int, int, int]:
    """Timestamp resolution (nanoseconds per unit, as numerator and denominator) and offset (nanoseconds)
    from IDB options."""
    num, den, offset, pos = 1000, 1, 0, 0  # microseconds unless if_tsresol says
    while pos + 4 <= len(opts):
        code, length = struct.unpack(order + "HH", opts[pos : pos + 4])
        value = opts[pos + 4 : pos + 4 + length]
        if code == 0 or len(value) < length:
            break  # the end of the options, or one cut short by its block: the rest is not read
        if code == 9 and length >= 1:  # if_tsresol: 10^-v, or 2^-v with the top bit set
            v = value[0]
            if v & 0x80:
                num, den = 1_000_000_000, 2 ** (v & 0x7F)
            elif v <= 9:
                num, den = 10 ** (9 - v), 1
            else:
                num, den = 1, 10 ** (v - 9)
        elif code == 14 and length == 8:  # if_tsoffset, seconds
            offset = struct.unpack(order + "q", value)[0] * 1_000_000_000
        pos += 4 + length + (-length % 4)
    return num, den, offset


def time_text(ns: int) -> str:
    """Nanoseconds as exact JSON seconds: the decimals the value needs (``1.5``, ``1.123456789``), ``.0`` for a whole
    second, the text a float's ``repr`` gives wherever the float is exact to those decimals."""
    if ns < 0:
        return "-" + time_text(-ns)
    sec, frac = divmod(ns, 1_000_000_000)
    return f"{sec}.{frac:09d}".rstrip("0") if frac else f"{sec}.0"


def record_time(value: object) -> tuple[float | None, int | None]:
    """Seconds (the nearest float, and exact integer nanoseconds) from a number, a numeric string or an ISO 8601
    time (UTC when no zone is given); numbers come as :class:`~decimal.Decimal` (every digit the line gave)."""
    if isinstance(value, bool) or value is None:
        return None, None
    if isinstance(value, str):
        text = value.strip()
        try:
            value = decimal.Decimal(text)
        except decimal.InvalidOperation:
            return _iso_time(text)
    if not isinstance(value, (int, decimal.Decimal)):
        return None, None
    try:
        number = float(value)  # beyond a float's range: no usable time (and no integer of a billion digits)
    except (OverflowError, ValueError):  # ValueError: a signalling NaN ("sNaN")
        return None, None
    if not math.isfinite(number):
        return None, None
    if isinstance(value, int):
        ns = value * 1_000_000_000
    else:
        ns = int((value * 1_000_000_000).to_integral_value(decimal.ROUND_FLOOR))
    return ns / 1_000_000_000, ns  # below a nanosecond: cut, as Wireshark's frame times are


def _iso_time(text: str) -> tuple[float | None, int | None]:
    try:
        when = datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
        if when.tzinfo is None:
            when = when.replace(tzinfo=datetime.timezone.utc)
        since = when - datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
    except (ValueError, OverflowError, OSError):
        return None, None
    ns = (since.days * 86_400 + since.seconds) * 1_000_000_000 + since.microseconds * 1000
    return ns / 1_000_000_000, ns
