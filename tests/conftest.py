from __future__ import annotations

import pathlib

import pytest

SHARED = pathlib.Path(__file__).resolve().parents[1].parent / "shared"
CAPTURES = SHARED / "captures"
DATA = pathlib.Path(__file__).resolve().parent / "data"


@pytest.fixture
def captures() -> pathlib.Path:
    """The shared real-traffic fixtures (../shared/captures from the checkout)."""
    if not CAPTURES.is_dir():
        pytest.fail(f"shared captures not found at {CAPTURES}: CI clones the repo beside ../shared")
    return CAPTURES

