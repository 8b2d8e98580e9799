"""``python -m streaming.cli``: the same command line as ``python -m streaming``."""

import sys

from . import main

sys.exit(main())
