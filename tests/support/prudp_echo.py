"""The PRUDP echo service for tests: the one `pianode prudp serve` runs (pianode.prudp.echo)."""

from __future__ import annotations

from pianode.prudp.echo import echo, serve_echo

__all__ = ["echo", "serve_echo"]
