"""``python -m dispatch.fn FOLDER [--array]``: run a submitted call on this node (bootstrap.py)."""

import sys

from dispatch.fn.bootstrap import main

sys.exit(main(sys.argv))
