"""The ``agentmill`` commands of the documents' skipped examples (the CLI's synopsis in docs/api.md,
the processes README.md starts by hand) still name commands and options the CLI has: those blocks
do not run, so this is what keeps them from rotting. The examples that run are checked by running
them (tests/integration/test_doc_examples.py)."""

from __future__ import annotations

import re

import click
import pytest

from app.cli.main import main
from tests.support.doc_examples import DOCUMENTS, ROOT, examples

FLAG = re.compile(r"^\[?(--[a-z][a-z0-9-]*)")


def skipped_command_lines() -> list[tuple[str, str]]:
    """(document:line, line) of every line of a skipped example that starts with ``agentmill ``."""
    out: list[tuple[str, str]] = []
    for doc in DOCUMENTS:
        for ex in examples(doc.read_text()):
            if ex.skip is None:
                continue
            for n, line in enumerate(ex.lines()):
                if line.startswith("agentmill "):
                    out.append((f"{doc.relative_to(ROOT)}:{ex.line + 1 + n}", line))
    return out


def resolve(group: click.Group, words: list[str]) -> tuple[click.Command, click.Group, list[str]]:
    """The command ``words`` name under ``group``, the group holding it, and the words after it."""
    cmd: click.Command = group
    parent = group
    while isinstance(cmd, click.Group) and words and words[0] in cmd.commands:
        parent, cmd, words = cmd, cmd.commands[words[0]], words[1:]
    return cmd, parent, words


def alternatives(text: str) -> list[str]:
    """``text`` split at its `` | `` outside brackets (``[--api URL | --tenant T]`` is one option)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += {"[": 1, "]": -1}.get(ch, 0)
        if depth == 0 and text.startswith(" | ", i):
            out.append(text[start:i])
            start = i + 3
    return [*out, text[start:]]


def problems(line: str) -> list[str]:
    """What a synopsis line names that the CLI does not have. ``a X | b Y`` lists alternatives:
    ``b`` is a command beside ``a`` (in the group that holds ``a``)."""
    found: list[str] = []
    text = line.split(" #", 1)[0]
    group: click.Group = main
    for i, segment in enumerate(alternatives(text)):
        words = segment.split()[1:] if i == 0 else segment.split()
        cmd, parent, rest = resolve(group, words)
        if isinstance(cmd, click.Group) and rest and all(w in _options(cmd) for w in rest):
            continue  # the group's own options (agentmill --version)
        if cmd is group or isinstance(cmd, click.Group):
            found.append(f"no command {' '.join(words[:2])!r}")
            continue
        if i == 0:
            group = parent
        options = _options(cmd)
        found += [
            f"{cmd.name}: no option {m[1]}" for w in rest if (m := FLAG.match(w)) and m[1] not in options
        ]
    return found


def _options(cmd: click.Command) -> set[str]:
    return {o for p in cmd.params for o in (*p.opts, *p.secondary_opts)} | {"--help"}


def test_the_documents_skipped_examples_hold_commands() -> None:
    lines = skipped_command_lines()
    assert any("docs/api.md" in where for where, _ in lines)  # the CLI's synopsis
    assert any(line.startswith("agentmill worker") for _, line in lines)


@pytest.mark.parametrize(("where", "line"), skipped_command_lines(), ids=lambda v: str(v)[:60])
def test_each_command_and_option_of_a_skipped_example_exists(where: str, line: str) -> None:
    assert not problems(line), f"{where}: {line}"


@pytest.mark.parametrize(
    ("line", "says"),
    [
        ("agentmill tail RUN_ID --since 3", "tail: no option --since"),
        ("agentmill batch status B | frobnicate B", "no command 'frobnicate B'"),
        ("agentmill retry R [--from-scratch] | fork R --at-seq N", "retry: no option --from-scratch"),
        ("agentmill nope", "no command 'nope'"),
        ("agentmill status R [--api URL | --tenants T] | abort R", "status: no option --tenants"),
    ],
)
def test_a_renamed_command_or_option_is_caught(line: str, says: str) -> None:
    assert says in problems(line)
