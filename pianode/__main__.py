from __future__ import annotations

import sys

from pianode.cli import main

sys.exit(main())
