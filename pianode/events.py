"""The library API of pianode 0.1 at its first address: the code lives in :mod:`pianode.mesh.events`."""

from pianode.mesh.events import *  # noqa: F401,F403
from pianode.mesh.events import __all__  # noqa: F401
