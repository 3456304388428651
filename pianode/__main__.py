from __future__ import annotations

import sys

from pianode.cli.main import main

sys.exit(main())
