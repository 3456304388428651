"""The library API of pianode 0.1 at its first address: the code lives in :mod:`pianode.mesh.node`."""

from pianode.mesh.node import *  # noqa: F401,F403
from pianode.mesh.node import __all__  # noqa: F401
