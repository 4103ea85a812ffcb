"""Docstring sections written once and shared by several public operators.

A docstring line holding only ``%(name)s`` is replaced by the section
``name``, indented as that line was (the convention of SciPy's ``doccer``
and MNE's ``fill_doc``); ``%%`` stands for a literal percent sign.
"""

from __future__ import annotations

import re
import textwrap
from typing import Any, Callable, TypeVar

__all__ = ["fill_doc"]

F = TypeVar("F", bound=Callable[..., Any])

_PLACEHOLDER = re.compile(r"^([ \t]*)%\((\w+)\)s[ \t]*$", re.MULTILINE)


def fill_doc(**sections: str) -> Callable[[F], F]:
    """Decorator: fill the ``%(name)s`` lines of a function's docstring from ``sections``."""

    def fill(fn: F) -> F:
        def section(match: re.Match[str]) -> str:
            return textwrap.indent(textwrap.dedent(sections[match.group(2)]).strip("\n"), match.group(1))

        fn.__doc__ = _PLACEHOLDER.sub(section, fn.__doc__).replace("%%", "%")
        return fn

    return fill
