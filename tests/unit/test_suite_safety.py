"""The suite's own configuration: what must hold for the tests to be trustworthy on Python 3.11."""

from __future__ import annotations

import ast
import gc
import warnings


class _Leaky:
    """Freed only by the cyclic collector; its finalizer warns, as an unclosed socket does."""

    def __init__(self) -> None:
        self.me = self

    def __del__(self) -> None:
        warnings.warn("unclosed thing", ResourceWarning, stacklevel=1)


def test_garbage_collected_during_ast_parse_does_not_break_it() -> None:
    # With pytest's unraisableexception plugin installed this fails on CPython 3.11.7 with
    # "AST constructor recursion depth mismatch"; pyproject's addopts leave it out.
    source = open(ast.__file__).read()  # noqa: SIM115 - read once, closed by the GC below
    threshold = gc.get_threshold()
    gc.set_threshold(50)
    try:
        for _ in range(30):
            for _ in range(20):
                _Leaky()
            ast.parse(source)
    finally:
        gc.set_threshold(*threshold)
        gc.collect()
