"""Structured output (responseFormat) in the pure machine: the final answer is validated, an invalid
one gets repair turns (the next model input says what was wrong), then the run fails
``invalid_output`` with the last answer kept; tool-calling turns are not validated."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from agentmill_client.models import EventKind, ResponseFormat, RunInput
from agentmill_client.statuses import RunStatus
from tests.unit.machine_driver import T0, Driver, calling, calls_reply, config, go, result, text_reply
from worker import machine as m
from worker.core.config import narrow_limits
from worker.core.policy import check_output
from worker.models.openai import request_body

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "population": {"type": "integer", "minimum": 0}},
    "required": ["city", "population"],
    "additionalProperties": False,
}
FMT = ResponseFormat.model_validate(
    {"type": "json_schema", "jsonSchema": {"name": "city", "schema": SCHEMA, "strict": True}}
)
GOOD = '{"city": "Lyon", "population": 522000}'
BAD = '{"city": "Lyon", "population": "many"}'


def structured(**kw: Any) -> m.RunState:
    return calling(config(response_format=FMT, **kw))


def requests(cmds: list[m.Command]) -> list[m.ModelRequest]:
    return [c.request for c in cmds if isinstance(c, m.CallModel)]


def test_a_valid_answer_completes_with_the_parsed_output() -> None:
    s, cmds = go(structured(), m.ModelStreamOpened(T0), text_reply(GOOD))
    assert s.phase == RunStatus.COMPLETED
    fin = next(c for c in cmds if isinstance(c, m.Finish))
    assert fin.result.output == {"city": "Lyon", "population": 522000}
    assert (
        fin.result.final_assistant_message is not None and fin.result.final_assistant_message.content == GOOD
    )


def test_an_invalid_answer_is_repaired_the_next_input_names_the_errors() -> None:
    s, cmds = go(structured(), m.ModelStreamOpened(T0), text_reply(BAD))
    assert s.node == m.CALLING and s.repairs == 1
    (req,) = requests(cmds)
    last = req.messages[-1]
    assert last.role == "user" and "population: 'many' is not of type 'integer'" in last.content
    assert req.messages[-2].content == BAD  # the invalid answer stays in the conversation
    err = next(c.payload for c in cmds if isinstance(c, m.Emit) and c.kind == EventKind.ERROR)
    assert err["code"] == "invalid_output" and err["repair"] == 1 and err["maxRepairs"] == 2
    assert err["problems"] == ["population: 'many' is not of type 'integer'"]
    assert any(isinstance(c, m.Emit) and c.payload.get("status") == "repairing" for c in cmds)
    s, cmds = go(s, m.ModelStreamOpened(T0), text_reply(GOOD))
    assert s.phase == RunStatus.COMPLETED and s.output == {"city": "Lyon", "population": 522000}


@pytest.mark.parametrize("max_repairs", [0, 1, 2])
def test_always_invalid_fails_invalid_output_after_exactly_max_repairs(max_repairs: int) -> None:
    s = structured(max_repairs=max_repairs)
    calls = 0
    while not s.terminal:
        s, cmds = go(s, m.ModelStreamOpened(T0), text_reply("not json at all"))
        calls += 1
    assert calls == max_repairs + 1 and s.repairs == max_repairs
    assert s.phase == RunStatus.FAILED
    fin = next(c for c in cmds if isinstance(c, m.Finish))
    assert fin.result.last_error is not None and fin.result.last_error.code == "invalid_output"
    assert "not JSON" in fin.result.last_error.message
    assert fin.result.final_assistant_message is not None
    assert fin.result.final_assistant_message.content == "not json at all"  # the raw answer kept
    assert fin.result.output is None


def test_json_object_mode_refuses_non_json_and_non_objects() -> None:
    fmt = ResponseFormat(type="json_object")
    s, cmds = go(calling(config(response_format=fmt, max_repairs=1)), text_reply("Sure! Here it is."))
    assert s.repairs == 1 and "not JSON" in requests(cmds)[0].messages[-1].content
    s, _ = go(s, text_reply("[1, 2]"))
    assert s.phase == RunStatus.FAILED and s.last_error is not None
    assert "must be a JSON object" in s.last_error.message
    s, _ = go(calling(config(response_format=fmt)), text_reply('{"any": ["thing"]}'))
    assert s.phase == RunStatus.COMPLETED and s.output == {"any": ["thing"]}


def test_tool_calling_turns_are_not_validated_only_the_final_answer() -> None:
    s, cmds = go(structured(), calls_reply(("c1", "echo", "{}")))
    assert s.phase == m.Phase.TOOL_RUNNING and s.repairs == 0
    s, cmds = go(s, result("c1"))
    assert requests(cmds)[0].response_format == FMT  # every turn asks the provider for the format
    s, _ = go(s, text_reply(GOOD))
    assert s.phase == RunStatus.COMPLETED and s.repairs == 0


def test_without_response_format_any_text_completes() -> None:
    s, _ = go(calling(), text_reply("not json"))
    assert s.phase == RunStatus.COMPLETED and s.output is None


def test_an_answer_in_a_code_fence_is_accepted() -> None:
    value, problems = check_output(FMT, "```json\n" + GOOD + "\n```")
    assert problems == [] and value == {"city": "Lyon", "population": 522000}


def test_a_dangling_local_ref_is_a_problem_not_a_crash() -> None:
    fmt = ResponseFormat.model_validate(
        {"type": "json_schema", "jsonSchema": {"schema": {"$ref": "#/$defs/x"}}}
    )
    _, problems = check_output(fmt, "1")
    assert problems and "could not be applied" in problems[0]


def test_max_repairs_is_narrowed_by_the_profile_like_other_limits() -> None:
    from agentmill_client.models import LoopLimits

    def narrowed(profile: int | None, run: int | None) -> int | None:
        ll = narrow_limits(LoopLimits(max_repairs=profile), LoopLimits(max_repairs=run),
                           duration_default_ms=1, duration_max_ms=1)  # fmt: skip
        return ll.max_repairs

    assert narrowed(None, None) == 2  # the default
    assert narrowed(None, 5) == 2  # a run cannot widen the default
    assert narrowed(4, 5) == 4 and narrowed(4, 1) == 1 and narrowed(0, 3) == 0


def msg(**rf: Any) -> dict[str, Any]:
    return {"inputMessages": [{"role": "user", "content": "x"}], "responseFormat": rf}


@pytest.mark.parametrize(
    ("rf", "field", "says"),
    [
        ({"type": "json_schema", "jsonSchema": {"schema": {"$ref": "https://example.com/s.json"}}}, "responseFormat.jsonSchema.schema", "local $ref"),
        ({"type": "json_schema", "jsonSchema": {"schema": {"enum": ["x" * 1000] * 40}}}, "responseFormat.jsonSchema.schema", "larger than"),
        ({"type": "json_schema"}, "responseFormat", "needs jsonSchema"),
        ({"type": "json_object", "jsonSchema": {"schema": {}}}, "responseFormat", "only allowed"),
        ({"type": "yaml"}, "responseFormat.type", "json_schema"),
        ({"type": "json_schema", "jsonSchema": {"name": "has space", "schema": {}}}, "responseFormat.jsonSchema.name", "pattern"),
    ],
)  # fmt: skip
def test_bad_response_formats_are_refused_naming_the_field(rf: dict[str, Any], field: str, says: str) -> None:
    with pytest.raises(ValidationError) as exc:
        RunInput.model_validate(msg(**rf))
    err = exc.value.errors()[0]
    assert ".".join(str(p) for p in err["loc"]) == field and says in str(err["msg"])


def test_a_schema_that_is_not_json_schema_is_refused_at_submission_naming_the_field() -> None:
    # The model checks size and references only; the metaschema's check (milliseconds a subschema)
    # is the submission's, off the event loop (producer/schemas_ready.py), cached by the schema's hash.
    from producer.prepared import validated
    from producer.submission import SubmissionError

    bad = {"type": "json_schema", "jsonSchema": {"schema": {"type": 5}}}
    tool = {"name": "t", "parameters": {"type": 5}}
    for body, field in ((msg(**bad), "responseFormat.jsonSchema.schema"),
                        ({**msg(type="json_object"), "clientTools": [tool]}, "clientTools.0.parameters")):  # fmt: skip
        RunInput.model_validate(body)
        with pytest.raises(SubmissionError) as exc:
            validated(body, None)
        assert exc.value.code == "invalid_input" and exc.value.field == field
        assert "not a JSON Schema" in exc.value.message


def test_the_openai_request_carries_response_format_in_openais_shape() -> None:
    from shared.provider_config import ProviderConfig

    cfg = ProviderConfig.model_validate({"kind": "openai", "baseUrl": "http://x/v1", "model": "m"})
    _, cmds = go(
        m.initial_state("r"), m.Started(T0, config(response_format=FMT), []), m.ContextLoaded(T0, [])
    )
    body = request_body(cfg, requests(cmds)[0])
    assert body["response_format"] == {
        "type": "json_schema", "json_schema": {"name": "city", "schema": SCHEMA, "strict": True}
    }  # fmt: skip
    _, cmds = go(m.initial_state("r"), m.Started(T0, config(response_format=ResponseFormat(type="json_object")), []),
                 m.ContextLoaded(T0, []))  # fmt: skip
    assert request_body(cfg, requests(cmds)[0])["response_format"] == {"type": "json_object"}
    _, cmds = go(m.initial_state("r"), m.Started(T0, config(), []), m.ContextLoaded(T0, []))
    assert "response_format" not in request_body(cfg, requests(cmds)[0])


@pytest.mark.parametrize(
    ("style", "wire"),
    [
        ("json_object_schema", {"type": "json_object", "schema": SCHEMA}),  # llama-cpp-python's shape
        ("none", None),
    ],
)
def test_the_provider_can_send_the_other_shapes(style: str, wire: dict[str, Any] | None) -> None:
    from shared.provider_config import ProviderConfig

    cfg = ProviderConfig.model_validate(
        {"kind": "openai", "baseUrl": "http://x/v1", "model": "m", "responseFormatStyle": style}
    )
    _, cmds = go(
        m.initial_state("r"), m.Started(T0, config(response_format=FMT), []), m.ContextLoaded(T0, [])
    )
    assert request_body(cfg, requests(cmds)[0]).get("response_format") == wire


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.sampled_from(["text", "json", "calls", "retry", "fatal", "overflow", "partial", "cut"]),
        max_size=30,
    ),
    st.integers(1, 4),
    st.integers(0, 3),
    st.sampled_from(["fail", "answer"]),
)
def test_random_structured_runs_end_once_and_never_repair_beyond_the_limit(
    model: list[str], max_iter: int, max_repairs: int, on_limit: str
) -> None:
    cfg = config(max_iterations=max_iter, on_limit=on_limit, max_repairs=max_repairs,
                 response_format=ResponseFormat(type="json_object"))  # fmt: skip
    d = Driver(model, [])
    s = d.run(m.initial_state("r1").model_copy(update={"config": cfg}), 5000)
    assert s.terminal and d.terminal_emits == 1 and d.finishes == 1
    assert s.repairs <= max_repairs
    assert s.iterations <= max_iter + 1 + max_repairs  # a repair may follow the last call for the answer
    if s.phase == RunStatus.COMPLETED:
        assert s.output == {"ok": True} and m.result_of(s).output == {"ok": True}
    if s.last_error is not None and s.last_error.code == "invalid_output":
        assert s.repairs == max_repairs and s.final_message is not None


def test_local_refs_and_a_property_named_ref_are_accepted() -> None:
    schema = {
        "$defs": {"c": {"type": "string"}},
        "type": "object",
        "properties": {"$ref": {"$ref": "#/$defs/c"}},
    }
    fmt = RunInput.model_validate(msg(type="json_schema", jsonSchema={"schema": schema})).response_format
    assert fmt is not None and check_output(fmt, '{"$ref": "x"}') == ({"$ref": "x"}, [])
    assert check_output(fmt, '{"$ref": 1}')[1] == ["$ref: 1 is not of type 'string'"]
