"""Reading callgrind's output: inclusive instructions by function. Standard library only, so a bench
script that measures another checkout (bench/redis_insn_per_step.py) can load it from beside itself
whatever that checkout's bench package holds."""

from __future__ import annotations

import re
import subprocess

__all__ = ["totals"]


def totals(path: str) -> dict[str, float]:
    """Inclusive instructions by function name (the first line of each) in the callgrind output
    file ``path``, from callgrind_annotate."""
    out = subprocess.run(
        ["callgrind_annotate", "--inclusive=yes", "--threshold=100", path], capture_output=True, text=True
    ).stdout
    got: dict[str, float] = {}
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?\S*:(\S+)", line)
        if m:
            got.setdefault(m.group(2), float(m.group(1).replace(",", "")))
    return got
