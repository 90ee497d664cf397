"""``python -m bench.profile_report PROFILE.json``: what a ``bench --profile`` sample file says.

Prints the worker's timeline (share of busy samples per 50 ms, ``.`` idle: waiting on Redis or on
the model) and where the busy samples went, each charged to the nearest frame of agentmill's own
code (library time counts for the agentmill function that called it)."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = str(Path(__file__).resolve().parent.parent) + "/"
IDLE = "Runner.run"  # py-spy's top frame while the event loop sleeps in epoll
NOT_OURS = ("shared/loop.py", "bench/")


def _own(frame: dict[str, Any]) -> bool:
    path = frame.get("file", "")
    return path.startswith(ROOT) and not path[len(ROOT) :].startswith(NOT_OURS) and "/.venv/" not in path


def report(path: Path, window: tuple[int, int] | None, top: int) -> str:
    data = json.loads(path.read_text())
    frames = data["shared"]["frames"]
    samples = max(data["profiles"], key=lambda p: len(p["samples"]))["samples"]
    busy = [frames[s[-1]]["name"] != IDLE for s in samples]
    lines = ["busy % per 50 ms:"]
    cells = [
        f"{100 * sum(busy[i : i + 50]) // max(1, len(busy[i : i + 50])):3d}" for i in range(0, len(busy), 50)
    ]
    lines += [" ".join(cells[i : i + 20]) for i in range(0, len(cells), 20)]
    lo, hi = window or (0, len(samples))
    where: Counter[str] = Counter()
    n = 0
    for stack, b in zip(samples[lo:hi], busy[lo:hi], strict=True):
        if not b:
            continue
        n += 1
        own = next((frames[i] for i in reversed(stack) if _own(frames[i])), None)
        where[
            f"{own['name']} ({own['file'][len(ROOT) :]})" if own else f"(outside) {frames[stack[-1]]['name']}"
        ] += 1
    lines.append(f"\nsamples {lo}-{hi}: {n} busy; by agentmill function (self and the libraries it called):")
    lines += [f"{100 * c / max(1, n):5.1f}%  {k}" for k, c in where.most_common(top)]
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("profile", type=Path)
    ap.add_argument("--window", help="sample range FROM:TO (one sample per ms), e.g. the run phases")
    ap.add_argument("--top", type=int, default=30)
    a = ap.parse_args()
    window = tuple(int(x) for x in a.window.split(":")) if a.window else None
    print(report(a.profile, window, a.top))  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
