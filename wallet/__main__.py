"""``python -m wallet``: the same as ``dagchain-wallet``."""

import sys

from wallet.cli import main

sys.exit(main())
