"""``python -m streaming``."""

import sys

from .cli import main

sys.exit(main())
