"""A stored input read back (shared.stored_input.read_input) is the RunInput that validating it
makes: the same fields, the same set fields, the same types inside, whether it is of the usual
shape (built as it stands) or not (validated in full)."""

from __future__ import annotations

from typing import Any

import pytest

from agentmill_client.models import RunInput
from shared.stored_input import read_input, stored_input

MSG = {"role": "user", "content": "hello é"}

# Built as they stand: plain fields, messages of text.
USUAL: list[dict[str, Any]] = [
    {"inputMessages": [MSG]},
    {"agent": "scripted", "inputMessages": [MSG], "runtimeHints": {"script": [{"text": "hi"}]}},
    {
        "agent": "a",
        "sessionId": "s-1",
        "inputMessages": [{"role": "system", "content": "sys"}, MSG, {"role": "assistant", "content": "ok"}],
        "metadata": {"i": "1", "n": [1, 2.5, None]},
        "runtimeInitData": {"k": {"deep": True}},
        "allowedTools": ["echo", "calc"],
        "toolOrder": ["calc"],
        "includeMessages": True,
        "storeContent": False,
        "priority": 7,
        "compactThreshold": 8,
        "systemPromptOverride": "be brief",
        "webhook": "https://example.com/hook",
        "lane": "economy",
        "deadline": 1_900_000_000_000,
    },
    {
        "inputMessages": [{"role": "user", "content": "x", "name": "ann", "createdAt": 5}],
        "autoCreateSession": True,
    },
    {"inputMessages": [MSG], "runAt": 1_900_000_000_000},
]
# Validated in full: a nested model, an enum, a list of models, parts, a tool message's fields.
OTHERS: list[dict[str, Any]] = [
    {"inputMessages": [MSG], "loopLimits": {"maxIterations": 3}},
    {"inputMessages": [MSG], "multitaskStrategy": "reject", "sessionId": "s-2"},
    {"inputMessages": [MSG], "budget": {"maxTokens": 500}},
    {"inputMessages": [MSG], "clientTools": [{"name": "remote"}]},
    {"inputMessages": [{"role": "user", "content": [{"type": "text", "text": "parts"}]}]},
    {"inputMessages": [MSG], "concurrency": {"key": "k", "limit": 2}},
]


def _same(got: RunInput, want: RunInput) -> None:
    assert got == want
    assert got.__dict__ == want.__dict__ and list(got.__dict__) == list(want.__dict__)
    assert got.model_fields_set == want.model_fields_set
    for a, b in zip(got.input_messages, want.input_messages, strict=True):
        assert type(a) is type(b) and a.__dict__ == b.__dict__ and a.model_fields_set == b.model_fields_set
    assert got.model_dump_json(by_alias=True) == want.model_dump_json(by_alias=True)


@pytest.mark.parametrize("submitted", USUAL + OTHERS)
def test_a_stored_input_reads_back_as_validating_it_makes_it(submitted: dict[str, Any]) -> None:
    body = stored_input(RunInput.model_validate(submitted), "run-1").body
    _same(read_input(body), RunInput.model_validate_json(body))


@pytest.mark.parametrize("submitted", USUAL)
def test_the_usual_shape_is_not_validated_again(
    submitted: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    body = stored_input(RunInput.model_validate(submitted), "run-1").body
    want = RunInput.model_validate_json(body)

    def refused(*_: Any, **__: Any) -> RunInput:
        raise AssertionError("validated again")

    monkeypatch.setattr(RunInput, "model_validate_json", refused)
    _same(read_input(body), want)


@pytest.mark.parametrize("submitted", OTHERS)
def test_other_shapes_are_validated(submitted: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    body = stored_input(RunInput.model_validate(submitted), "run-1").body
    seen: list[bytes] = []
    validate = RunInput.model_validate_json

    def counted(data: bytes) -> RunInput:
        seen.append(data)
        return validate(data)

    monkeypatch.setattr(RunInput, "model_validate_json", counted)
    read_input(body)
    assert seen == [body]


@pytest.mark.parametrize(
    "body",
    [
        b'{"inputMessages":[{"role":"user","content":"x"}],"priority":"high"}',
        b'{"inputMessages":[{"role":"tool","content":"x"}]}',  # not an input message's role
        b'{"inputMessages":[],"agent":"a"}',
        b'{"inputMessages":[{"role":"user","content":"x"}],"agent":null}',
        b'{"inputMessages":[{"role":"user","content":"x"}],"allowedTools":[1]}',
        b'{"inputMessages":[{"role":"user","content":"x"}],"surprise":1}',
        b"not json",
    ],
)
def test_what_validation_refuses_is_refused(body: bytes) -> None:
    with pytest.raises(ValueError):
        read_input(body)
