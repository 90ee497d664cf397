"""The README, docs/**/*.md and bench/HISTORY.md hold together: every relative link reaches an existing file and, for a
`#anchor`, an existing heading of it; and the README keeps the two commands at its top."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")), ROOT / "bench" / "HISTORY.md"]

LINK = re.compile(r"\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def prose(text: str) -> list[str]:
    """The lines of a Markdown text outside fenced code blocks."""
    out: list[str] = []
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            out.append(line)
    return out


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    text = re.sub(r"[`*_]|\[|\]\([^)]*\)", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in prose(path.read_text()):
        out.update(re.findall(r'<a id="([^"]+)"></a>', line))  # an explicit anchor, as GitHub keeps it
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            base = slug(m.group(1))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    found: list[str] = []
    for line in prose(path.read_text()):
        found += [
            target
            for target in LINK.findall(line)
            if not re.match(r"[a-z][a-z0-9+.-]*:", target)  # http:, https:, mailto: …
        ]
    return found


def test_the_documents_are_found() -> None:
    names = {p.name for p in DOCS}
    assert {"README.md", "api.md", "operations.md", "architecture.md", "performance.md"} <= names


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(doc: Path) -> None:
    broken: list[str] = []
    for target in links(doc):
        file_part, _, anchor = target.partition("#")
        dest = (doc.parent / file_part).resolve() if file_part else doc
        if not dest.exists():
            broken.append(f"{target}: no file {dest}")
        elif anchor and (dest.suffix != ".md" or anchor not in anchors(dest)):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{doc.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_checker_catches_a_broken_anchor_and_file(tmp_path: Path) -> None:
    (tmp_path / "a.md").write_text("# Top\n\n## Deploy: here\n\n```sh\n# not a heading\n```\n")
    assert anchors(tmp_path / "a.md") == {"top", "deploy-here"}
    (tmp_path / "b.md").write_text(
        "[ok](a.md#deploy-here) [bad](a.md#not-a-heading) [gone](c.md) [web](https://x.y/#z)\n"
    )
    assert links(tmp_path / "b.md") == ["a.md#deploy-here", "a.md#not-a-heading", "c.md"]
    assert "not-a-heading" not in anchors(tmp_path / "a.md")
    assert not (tmp_path / "c.md").exists()


def test_the_readme_keeps_the_two_commands_at_its_top() -> None:
    lines = prose((ROOT / "README.md").read_text())
    sections = [line for line in lines if line.startswith("## ")]
    assert sections[0] == "## The two commands"
    text = (ROOT / "README.md").read_text()
    top = text[: text.index(sections[1])]
    for command in ("bin/dev demo", "bin/dev test"):
        assert re.search(rf"^{re.escape(command)}\b", top, re.M), f"README's top lacks `{command}`"
