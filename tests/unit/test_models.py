"""The contracts refuse bad input with an error that names the field, never a crash."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from agentmill_client import limits
from agentmill_client.codec import encode
from agentmill_client.models import RunInput

USER = [{"role": "user", "content": "hi"}]


def _error_fields(exc: ValidationError) -> set[str]:
    return {".".join(str(p) for p in e["loc"]) for e in exc.errors()}


def test_camel_case_round_trip() -> None:
    run = RunInput.model_validate(
        {"inputMessages": USER, "loopLimits": {"maxIterations": 3}, "toolPolicy": {"maxParallel": 2}}
    )
    assert run.loop_limits is not None and run.loop_limits.max_iterations == 3
    wire = json.loads(encode(run))
    assert wire["loopLimits"] == {"maxIterations": 3} and wire["toolPolicy"] == {"maxParallel": 2}
    assert RunInput.model_validate_json(encode(run)) == run


def test_unknown_field_is_named() -> None:
    with pytest.raises(ValidationError) as info:
        RunInput.model_validate({"inputMessages": USER, "loopLimit": {}})
    assert "loopLimit" in _error_fields(info.value)


def test_oversized_map_is_refused() -> None:
    big = {"blob": "x" * (limits.MAX_MAP_BYTES + 1)}
    with pytest.raises(ValidationError) as info:
        RunInput.model_validate({"inputMessages": USER, "metadata": big})
    assert "metadata" in _error_fields(info.value)
    assert "larger than" in str(info.value)


@pytest.mark.parametrize(
    "value",
    [
        10**30,  # past orjson's 64-bit integers (schemathesis found this as an HTTP 500)
        json.loads('"lone \\ud800 surrogate"'),
    ],
)
def test_map_that_cannot_be_stored_is_a_validation_error(value: object) -> None:
    with pytest.raises(ValidationError) as info:
        RunInput.model_validate({"inputMessages": USER, "runtimeInitData": {"v": value}})
    assert "runtimeInitData" in _error_fields(info.value)
    assert "cannot be stored as JSON" in str(info.value)


def test_input_messages_may_not_carry_tool_traffic() -> None:
    with pytest.raises(ValidationError):
        RunInput.model_validate({"inputMessages": [{"role": "tool", "toolCallId": "c1", "content": "x"}]})
    with pytest.raises(ValidationError):
        RunInput.model_validate({"inputMessages": []})


@pytest.mark.parametrize("url", ["http://127.0.0.1:99999/hook", "https://", "http://:80/x"])
def test_an_unusable_webhook_url_is_refused(url: str) -> None:
    with pytest.raises(ValidationError) as info:
        RunInput.model_validate({"inputMessages": USER, "webhook": url})
    assert "webhook" in _error_fields(info.value)


def test_a_webhook_url_with_a_port_is_fine() -> None:
    run = RunInput.model_validate({"inputMessages": USER, "webhook": "https://hooks.example:8443/done"})
    assert run.webhook == "https://hooks.example:8443/done"
