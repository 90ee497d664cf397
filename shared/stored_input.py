"""A run's input as its submit script stores it, made one way for every run that is created: a
submitted run (producer.prepared) and a sub-agent's child (shared.children) alike.

The input hash is that of the canonical form: the RunInput's wire form (camelCase, unset optionals
left out) with sorted keys, without its runId and agentVersion, its sessionId the id the session's
keys use. The stored input is that form with the runId's key appended, then the agentVersion it is
pinned to (ids match agentmill_client.ids.ID_PATTERN: nothing to escape). So a resubmission of the
same input is the same run whatever id its client gave it, and whichever agent version is current.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import orjson

from agentmill_client.codec import to_jsonable
from agentmill_client.models import RunInput

__all__ = ["StoredInput", "stored_input"]


@dataclass(frozen=True, slots=True)
class StoredInput:
    """``body``: the input its run hash stores (RunField.INPUT); ``digest``: its input hash
    (RunField.INPUT_HASH); ``size``: the canonical form's bytes (what the size limit bounds)."""

    body: bytes
    digest: str
    size: int


def stored_input(run: RunInput, run_key: str, session_key: str = "") -> StoredInput:
    """``run`` as its run ``run_key`` (the id its keys use) stores it; ``session_key``: the id its
    session's keys use ('' = its sessionId as given, or none)."""
    body = to_jsonable(run)
    body.pop("runId", None)
    version = body.pop("agentVersion", None)
    if session_key:
        body["sessionId"] = session_key
    canonical = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    stored = b'%s,"runId":"%s"}' % (canonical[:-1], run_key.encode())
    if version is not None:
        stored = b'%s,"agentVersion":%d}' % (stored[:-1], version)
    return StoredInput(stored, hashlib.sha256(canonical).hexdigest(), len(canonical))
