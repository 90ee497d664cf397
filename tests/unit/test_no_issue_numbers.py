"""Code and user documents speak of the product, not of how it was built: no tracker numbers ("issue
23", "#30") and no bare design-document numbers ("seed 003"). A design document is named by what it is
(e.g. "the design documents' ``calledLlmAt``"); the design note (docs/design/) and the measurement
history (bench/HISTORY.md) are for developers and keep their references."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CODE_DIRS = ("shared", "producer", "worker", "app", "bench", "tests", "clients", "k8s", "bin")
CODE_SUFFIXES = {".py", ".lua", ".sh", ".yaml", ".yml", ".toml", ".md", ""}
KEPT = {ROOT / "bench" / "HISTORY.md", Path(__file__).resolve()}
KEPT_DIRS = (ROOT / "docs" / "design",)

PROCESS = re.compile(
    r"\bissues? #?\d+"  # issue 23, issue #24, issues #27 …
    r"|(?<![\w&/])#\d{1,3}\b(?![\w-])"  # #30 (not &#39;, not an anchor or colour)
    r"|\bseeds? \d{3}\b",  # seed 003
    re.IGNORECASE,
)


def checked_files() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for d in CODE_DIRS:
        for p in sorted((ROOT / d).rglob("*")):
            if p.is_file() and p.suffix in CODE_SUFFIXES and "__pycache__" not in p.parts:
                files.append(p)
    return [p for p in files if p not in KEPT and not any(p.is_relative_to(k) for k in KEPT_DIRS)]


def findings(text: str) -> list[str]:
    return [m.group(0) for m in PROCESS.finditer(text)]


def test_the_pattern_catches_process_references_and_spares_the_rest() -> None:
    caught = "issue 23; (issue #24, finding 7); issues #27 and #26; the default since #30; seed 003"
    assert findings(caught) == ["issue 23", "issue #24", "issues #27", "#26", "#30", "seed 003"]
    spared = "a run's #1 page; &#39; color: #303030; docs/api.md#tool-call-ids; 12 seeds; step #1-a"
    assert findings(spared) == ["#1"]  # a bare number after # reads as a tracker's: say it otherwise


def test_no_code_or_user_document_names_an_issue_or_a_seed_by_number() -> None:
    found: list[str] = []
    for path in checked_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            found += [f"{path.relative_to(ROOT)}:{n}: {hit}" for hit in findings(line)]
    assert not found, "process references (name what they are instead):\n" + "\n".join(found)
