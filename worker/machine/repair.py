"""The final answer of a run with ``responseFormat``: it completes the run if it validates, else
a repair turn asks the model again with what was wrong, up to ``loopLimits.maxRepairs`` times, and
then the run fails ``invalid_output`` with the last answer kept. Tool-calling turns never get here.
"""

from __future__ import annotations

import orjson

from agentmill_client.models import Message, ResponseFormat, RunError, RunStatus
from worker.core import policy
from worker.machine.commands import Command, Decision
from worker.machine.state import RunState
from worker.machine.steps import error_event, finish, next_model_call, status_event, up

__all__ = ["REPAIR_PROMPT", "final_answer", "repair_prompt"]

REPAIR_PROMPT = (
    "Your answer is not valid: it must be {what}. What is wrong:\n{problems}\n"
    "Answer again with only the corrected JSON, no other text."
)


def repair_prompt(fmt: ResponseFormat, problems: list[str]) -> str:
    if fmt.json_schema is None:
        what = "a JSON object"
    else:
        schema = orjson.dumps(fmt.json_schema.schema_).decode()
        what = f"JSON that validates against the JSON Schema {fmt.json_schema.name!r}: {schema}"
    return REPAIR_PROMPT.format(what=what, problems="\n".join(f"- {p}" for p in problems))


def final_answer(s: RunState, msg: Message, now_ms: int, cmds: list[Command]) -> Decision:
    """An answer without tool calls: the run completes, or (responseFormat) is repaired or fails."""
    fmt = s.cfg.response_format
    if fmt is None:
        return finish(s, RunStatus.COMPLETED, cmds, final=msg)
    value, problems = policy.check_output(fmt, msg.text)
    if not problems:
        return finish(up(s, output=value), RunStatus.COMPLETED, cmds, final=msg)
    limit = s.cfg.max_repairs
    if s.repairs >= limit:
        err = RunError(
            code="invalid_output",
            message=f"the answer does not match responseFormat after {s.repairs} repairs: "
            + "; ".join(problems),
        )
        return finish(s, RunStatus.FAILED, cmds, final=msg, error=err)
    repair = s.repairs + 1
    s = up(
        s,
        repairs=repair,
        transcript=[*s.transcript, Message(role="user", content=repair_prompt(fmt, problems))],
    )
    cmds = [
        *cmds,
        error_event("model", "invalid_output", "; ".join(problems), retryable=True,
                    modelCallIndex=s.model_call_index, repair=repair, maxRepairs=limit, problems=problems),
        status_event("repairing", repair=repair, maxRepairs=limit, modelCallIndex=s.model_call_index),
    ]  # fmt: skip
    return next_model_call(s, now_ms, cmds)
