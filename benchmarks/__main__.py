"""``python -m benchmarks``: the whole suite (see :mod:`benchmarks.suite`)."""

import sys

from .suite import main

sys.exit(main())
