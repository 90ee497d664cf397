"""Structured output (responseFormat) through a real worker, Redis, the API and a local
OpenAI-compatible server: the parsed answer in ``result.output``, repair turns the model sees and a
tail sees, ``invalid_output`` after exactly ``maxRepairs`` repairs, and a 422 for a bad schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from agentmill_client.client import AsyncClient
from tests.integration.api_support import A, api, settings
from tests.integration.helpers import (
    assert_clean_stream,
    producer_for,
    run_with,
    running_worker,
    script_run,
    stream,
    wait_all,
)
from tests.support.fake_openai import FakeOpenAI, Reply
from worker.process.jobs import WorkerProcess

pytestmark = pytest.mark.integration

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "colour": {"type": "string", "enum": ["red", "green", "blue"]},
        "sure": {"type": "boolean"},
    },
    "required": ["colour", "sure"],
}
RF = {"type": "json_schema", "jsonSchema": {"name": "pick", "schema": SCHEMA, "strict": True}}
GOOD = {"colour": "green", "sure": True}


async def run(
    redis: Redis, redis_url: str, script: list[dict[str, Any]], **extra: Any
) -> tuple[Any, list[Any]]:
    p = producer_for(redis, redis_url)
    sub = await p.submit(script_run(script, **extra))
    rec = (await wait_all(p, [sub.run_id], 15))[sub.run_id]
    events = await stream(redis, sub.run_id)
    assert_clean_stream(events)
    return rec, events


async def test_a_valid_answer_completes_with_the_parsed_output(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    rec, events = await run(redis, redis_url, [{"json": GOOD}], responseFormat=RF)
    assert rec.status.value == "completed" and rec.result.output == GOOD
    assert orjson.loads(rec.result.final_assistant_message.content) == GOOD  # the text beside it
    assert not any(e.kind == "error" for e in events)


async def test_an_invalid_answer_is_repaired_and_the_model_is_told_what_was_wrong(
    redis: Redis, redis_url: str, worker: WorkerProcess
) -> None:
    # The second turn echoes what the model was given (a JSON object with "messages"), which a
    # schema requiring that key accepts: the run's output is then the model's own input.
    echo_schema = {"type": "object", "required": ["messages"]}
    rf = {"type": "json_schema", "jsonSchema": {"name": "echo", "schema": echo_schema}}
    rec, events = await run(
        redis, redis_url, [{"json": {"colour": 7}}, {"echoContext": True}], responseFormat=rf
    )
    assert rec.status.value == "completed", rec.result
    seen = rec.result.output["messages"]
    assert seen[-2] == {"role": "assistant", "content": '{"colour":7}'}
    assert seen[-1]["role"] == "user" and "(root): 'messages' is a required property" in seen[-1]["content"]
    errors = [e.payload for e in events if e.kind == "error"]
    assert [(x["scope"], x["code"], x["repair"]) for x in errors] == [("model", "invalid_output", 1)]
    assert [e.payload["repair"] for e in events if e.payload.get("status") == "repairing"] == [1]


@pytest.mark.parametrize("max_repairs", [None, 1])
async def test_always_invalid_fails_invalid_output_after_exactly_max_repairs(
    redis: Redis, redis_url: str, worker: WorkerProcess, max_repairs: int | None
) -> None:
    bad = {"json": {"colour": "purple", "sure": "yes"}}
    limits = {} if max_repairs is None else {"loopLimits": {"maxRepairs": max_repairs}}
    rec, events = await run(redis, redis_url, [bad] * 5, responseFormat=RF, **limits)
    expected = 2 if max_repairs is None else max_repairs  # the default is 2
    assert rec.status.value == "failed"
    err = rec.result.last_error
    assert err.code == "invalid_output" and f"after {expected} repairs" in err.message
    assert "colour: 'purple' is not one of ['red', 'green', 'blue']" in err.message
    assert "sure: 'yes' is not of type 'boolean'" in err.message
    assert orjson.loads(rec.result.final_assistant_message.content) == bad["json"]  # the raw answer kept
    assert rec.result.output is None and rec.result.iterations == expected + 1
    repairs = [e.payload["repair"] for e in events if e.kind == "error" and e.payload["scope"] == "model"]
    assert repairs == list(range(1, expected + 1))
    last = [e.payload for e in events if e.kind == "error"][-1]
    assert (last["scope"], last["code"]) == ("run", "invalid_output")


async def test_json_object_mode_refuses_non_json(redis: Redis, redis_url: str, worker: WorkerProcess) -> None:
    rf = {"type": "json_object"}
    rec, _ = await run(
        redis, redis_url, [{"text": "Here you go: green"}, {"json": {"a": 1}}], responseFormat=rf
    )
    assert rec.status.value == "completed" and rec.result.output == {"a": 1} and rec.result.iterations == 2
    rec, _ = await run(redis, redis_url, [{"text": "green"}] * 3, responseFormat=rf)
    assert rec.status.value == "failed" and rec.result.last_error.code == "invalid_output"
    assert "not JSON" in rec.result.last_error.message


async def test_the_api_refuses_a_schema_that_is_not_json_schema_naming_the_field(redis_url: str) -> None:
    bad = {"type": "json_schema", "jsonSchema": {"name": "x", "schema": {"type": "strin"}}}
    async with api(settings(redis_url)) as url, httpx.AsyncClient(base_url=url, headers=A) as http:
        for body in (
            script_run([], responseFormat=bad),
            script_run([], responseFormat={**bad, "jsonSchema": {"schema": {"enum": ["x" * 1000] * 40}}}),
        ):
            r = await http.post("/v1/runs", json=body)
            err = r.json()["error"]
            assert r.status_code == 422 and err["code"] == "invalid_input", r.text
            assert err["field"] == "responseFormat.jsonSchema.schema"
        r = await http.post("/v1/runs/batch", json={"runs": [script_run([], responseFormat=bad)]})
        assert (
            r.status_code == 200
            and r.json()["results"][0]["error"]["field"] == "runs.0.responseFormat.jsonSchema.schema"
        )


async def test_the_api_shows_the_output_of_a_completed_run(redis_url: str) -> None:
    async with (
        api(settings(redis_url)) as url,
        AsyncClient(url, token="tok-a") as c,
        running_worker(redis_url),
    ):
        run_id = (await c.submit(script_run([{"json": GOOD}], responseFormat=RF))).run_id
        view = await c.wait(run_id, timeout=15)
        assert view.status == "completed" and view.result is not None and view.result.output == GOOD


async def test_an_openai_compatible_server_gets_response_format_and_the_repair(
    redis: Redis, redis_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_OPENAI_KEY", "k")
    fake = FakeOpenAI(
        [Reply(text='{"colour": "teal", "sure": true}'), Reply(text=orjson.dumps(GOOD).decode())]
    )
    path = tmp_path / "profiles.json"
    path.write_bytes(orjson.dumps({"profiles": [{"name": "gpt", "tools": ["echo"], "provider": {
        "kind": "openai", "baseUrl": fake.base_url, "model": "fake-1", "apiKeyEnv": "FAKE_OPENAI_KEY"}}]}))  # fmt: skip
    async with fake:
        rec, _ = await run_with(
            redis,
            redis_url,
            path,
            {"inputMessages": [{"role": "user", "content": "pick"}], "responseFormat": RF},
        )
    assert rec.status.value == "completed" and rec.result.output == GOOD  # type: ignore[attr-defined]
    first, second = fake.requests
    want = {"type": "json_schema", "json_schema": {"name": "pick", "schema": SCHEMA, "strict": True}}
    assert first["response_format"] == want and second["response_format"] == want
    assert first["tools"]  # tool-calling turns are unaffected: tools are still offered
    repair = second["messages"][-1]
    assert repair["role"] == "user" and "colour: 'teal' is not one of" in repair["content"]
