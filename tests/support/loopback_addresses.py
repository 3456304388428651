"""Addresses on loopback for tests that open real sockets: a free UDP port and a random 127.a.b.0/24 block.

Theory of operation: the whole 127.0.0.0/8 block is loopback on Linux, so a
test that puts its nodes in a randomly chosen ``127.a.b.`` prefix and its
browse responder on a port the kernel just handed out does not meet another
test's session, even with tests running side by side.  Traffic never leaves
loopback (the project's rule for tests).
"""

from __future__ import annotations

import random
import socket


def free_port() -> int:
    """A UDP port that was free a moment ago on every address (bound to 0.0.0.0 and released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("0.0.0.0", 0))
        return int(s.getsockname()[1])


def loopback_block() -> str:
    """A random 127.a.b. prefix for one test's nodes."""
    return f"127.{random.randrange(100, 250)}.{random.randrange(1, 250)}."
