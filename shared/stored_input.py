"""A run's input as its submit script stores it, made one way for every run that is created: a
submitted run (producer.prepared) and a sub-agent's child (shared.children) alike.

The input hash is that of the canonical form: the RunInput's wire form (camelCase, unset optionals
left out) with sorted keys, without its runId and agentVersion, its sessionId the id the session's
keys use. The stored input is that form with the runId's key appended, then the agentVersion it is
pinned to (ids match agentmill_client.ids.ID_PATTERN: nothing to escape). So a resubmission of the
same input is the same run whatever id its client gave it, and whichever agent version is current.

``read_input`` reads a stored input back (the worker, as it starts the run): the producer validated
it before storing it, so the usual shape (plain fields, messages of text) is built as it stands, not
validated again; any other is validated in full.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, cast

import orjson

from agentmill_client.codec import to_jsonable
from agentmill_client.models import Message, RunInput
from shared.model_copies import built

__all__ = ["StoredInput", "read_input", "stored_input"]


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


# A stored input's keys whose JSON value is the field's validated value as it stands, with the JSON
# type it has there (int: not a bool; a list: of strings). Any other key (a model, an enum, a list
# of models, a null) has the input validated in full, and so has any key not named here: a field
# added later is validated until it is named.
_NAME_OF = {f.alias or n: n for n, f in RunInput.model_fields.items()}
_PLAIN: dict[str, tuple[str, type]] = {
    k: (_NAME_OF[k], kind)
    for kind, keys in (
        (str, ("sessionId", "runId", "agent", "systemPromptOverride", "webhook", "lane")),
        (int, ("agentVersion", "compactThreshold", "priority", "runAt", "deadline")),
        (bool, ("autoCreateSession", "includeMessages", "storeContent")),
        (dict, ("runtimeInitData", "runtimeHints", "metadata")),
        (list, ("allowedTools", "toolOrder")),
    )
    for k in keys
}
# An input message of text: its keys, each with its field's name and its JSON type.
_MESSAGE_NAME_OF = {f.alias or n: n for n, f in Message.model_fields.items()}
_MESSAGE_KEYS = {
    k: (_MESSAGE_NAME_OF[k], kind)
    for k, kind in (("role", str), ("content", str), ("name", str), ("createdAt", int))
}
_ROLES = frozenset(("system", "user", "assistant"))


def _message(raw: Any) -> Message | None:
    """An input message of text built as it stands; None: another shape (validated in full)."""
    if type(raw) is not dict or type(raw.get("role")) is not str or raw["role"] not in _ROLES:
        return None
    fields = {}
    for k, v in raw.items():
        named = _MESSAGE_KEYS.get(k)
        if named is None or type(v) is not named[1]:
            return None
        fields[named[0]] = v
    built_message: Message = built(Message, **fields)
    return built_message


def read_input(body: bytes | str) -> RunInput:
    """The RunInput of a stored input (``stored_input``'s body): equal to
    ``RunInput.model_validate_json(body)``, its set fields the same, for the input the producer
    stored. An input of the usual shape is built as it stands: validating it again cost a quarter of a
    one-step run's start in the worker."""
    try:
        data: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        data = None
    fields: dict[str, Any] = {}
    if type(data) is dict and type(msgs := data.get("inputMessages")) is list and msgs:
        for k, v in data.items():
            if k == "inputMessages":
                messages = [m for raw in v if (m := _message(raw)) is not None]
                if len(messages) != len(v):
                    break
                fields["input_messages"] = messages
                continue
            plain = _PLAIN.get(k)
            if plain is None or type(v) is not plain[1]:
                break
            if plain[1] is list and not all(type(x) is str for x in cast(list[Any], v)):
                break
            fields[plain[0]] = v
        else:
            built_input: RunInput = built(RunInput, **fields)
            return built_input
    return RunInput.model_validate_json(body)
