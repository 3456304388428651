"""pianode: a Trio implementation of Nintendo's Pia peer-to-peer protocol."""

from __future__ import annotations

__version__ = "0.1.0"
