"""docs/design/seeds-audit.md stays current: every file it names exists, and every test it names is a test
function of that file (a renamed module or a deleted test fails here, not in the next audit)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
AUDIT = ROOT / "docs" / "design" / "seeds-audit.md"
NAMED = re.compile(r"`((?:shared|worker|producer|clients|tests)/[\w/.\-]+\.(?:py|lua))(?:::(\w+))?`")


def rows() -> list[str]:
    return [line for line in AUDIT.read_text().splitlines() if re.match(r"\| \d+ \|", line)]


def test_the_audit_table_has_its_rows_with_a_test_each() -> None:
    table = rows()
    assert len(table) >= 33
    assert [int(line.split("|")[1]) for line in table] == list(range(1, len(table) + 1))
    for line in table:
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == 6, line
        assert re.match(r"(done|differs|open)\b", cells[3]), line
        assert NAMED.search(cells[5]), f"row {cells[0]} names no test"


def test_every_file_and_test_the_audit_names_exists() -> None:
    for line in rows():
        for path, test in NAMED.findall(line):
            file = ROOT / path
            assert file.is_file(), f"{path} (named in docs/design/seeds-audit.md) does not exist"
            if test:
                assert re.search(rf"^(async )?def {test}\(", file.read_text(), re.M), (
                    f"{path}::{test} is gone"
                )
