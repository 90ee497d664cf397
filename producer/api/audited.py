"""Recording a route's control action in its tenant's audit log (producer/audit.py), with the
caller the route's dependencies authenticated (``request.state.caller``) and the request's id.
``await audited(api, request, Action.ABORT, run_id)`` after the action took effect."""

from __future__ import annotations

import logging

from fastapi import Request

from producer import audit
from producer.api.auth import Caller
from producer.api.state import Api
from producer.audit import Action, Actor
from shared import actors

__all__ = ["Action", "actor_of", "audit_command", "audited", "event_actor"]

log = logging.getLogger("agentmill.api")


def actor_of(request: Request) -> Actor:
    """The request's actor: its caller's key id and name (or token-file) and its request id."""
    rid: str | None = getattr(request.state, "request_id", None)
    if rid is None:
        rid = request.state.request_id = audit.request_id_of(request.headers.get("x-request-id"))
    caller: Caller = request.state.caller
    return Actor(caller.actor, caller.actor_name, rid)


def event_actor(request: Request) -> dict[str, str]:
    """The request's actor as the run's own control events name it (shared.actors): the audit
    entry's actor and actor name."""
    a = actor_of(request)
    return actors.actor(a.id, a.name)


def _tenant(request: Request) -> str:
    caller: Caller = request.state.caller
    return caller.tenant


async def audited(api: Api, request: Request, action: Action, target: str, detail: str = "") -> None:
    """Record ``action`` on ``target`` by the request's caller (one round trip). A failure to write
    is logged, not raised: the action it records has already taken effect."""
    try:
        await audit.record(
            api.parts,
            api.settings.audit_max_entries,
            _tenant(request),
            actor_of(request),
            action,
            target,
            detail,
            archived=api.producer.archive is not None,
        )
    except Exception as exc:
        log.error("audit: %s of %s by %s not recorded: %r", action, target, actor_of(request).id, exc)


def audit_command(api: Api, request: Request, action: Action) -> audit.Pending:
    """The XADD of ``action`` for a target known later (a submission's run id), to be sent in the
    action's own round trip (producer.submitter)."""
    tenant, actor, n = _tenant(request), actor_of(request), api.settings.audit_max_entries
    archived = api.producer.archive is not None
    return lambda target: audit.command(api.parts, n, tenant, actor, action, target, archived=archived)
