"""runtimeInitData reaches the run: template variables in the system prompt, values in every tool's context."""

from __future__ import annotations

from typing import Any

import pytest

from agentmill_client.models import RunInput, ToolCall
from shared.profiles import AgentProfile
from worker.core import preamble
from worker.core.config import resolve_config
from worker.core.prompt import render
from worker.tools.base import ToolContext
from worker.tools.builtin import FunctionTool
from worker.tools.registry import ProfileTools

B = {"runId": "r1", "sessionId": "", "agent": "a"}


@pytest.mark.parametrize(
    ("template", "out"),
    [
        ("Hi {{name}}.", "Hi Ada."),
        ("{{ user.lang }}/{{user.tz}}", "fr/{{user.tz}}"),  # an unknown path stays as written
        ("n={{n}} tags={{tags}} obj={{user}}", 'n=3 tags=["x","y"] obj={"lang":"fr"}'),
        ("run {{runId}} of {{agent}}", "run r1 of a"),
        ("{{runId}}", "r1"),  # built-ins win over runtimeInitData
        ("{not a var} {{}} {{ 1bad }}", "{not a var} {{}} {{ 1bad }}"),
    ],
)
def test_template_variables(template: str, out: str) -> None:
    data = {"name": "Ada", "user": {"lang": "fr"}, "n": 3, "tags": ["x", "y"], "runId": "spoofed"}
    assert render(template, data, B) == out


def test_the_resolved_config_carries_the_prompt_and_the_data() -> None:
    profile = AgentProfile(name="p", system_prompt="You help {{customer.name}} (run {{runId}}).")
    run = RunInput.model_validate(
        {"runId": "run-7", "inputMessages": [{"role": "user", "content": "x"}],
         "runtimeInitData": {"customer": {"name": "ACME"}}}
    )  # fmt: skip
    cfg = resolve_config(profile, run, {}, has_session=False)
    assert cfg.system_prompt.startswith(
        preamble.with_preamble(preamble.PREAMBLE_V1, "You help ACME (run run-7).")
    )
    assert cfg.runtime_init_data == {"customer": {"name": "ACME"}}


async def test_every_tool_sees_the_values_in_its_context() -> None:
    seen: list[dict[str, Any]] = []

    def probe(args: dict[str, Any], ctx: ToolContext) -> str:
        seen.append(dict(ctx.init_data))
        return "ok"

    tools = ProfileTools(AgentProfile(name="p"))
    tools.tools["probe"] = FunctionTool("probe", "", {"type": "object"}, probe)
    ctx = ToolContext("r", None, "c", "r:c", 1, {"tenant": "t1"})
    res = await tools.execute(ToolCall(id="c", name="probe"), ctx)
    assert not res.is_error and seen == [{"tenant": "t1"}]
