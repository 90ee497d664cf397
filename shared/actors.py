"""Who acted on a run, as the run's own control events name it (``actor`` in an abort's status
event, an approval decision, a client's tool result, a retry's or fork's first status event): the
same actor the tenant's audit log names, as one JSON object

    {"kind": "key", "id": "<key id>", "name": "<its name>"}   a managed API key
    {"kind": "token-file", "id": "token-file", "name": ""}    a token of AGENTMILL_API_TOKENS
    {"kind": "cli", "id": "cli", "name": ""}                  the CLI straight to Redis
    {"kind": "auth-off", "id": "auth-off", "name": ""}        the API with authentication off
    {"kind": "system", "id": "system", "name": "parent"}      the pool itself, ``name`` saying what:
        parent (a parent run's ending aborts its children), quota (its tenant was disabled),
        schedule, session, deletion

``id`` is the audit entry's ``actor``, ``name`` its ``actorName``.

An abort request's run field (RunField.ABORT) holds its reason, or, with an actor, both as JSON
(``abort_field`` / ``abort_of``): the scripts that pass the field on read it as a flag only."""

from __future__ import annotations

from typing import Any

import orjson

__all__ = ["NAMED_KINDS", "abort_field", "abort_of", "actor", "actor_json", "system"]

NAMED_KINDS = frozenset({"token-file", "cli", "auth-off", "system"})


def actor(actor_id: str, name: str = "") -> dict[str, str]:
    """The actor the audit log names ``actor_id`` (and ``name``)."""
    kind = actor_id if actor_id in NAMED_KINDS else "key"
    return {"kind": kind, "id": actor_id, "name": name}


def system(what: str) -> dict[str, str]:
    """The pool itself acting: ``what`` says why (parent, quota, schedule, session, deletion)."""
    return actor("system", what)


def actor_json(a: dict[str, str] | None) -> str:
    """The actor as a script argument ('' = none)."""
    return orjson.dumps(a).decode() if a else ""


def abort_field(reason: str, a: dict[str, str] | None) -> str:
    """What RunField.ABORT holds for an abort request of ``reason`` by ``a``."""
    return orjson.dumps({"reason": reason, "actor": a}).decode() if a else reason


def abort_of(raw: str) -> tuple[str, dict[str, Any] | None]:
    """An abort request's reason and actor, from RunField.ABORT (a plain reason: no actor)."""
    if raw.startswith("{"):
        try:
            d = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return raw, None
        if isinstance(d, dict) and isinstance(d.get("reason"), str):
            got = d.get("actor")
            return d["reason"], got if isinstance(got, dict) else None
    return raw, None
