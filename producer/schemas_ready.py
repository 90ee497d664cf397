"""A run's JSON Schemas compiled off the event loop before it is validated (shared/schema_compiling.py):
the validation that follows (producer/prepared.py) finds them in the cache, compiled or refused."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agentmill_client.models import RunInput
from producer.prepared import parsed
from producer.submission import SubmissionError
from shared.schema_compiling import SchemaQueueFullError, compile_all, run_schemas

__all__ = ["schemas_ready"]

BRINGING = frozenset(
    {"clientTools", "client_tools", "responseFormat", "response_format"}
)  # a schema's fields


async def schemas_ready(items: Iterable[RunInput | dict[str, Any]]) -> None:
    """The schemas of every item that parses as a RunInput compiled (or refused) into the cache;
    the items themselves are validated later, as before. 429 ``schemas_busy`` when too many wait
    for the thread already."""
    schemas = []
    for raw in items:
        if isinstance(raw, dict) and not raw.keys() & BRINGING:
            continue  # no schema to compile: not parsed twice
        try:
            run = parsed(raw)
        except SubmissionError:
            continue  # its validation says why
        schemas += [s for _, s in run_schemas(run)]
    if not schemas:
        return
    try:
        await compile_all(schemas)
    except SchemaQueueFullError as exc:
        raise SubmissionError("schemas_busy", f"{exc}; retry later", status=429, retry_after_s=1) from None
