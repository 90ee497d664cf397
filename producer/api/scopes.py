"""The scope each route of the API needs, declared once (shared.api_keys.Scope): a managed key
without it gets 403 ``scope_required``. ``None``: the route takes no bearer token (health, the
console's files, /metrics with its own token). tests/unit/test_route_scopes.py checks that every
route of the app is here and nothing else is, so a new route cannot be left out."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from shared.api_keys import Scope

__all__ = ["ROUTE_SCOPES", "app_routes", "scope_of"]

R, S, C, A = Scope.READ, Scope.SUBMIT, Scope.CONTROL, Scope.ADMIN

ROUTE_SCOPES: dict[tuple[str, str], Scope | None] = {
    # runs
    ("POST", "/v1/runs"): S,
    ("POST", "/v1/runs/batch"): S,
    ("GET", "/v1/runs"): R,
    ("GET", "/v1/runs/{run_id}"): R,
    ("GET", "/v1/runs/{run_id}/wait"): R,
    ("GET", "/v1/runs/{run_id}/events"): R,  # or a read token of that run (?token=)
    ("POST", "/v1/runs/{run_id}/token"): R,
    ("POST", "/v1/runs/{run_id}/tool-results"): S,
    ("POST", "/v1/runs/{run_id}/abort"): C,
    ("POST", "/v1/runs/{run_id}/approvals"): C,
    ("POST", "/v1/runs/{run_id}/retry"): C,
    ("POST", "/v1/runs/{run_id}/fork"): C,
    ("GET", "/v1/sessions/{session_id}"): R,
    # batches
    ("GET", "/v1/batches/{batch_id}"): R,
    ("GET", "/v1/batches/{batch_id}/runs"): R,
    ("GET", "/v1/batches/{batch_id}/results"): R,
    ("POST", "/v1/batches/{batch_id}/abort"): C,
    ("POST", "/v1/batches/{batch_id}/retry"): C,
    # schedules
    ("POST", "/v1/schedules"): S,
    ("GET", "/v1/schedules"): R,
    ("GET", "/v1/schedules/{schedule_id}"): R,
    ("DELETE", "/v1/schedules/{schedule_id}"): S,
    ("POST", "/v1/schedules/{schedule_id}/pause"): S,
    ("POST", "/v1/schedules/{schedule_id}/resume"): S,
    # the tenant and the pool
    ("GET", "/v1/usage"): R,
    ("GET", "/v1/pool"): R,
    ("GET", "/v1/me"): R,
    # governance
    ("POST", "/v1/keys"): A,
    ("GET", "/v1/keys"): A,
    ("DELETE", "/v1/keys/{key_id}"): A,
    ("GET", "/v1/audit"): A,
    # agents (profiles as data): read to see them, admin to change what runs
    ("POST", "/v1/agents"): A,
    ("GET", "/v1/agents"): R,
    ("GET", "/v1/agents/{name}"): R,
    ("GET", "/v1/agents/{name}/versions/{version}"): R,
    ("POST", "/v1/agents/{name}/current"): A,
    ("DELETE", "/v1/agents/{name}"): A,
    ("DELETE", "/v1/runs/{run_id}"): A,
    ("DELETE", "/v1/sessions/{session_id}"): A,
    ("POST", "/v1/deletions"): A,
    ("GET", "/v1/deletions/{deletion_id}"): A,
    # no bearer token
    ("GET", "/openapi.json"): None,
    ("GET", "/healthz"): None,
    ("GET", "/readyz"): None,
    ("GET", "/metrics"): None,  # AGENTMILL_METRICS_TOKEN
    ("GET", "/"): None,
    ("GET", "/ui"): None,
    ("GET", "/ui/"): None,
    ("GET", "/ui/{name}"): None,
}


def scope_of(method: str, path: str) -> Scope | None:
    """The scope a route needs; a route missing from the table needs ``operator`` (closed, not open)."""
    if method == "HEAD":
        method = "GET"
    return ROUTE_SCOPES.get((method, path), Scope.OPERATOR)


def app_routes(app: Any) -> Iterator[tuple[str, str]]:
    """(method, path) of every route the app serves (HEAD aside), its included routers' too."""
    for route in app.routes:
        inner = route.original_router.routes if hasattr(route, "original_router") else [route]
        for r in inner:
            for method in sorted(set(getattr(r, "methods", None) or ()) - {"HEAD"}):
                yield method, r.path
