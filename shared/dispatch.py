"""How a run becomes an arq job: JSON job payloads that both Python and Lua can write.

arq is configured with an orjson serializer (worker/jobs.py), so the job a script enqueues is the
same bytes ``ArqRedis.enqueue_job`` would have written.
"""

from __future__ import annotations

from typing import Any

import orjson

from shared import clock, keys

__all__ = ["JOB_EXPIRE_MS", "RUN_FUNCTION", "deserialize", "job_payload", "job_ref", "serialize"]

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


def job_ref(run_id: str, gen: int) -> tuple[str, str]:
    """(job id, job key) of dispatch number ``gen`` of a run."""
    jid = keys.job_id(run_id, gen)
    return jid, keys.arq_job_key(jid)
