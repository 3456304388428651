"""The project's error family.

Every decoder in :mod:`protocols` raises only :class:`DecodeError` (or one of its
subclasses) for bad input; any other exception escaping a decoder is a bug.
:class:`EncodeError` is raised when a caller asks an encoder for something the
wire format cannot express (our own misuse, not the peer's).
"""

from __future__ import annotations

__all__ = [
    "AuthenticationError",
    "BadMagic",
    "BadValue",
    "ConfigError",
    "DecodeError",
    "EncodeError",
    "ShortData",
    "TrailingData",
    "UnknownVersion",
    "UnsupportedVersion",
]


class DecodeError(ValueError):
    """Bytes from the network (or a file) could not be turned into a value."""


class ShortData(DecodeError):
    """The input ended before the structure being read was complete."""


class TrailingData(DecodeError):
    """Bytes were left over after a structure that must be consumed exactly."""


class BadMagic(DecodeError):
    """The input does not start with the expected magic number."""


class BadValue(DecodeError):
    """A field holds a value the format does not allow."""


class UnsupportedVersion(DecodeError):
    """The input uses a protocol version or format this codec does not handle."""


class AuthenticationError(DecodeError):
    """A tag, MAC or checksum did not verify: wrong key, or tampered bytes."""


class EncodeError(ValueError):
    """A value cannot be expressed in the requested wire format."""


class ConfigError(ValueError):
    """A setting (version, network type, key, address) is invalid."""


class UnknownVersion(ConfigError):
    """A Pia version that no documented profile describes.

    The message names the nearest documented versions; pass
    ``allow_nearest=True`` to :func:`protocols.pia.versions.profile_for` to use
    the nearest one instead.
    """
