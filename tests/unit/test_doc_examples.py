"""The extractor of the documents' examples (tests/support/doc_examples.py): which blocks run, how
a block is marked skipped, and that a program of them keeps the document's line numbers."""

from __future__ import annotations

import pytest

from tests.support.doc_examples import DOCUMENTS, ROOT, DocExampleError, Example, examples, script

DOC = """# Title

```sh
echo one
```

<!-- example: skip — deploys to a cluster -->
```bash
kubectl apply -k k8s
```

```text
output, not a command
```

- a list item:

  ```python
  x = 1
  ```

```console
$ echo two
two
```

```json
{"not": "run"}
```
"""


def test_every_shell_and_python_block_is_an_example_and_a_mark_skips_one() -> None:
    found = examples(DOC)
    assert [(e.line, e.info, e.skip) for e in found] == [
        (3, "sh", None),
        (8, "bash", "deploys to a cluster"),
        (18, "python", None),
        (22, "console", None),
    ]
    assert found[2].code == "x = 1"  # the list item's indentation is not the code's


def test_a_new_unmarked_block_is_an_example_that_runs() -> None:
    """What makes the integration test fail on a broken example added without a mark: it is in the
    program, at its own line."""
    text = DOC + "\n```sh\nfalse  # broken\n```\n"
    program = script(examples(text), "sh", prelude="set -e")
    lines = program.split("\n")
    assert lines[0] == "set -e"
    assert lines[3] == "echo one"  # line 4 of the document
    assert lines[22] == "echo two"  # line 23: the console block's command; its output line is blank
    assert lines[23] == ""
    assert "kubectl" not in program
    assert lines[len(DOC.split("\n")) + 1] == "false  # broken"


def test_python_blocks_make_one_program_with_the_documents_line_numbers() -> None:
    program = script(examples(DOC), "python")
    assert program.split("\n")[18] == "x = 1"
    with pytest.raises(NameError) as caught:
        exec(compile(program + "y\n", "doc.md", "exec"), {})
    assert caught.traceback[-1].lineno + 1 == len(program.split("\n"))


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("<!-- example: skip -->\n```sh\nls\n```\n", "without a reason"),
        ("<!-- example: skip — why -->\n\nprose\n```sh\nls\n```\n", "not right before"),
        ("<!-- example: skip — why -->\n```text\nout\n```\n", "never runs"),
        ("<!-- example: maybe — why -->\n```sh\nls\n```\n", "unknown mark"),
        ("```sh\nls\n```\n<!-- example: skip — why -->\n", "not right before"),
    ],
)
def test_a_mark_that_does_not_say_plainly_what_is_skipped_is_an_error(text: str, says: str) -> None:
    with pytest.raises(DocExampleError, match=says):
        examples(text)


def test_the_documents_marks_are_well_formed_and_each_has_examples_that_run() -> None:
    for doc in DOCUMENTS:
        found = examples(doc.read_text(), str(doc.relative_to(ROOT)))
        assert all(isinstance(e, Example) for e in found)
    runs = {
        str(d.relative_to(ROOT)): [e for e in examples(d.read_text()) if e.skip is None] for d in DOCUMENTS
    }
    assert runs["README.md"] and runs["docs/api.md"] and runs["clients/python/README.md"]
