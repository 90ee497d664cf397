"""No source module over 400 lines: a module that grows past it is split along its seams, one
concept a module (shared/, producer/, worker/, app/, bench/ and the client package)."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DIRS = ("shared", "producer", "worker", "app", "bench", "clients")
MAX_LINES = 400


def _over(root: Path, dirs: tuple[str, ...] = DIRS) -> list[str]:
    found = []
    for d in dirs:
        for f in sorted((root / d).rglob("*.py")):
            n = len(f.read_text().splitlines())
            if n > MAX_LINES:
                found.append(f"{f.relative_to(root).as_posix()}: {n} lines")
    return found


def test_no_module_is_over_400_lines() -> None:
    modules = [f for d in DIRS for f in (ROOT / d).rglob("*.py")]
    assert len(modules) > 300 and all(any((ROOT / d).rglob("*.py")) for d in DIRS)
    assert _over(ROOT) == [], "split these along their seams:\n" + "\n".join(_over(ROOT))


def test_the_rule_sees_a_long_module(tmp_path: Path) -> None:
    pkg = tmp_path / "shared"
    pkg.mkdir()
    (pkg / "ok.py").write_text("x = 1\n" * MAX_LINES)
    assert _over(tmp_path, ("shared",)) == []
    (pkg / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    assert _over(tmp_path, ("shared",)) == [f"shared/long.py: {MAX_LINES + 1} lines"]
