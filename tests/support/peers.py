"""Third-party peers and network namespaces that a test needs but the machine may lack."""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def peer_unavailable(message: str) -> NoReturn:
    """A third-party peer or a namespace cannot run here: a loud skip on a developer's machine,
    a failure where the run must prove interop (``PIANODE_REQUIRE_INTEROP=1``, set by .ci/run, or ``CI=true``)."""
    if os.environ.get("PIANODE_REQUIRE_INTEROP") == "1" or os.environ.get("CI") == "true":
        pytest.fail(f"{message} (this run requires it: PIANODE_REQUIRE_INTEROP=1 or CI=true)", pytrace=False)
    pytest.skip(message)
