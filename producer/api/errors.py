"""One error shape for every API failure: ``{"error": {"code": "...", "message": "..."}}``, and
one mapping of each kind of failure to its HTTP answer, whichever route family meets it: an id the
caller's tenant has no such thing under (``not_found``: 404 ``unknown_<kind>``), input the caller got
wrong (SubmissionError, ListingError, request validation: 422 with ``field``; a cursor this API did
not return: 400 ``invalid_cursor``), Redis or the archive unreachable (503), stored data sealed with a data key no longer listed (500
``data_key_unavailable``)."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException

from agentmill_client.api import ErrorBody
from agentmill_client.errors import ApiError
from producer.run_filter import ListingError
from producer.submission import SubmissionError
from shared.archive.store import ArchiveUnavailableError
from shared.payload_crypto import DataKeyError

__all__ = [
    "COMMON_ERRORS",
    "HANDLERS",
    "NOT_FOUND",
    "ErrorResponse",
    "OrjsonResponse",
    "error_response",
    "not_found",
]


class OrjsonResponse(JSONResponse):
    """JSON rendered with orjson (FastAPI's own OrjsonResponse is deprecated)."""

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


class ErrorResponse(BaseModel):
    error: ErrorBody


def error_response(
    status: int, code: str, message: str, *, field: str | None = None, headers: dict[str, str] | None = None
) -> OrjsonResponse:
    body: dict[str, Any] = {"code": code, "message": message}
    if field:
        body["field"] = field
    return OrjsonResponse({"error": body}, status_code=status, headers=headers)


async def on_api_error(request: Request, exc: Exception) -> OrjsonResponse:
    assert isinstance(exc, ApiError)
    return error_response(exc.status, exc.code, exc.message, headers=exc.headers)


async def on_submission_error(request: Request, exc: Exception) -> OrjsonResponse:
    assert isinstance(exc, SubmissionError)
    headers = {"Retry-After": str(exc.retry_after_s)} if exc.retry_after_s else None
    return error_response(exc.status, exc.code, exc.message, field=exc.field, headers=headers)


async def on_listing_error(request: Request, exc: Exception) -> OrjsonResponse:
    assert isinstance(exc, ListingError)
    if exc.field == "cursor":
        return error_response(400, "invalid_cursor", str(exc), field=exc.field)
    return error_response(422, "invalid_input", str(exc), field=exc.field)


def not_found(kind: str, ident: str) -> ApiError:
    """The answer for an id the caller's tenant holds no ``kind`` (run, batch, schedule …) under."""
    return ApiError(404, f"unknown_{kind}", f"no {kind} {ident}")


async def on_validation_error(request: Request, exc: Exception) -> OrjsonResponse:
    assert isinstance(exc, RequestValidationError)
    parts, first = [], None
    for err in exc.errors()[:5]:
        loc = [str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path", "header")]
        where = ".".join(loc) or "body"
        first = first or where
        parts.append(f"{where}: {err.get('msg')}")
    return error_response(422, "invalid_input", "; ".join(parts) or "invalid request", field=first)


async def on_http_error(request: Request, exc: Exception) -> OrjsonResponse:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 400:  # FastAPI could not parse the body: documented, like any bad input, as 422
        return error_response(422, "invalid_input", f"body: {exc.detail}", field="body")
    code = {404: "not_found", 405: "method_not_allowed", 408: "request_timeout", 413: "too_large"}.get(
        exc.status_code, "http_error"
    )
    return error_response(exc.status_code, code, str(exc.detail))


async def on_redis_down(request: Request, exc: Exception) -> OrjsonResponse:
    return error_response(
        503, "redis_unavailable", "Redis is unreachable; try again shortly", headers={"Retry-After": "2"}
    )


async def on_archive_down(request: Request, exc: Exception) -> OrjsonResponse:
    return error_response(
        503, "archive_unavailable", "the archive (PostgreSQL) is unreachable; try again shortly",
        headers={"Retry-After": "2"},
    )  # fmt: skip


async def on_data_key(request: Request, exc: Exception) -> OrjsonResponse:
    """The data was sealed with a key AGENTMILL_DATA_KEYS no longer lists: the operator's to put back."""
    return error_response(500, "data_key_unavailable", f"the stored data cannot be read: {exc}")


HANDLERS: list[tuple[type[Exception], Any]] = [
    (DataKeyError, on_data_key),
    (ArchiveUnavailableError, on_archive_down),
    (ApiError, on_api_error),
    (SubmissionError, on_submission_error),
    (ListingError, on_listing_error),
    (RequestValidationError, on_validation_error),
    (StarletteHTTPException, on_http_error),
    (RedisConnectionError, on_redis_down),
    (RedisTimeoutError, on_redis_down),
    (ConnectionRefusedError, on_redis_down),
]

# Documented on every route that can fail this way.
COMMON_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {
        "model": ErrorResponse,
        "description": "missing or wrong bearer token (key_expired, key_revoked: a managed key)",
    },
    403: {"model": ErrorResponse, "description": "scope_required: the API key lacks the route's scope"},
    422: {"model": ErrorResponse, "description": "invalid input; `field` names the offending field"},
    503: {"model": ErrorResponse, "description": "Redis (or the archive, PostgreSQL) is unreachable"},
}
# Documented on every route that answers not_found.
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorResponse, "description": "no such id in the caller's tenant"}
}
