"""agentmill_client's one naming convention: every public model's attributes are snake_case and its
JSON camelCase (each field's alias); the camelCase attribute names still read, with a
DeprecationWarning naming the new one; and the JSON is byte for byte what it was.

tests/data/wire/dumps.json was written by the models as they were before the API's answers took
snake_case attributes: for each sample, the JSON it came from and its two dumps by alias (without
and with the fields that are None). A change there is a change of the wire."""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic.alias_generators import to_camel

import agentmill_client
from agentmill_client import RunView
from agentmill_client.api import BatchView
from agentmill_client.base import WireModel, camel_names
from agentmill_client.codec import encode
from agentmill_client.outputs import RunResult, Usage
from agentmill_client.schedules import ScheduleInput
from agentmill_client.usage import UsageTotals

SNAKE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*_?")
# Wire names that are not the field's camelCase: Python keywords and OpenAI's own spelling.
OWN_WIRE_NAMES = {("RetryBody", "from_"): "from", ("UsageAnswer", "from_"): "from",
                  ("JsonSchemaFormat", "schema_"): "schema", ("ImagePart", "image_url"): "image_url"}  # fmt: skip
DUMPS = json.loads((Path(__file__).parents[1] / "data" / "wire" / "dumps.json").read_text())


def public_models() -> dict[str, type[BaseModel]]:
    """Every model a public module of agentmill_client exports (its __all__)."""
    found: dict[str, type[BaseModel]] = {}
    for info in pkgutil.iter_modules(agentmill_client.__path__):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"agentmill_client.{info.name}")
        for name in getattr(module, "__all__", ()):
            value = getattr(module, name)
            if isinstance(value, type) and issubclass(value, BaseModel) and not name.startswith("_"):
                found[name] = value
    return found


def test_the_walk_finds_the_models() -> None:
    models = public_models()
    assert {"RunInput", "RunView", "RunResult", "Usage", "UsageTotals", "ScheduleView", "Message"} <= set(
        models
    )
    assert len(models) > 40


@pytest.mark.parametrize("name", sorted(public_models()))
def test_every_public_model_is_snake_case_in_python_and_camel_case_on_the_wire(name: str) -> None:
    cls = public_models()[name]
    assert issubclass(cls, WireModel), f"{name} does not take the clients' convention (base.WireModel)"
    for field, info in cls.model_fields.items():
        assert SNAKE.fullmatch(field), f"{name}.{field} is not snake_case"
        wire = OWN_WIRE_NAMES.get((name, field), to_camel(field))
        assert (info.serialization_alias or info.alias or field) == wire, (
            f"{name}.{field} is not {wire} on the wire"
        )


@pytest.mark.parametrize("name", sorted(DUMPS))
def test_the_wire_is_byte_for_byte_what_it_was(name: str) -> None:
    cls = public_models()[name]
    model = cls.model_validate(DUMPS[name]["wire"])
    without_none, full = DUMPS[name]["dumps"]
    assert encode(model).decode() == without_none
    assert model.model_dump_json(by_alias=True, exclude_none=True) == without_none
    assert model.model_dump_json(by_alias=True) == full
    assert cls.model_validate_json(full) == model  # and it reads back


def _view() -> RunView:
    return RunView.model_validate(DUMPS["RunView"]["wire"])


def test_a_camel_case_attribute_reads_with_a_warning_naming_the_new_one() -> None:
    view = _view()
    with pytest.warns(DeprecationWarning, match=r"^RunView\.runId is deprecated: read \.run_id"):
        assert view.runId == view.run_id == "run_1"  # type: ignore[attr-defined]
    with pytest.warns(
        DeprecationWarning,
        match=r"RunResult\.finalAssistantMessage is deprecated: read \.final_assistant_message",
    ):
        assert view.result is not None
        assert view.result.finalAssistantMessage is view.result.final_assistant_message  # type: ignore[attr-defined]
    batch = BatchView.model_validate(DUMPS["BatchView"]["wire"])
    with pytest.warns(DeprecationWarning, match=r"BatchUsage\.costUsd is deprecated: read \.cost_usd"):
        assert batch.usage.costUsd == 0.25  # type: ignore[attr-defined]


def test_the_warning_points_at_the_caller() -> None:
    with pytest.warns(DeprecationWarning) as seen:
        _view().lastSeq  # type: ignore[attr-defined]  # noqa: B018
    assert seen[0].filename == __file__


def test_both_spellings_construct_the_same_model_without_a_warning() -> None:
    assert Usage(inputTokens=3, costUsd=0.5) == Usage(input_tokens=3, cost_usd=0.5)  # type: ignore[call-arg]
    assert UsageTotals(costUsd=1.5).cost_usd == 1.5
    assert ScheduleInput(scheduleId="s", cron="* * * * *", input={}) == ScheduleInput(  # type: ignore[call-arg]
        schedule_id="s", cron="* * * * *", input={}
    )


def test_other_names_are_still_attribute_errors() -> None:
    view: Any = _view()
    with pytest.raises(AttributeError, match="nope"):
        view.nope  # noqa: B018
    assert not hasattr(view, "RunId") and hasattr(view, "run_id")
    assert RunResult.model_validate(DUMPS["RunView"]["wire"]["result"]).run_id == "run_1"


def test_every_camel_case_name_maps_to_a_field() -> None:
    for name, cls in public_models().items():
        for old, new in camel_names(cls).items():
            assert old == to_camel(new) != new and new in cls.model_fields, (name, old, new)
