"""Every route of the API has its scope in producer/api/scopes.py (and the table names no route
the app lacks), so a new route cannot be forgotten; the routes that take a bearer token need one."""

from __future__ import annotations

import inspect

from app.api import create_app
from producer.api.scopes import ROUTE_SCOPES, app_routes, scope_of
from producer.api.sse import reader_of
from producer.api.state import caller_of
from shared.api_keys import Scope
from shared.settings import Settings


def _routes() -> dict[tuple[str, str], object]:
    app = create_app(Settings(auth_disabled=True))
    out = {}
    for route in app.routes:
        inner = route.original_router.routes if hasattr(route, "original_router") else [route]
        for r in inner:
            for m in set(getattr(r, "methods", None) or ()) - {"HEAD"}:
                out[(m, r.path)] = r
    return out


def _authenticated(route: object) -> bool:
    """Does the route's endpoint take the caller (directly or through a dependency)?"""
    dependant = getattr(route, "dependant", None)
    if dependant is None:
        return False
    calls = set()
    stack = [dependant]
    while stack:
        d = stack.pop()
        calls.add(d.call)
        stack.extend(d.dependencies)
    return bool(calls & {caller_of, reader_of})


def test_every_route_has_a_scope_and_the_table_no_other() -> None:
    routes = _routes()
    assert set(app_routes(create_app(Settings(auth_disabled=True)))) == set(routes)
    assert sorted(set(routes) - set(ROUTE_SCOPES)) == [], "add the new route to ROUTE_SCOPES"
    assert sorted(set(ROUTE_SCOPES) - set(routes)) == [], "ROUTE_SCOPES names a route the app lacks"


def test_the_routes_taking_a_token_need_a_scope_and_the_others_none() -> None:
    for (method, path), route in _routes().items():
        wanted = ROUTE_SCOPES[(method, path)]
        assert _authenticated(route) == (wanted is not None), (method, path, wanted)


def test_control_and_admin_routes() -> None:
    assert scope_of("POST", "/v1/runs") is Scope.SUBMIT
    assert scope_of("POST", "/v1/runs/{run_id}/abort") is Scope.CONTROL
    assert scope_of("POST", "/v1/keys") is Scope.ADMIN
    assert scope_of("HEAD", "/v1/runs") is Scope.READ
    assert scope_of("PATCH", "/v1/never") is Scope.OPERATOR  # unknown: closed
    # nothing writes the audit log but the actions it records
    assert [k for k in ROUTE_SCOPES if k[1] == "/v1/audit"] == [("GET", "/v1/audit")]


def test_the_endpoints_are_coroutines() -> None:
    for route in _routes().values():
        endpoint = getattr(route, "endpoint", None)
        assert endpoint is not None and inspect.iscoroutinefunction(endpoint)
