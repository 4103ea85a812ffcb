"""Point warnings at the caller's line, however deep inside rankops they are raised."""

from __future__ import annotations

import os
import sys

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def caller_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside the rankops package (as seen from ``warnings.warn``'s caller)."""
    level = 1
    frame = sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_PACKAGE + os.sep):
        frame = frame.f_back
        level += 1
    return level
