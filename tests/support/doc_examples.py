"""The examples of a Markdown document that a reader would paste: its fenced shell and Python blocks.

Every ```sh, ```bash, ```shell, ```console, ```python and ```py block is an example and runs
(tests/integration/test_doc_examples.py); any other info string (```text for output, ```json,
```yaml, none) is not one. A block that cannot run where the tests run (it deploys, builds an
image, starts the long-lived pool) is marked on the line right before its fence, invisibly on
GitHub, with the reason:

    <!-- example: skip — applies manifests to a Kubernetes cluster -->

A mark without a reason, or one that is not right before an example, is an error: a reader of the
Markdown source must see why a block is not checked.

``script`` lays a document's examples of one language out as one program whose line numbers are
the document's, so a failure names the line of the document; the blocks run in the document's
order and share their variables, as they would pasted one after another into one shell or one
Python session. A ```console block contributes its ``$ `` lines only (the rest is output).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["DOCUMENTS", "LANGUAGES", "ROOT", "DocExampleError", "Example", "examples", "script"]

ROOT = Path(__file__).resolve().parents[2]
# The documents whose examples run: the READMEs and every page of docs/ (operations.md's are mostly
# deployments, marked skipped).
DOCUMENTS = [
    ROOT / "README.md",
    ROOT / "clients" / "python" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
]

LANGUAGES = {"sh": "sh", "bash": "sh", "shell": "sh", "console": "sh", "python": "python", "py": "python"}

FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`\s]*)")
MARK = re.compile(r"^\s*<!--\s*example:\s*(?P<what>\S+)\s*(?:[—–:-]+\s*)?(?P<why>.*?)\s*-->\s*$")


class DocExampleError(ValueError):
    """A document's marks do not say plainly which examples run."""


@dataclass(frozen=True)
class Example:
    line: int  # the 1-based line of the opening fence
    info: str  # the fence's info string as written (``console``, ``py`` …)
    code: str  # the commands: the block's lines without the fence's indentation
    skip: str | None = None  # why it does not run, when marked

    @property
    def language(self) -> str:
        return LANGUAGES[self.info]

    def lines(self) -> list[str]:
        """The block's lines as they run, one for each line of the block (output lines of a
        console block are blank, so the numbering stays the document's)."""
        if self.info != "console":
            return self.code.split("\n")
        return [ln[2:] if ln.startswith("$ ") else "" for ln in self.code.split("\n")]


def examples(text: str, where: str = "<markdown>") -> list[Example]:
    """The examples of a Markdown text, marked or not, in order. ``where`` names it in errors."""
    found: list[Example] = []
    lines = text.split("\n")
    mark: tuple[int, str] | None = None  # (line, reason) of a mark waiting for its block
    i = 0
    while i < len(lines):
        line = lines[i]
        if m := MARK.match(line):
            if m["what"] != "skip":
                raise DocExampleError(f"{where}:{i + 1}: unknown mark 'example: {m['what']}' (only 'skip')")
            if not m["why"]:
                raise DocExampleError(f"{where}:{i + 1}: 'example: skip' without a reason")
            mark = (i + 1, m["why"])
            i += 1
            continue
        fence = FENCE.match(line)
        if fence is None:
            if mark is not None and line.strip():
                raise DocExampleError(
                    f"{where}:{mark[0]}: 'example: skip' is not right before a fenced block"
                )
            i += 1
            continue
        indent, ticks, info = fence["indent"], fence["fence"], fence["info"].lower()
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(ticks):
            body.append(lines[j][len(indent) :] if lines[j].startswith(indent) else lines[j].lstrip())
            j += 1
        if info in LANGUAGES:
            found.append(Example(i + 1, info, "\n".join(body), mark[1] if mark else None))
        elif mark is not None:
            raise DocExampleError(
                f"{where}:{mark[0]}: 'example: skip' marks a ```{info or '(no info string)'} block, "
                "which never runs: drop the mark"
            )
        mark = None
        i = j + 1
    if mark is not None:
        raise DocExampleError(f"{where}:{mark[0]}: 'example: skip' is not right before a fenced block")
    return found


def script(found: list[Example], language: str, prelude: str = "") -> str:
    """The examples of ``language`` that are not skipped, as one program in which each block's
    lines stand at their line of the document (``prelude`` on line 1, before the first block)."""
    out = [prelude]
    for ex in found:
        if ex.language != language or ex.skip is not None:
            continue
        first = ex.line + 1  # the block's first line in the document
        if len(out) >= first:
            raise DocExampleError(f"line {ex.line}: the prelude or an earlier block overlaps this block")
        out += [""] * (first - 1 - len(out))
        out += ex.lines()
    return "\n".join(out) + "\n"
