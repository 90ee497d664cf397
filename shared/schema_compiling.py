"""JSON Schemas from tenants and tool servers compiled off the event loop, on one bounded thread.

Checking a schema's bounds and compiling it (shared/schema_validator.py) takes up to a few tens of
milliseconds of Python for a schema at its bounds (one whose ``$ref``s double at each level walks
MAX_SCHEMA_NODES subschemas before it is refused). On the loop that serves every tenant, a tenant
sending such schemas four at a time would hold everybody else's requests that long. Here they wait
on one thread of their own instead: the loop takes its turn back at every switch of the interpreter
(``sys.getswitchinterval()``, 5 ms), so another tenant's request waits for a few of those at most,
not for the attacker's whole queue.

``await compile_all(schemas)`` returns once each is in the validator's cache (compiled, or its
refusal kept), so that the synchronous ``compiled(schema)`` that follows answers from the cache. A
schema already cached costs its hash and nothing else, and a run with no schema does not touch the
thread at all. At most MAX_PENDING calls wait for the thread in one process; past that,
SchemaQueueFullError (the API answers 429).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from agentmill_client.models import RunInput
from shared.schema_validator import SchemaBoundError, compiled, is_cached

__all__ = ["MAX_PENDING", "SchemaQueueFullError", "compile_all", "run_schemas"]

MAX_PENDING = 64  # calls waiting for the thread, all tenants together

_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="schema-compile")
_lock = threading.Lock()
_pending = 0  # jobs given to the thread and not done (a caller cancelled meanwhile still counts)


class SchemaQueueFullError(Exception):
    """MAX_PENDING calls already wait for schemas to be compiled in this process."""


def run_schemas(run: RunInput) -> list[tuple[str, Any]]:
    """The JSON Schemas a run brings, with the field each is in (clientTools' parameters, its
    responseFormat's schema)."""
    schemas: list[tuple[str, Any]] = [
        (f"clientTools.{i}.parameters", t.parameters) for i, t in enumerate(run.client_tools or ())
    ]
    if run.response_format is not None and run.response_format.json_schema is not None:
        schemas.append(("responseFormat.jsonSchema.schema", run.response_format.json_schema.schema_))
    return schemas


def _compile(schemas: list[Any]) -> None:
    for schema in schemas:
        with contextlib.suppress(SchemaBoundError):  # the refusal is kept; the caller reads it there
            compiled(schema)


def _done(_: object) -> None:
    global _pending
    with _lock:
        _pending -= 1


async def compile_all(schemas: Iterable[Any]) -> None:
    """Each of ``schemas`` compiled (or refused) into the validator's cache, on the thread when any
    is not there yet; SchemaQueueFullError when MAX_PENDING jobs already wait for it."""
    global _pending
    todo = [s for s in schemas if not is_cached(s)]
    if not todo:
        return
    with _lock:
        if _pending >= MAX_PENDING:
            raise SchemaQueueFullError(f"{MAX_PENDING} schema compilations are waiting already")
        _pending += 1
    job = _pool.submit(_compile, todo)
    job.add_done_callback(_done)
    await asyncio.wrap_future(job)
