"""How a run becomes an arq job: JSON job payloads that both Python and Lua can write.

arq is configured with an orjson serializer (worker/process/jobs.py), so the job a script enqueues is the
same bytes ``ArqRedis.enqueue_job`` would have written.
"""

from __future__ import annotations

from typing import Any

import orjson

from shared import clock

__all__ = ["JOB_EXPIRE_MS", "JOB_TEMPLATE", "RUN_FUNCTION", "deserialize", "job_payload", "serialize"]

RUN_FUNCTION = "run_agent"
JOB_EXPIRE_MS = (
    86_400_000  # arq's default: a job not started within a day expires (the reconciler re-enqueues)
)


def serialize(value: Any) -> bytes:
    return orjson.dumps(value, default=repr)


def deserialize(data: bytes) -> Any:
    return orjson.loads(data)


def job_payload(run_id: str, gen: int, now_ms: int | None = None) -> bytes:
    et = clock.now_ms() if now_ms is None else now_ms
    return serialize({"t": None, "f": RUN_FUNCTION, "a": [run_id, gen], "k": {}, "et": et})


def _template() -> tuple[str, str, str, str]:
    """``job_payload``'s bytes in four pieces around the run id, the dispatch number and the
    enqueue time, so a script writes the same JSON (run ids need no escaping: agentmill_client.ids)."""
    marks = ("RUNID\x00", 7_000_000_001, 7_000_000_002)
    text = serialize(
        {"t": None, "f": RUN_FUNCTION, "a": [marks[0], marks[1]], "k": {}, "et": marks[2]}
    ).decode()
    a, rest = text.split(orjson.dumps(marks[0]).decode()[1:-1])
    b, rest = rest.split(str(marks[1]))
    c, d = rest.split(str(marks[2]))
    return a, b, c, d


JOB_TEMPLATE = _template()
