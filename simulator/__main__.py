"""``python -m simulator``: the same as ``dagchain-sim``."""

import sys

from simulator.cli import main

sys.exit(main())
