"""The web console at /ui: a few static files from the package (ui/), no build step.

The files hold no data and need no token; the page asks for the API token, keeps it in
sessionStorage and sends it as a bearer token on every API call, so the console can do exactly
what that token can. A strict Content-Security-Policy: scripts, styles and fetches from this
origin only, no inline script or style, no framing.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from fastapi import APIRouter, Response
from fastapi.responses import RedirectResponse

from agentmill_client.errors import ApiError

__all__ = ["CSP", "HEADERS", "TYPES", "UI_DIR", "asset"]

router = APIRouter(include_in_schema=False)
UI_DIR = Path(__file__).parent / "ui"
TYPES = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "app.css": "text/css; charset=utf-8",
    "favicon.svg": "image/svg+xml",
}
CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self'; "
    "base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-cache",
}


@lru_cache(maxsize=len(TYPES))
def _file(name: str) -> bytes:
    return (UI_DIR / name).read_bytes()


def _serve(name: str) -> Response:
    if name not in TYPES:
        raise ApiError(404, "not_found", f"no file {name} in the console")
    return Response(_file(name), media_type=TYPES[name], headers=HEADERS)


@router.get(
    "/", status_code=307, response_class=RedirectResponse, summary="Redirects to the web console (/ui/)"
)
async def root() -> RedirectResponse:
    """The API's address in a browser: the web console."""
    return RedirectResponse("/ui/", status_code=307)


@router.get("/ui")
@router.get("/ui/")
async def console() -> Response:
    return _serve("index.html")


@router.get("/ui/{name}")
async def asset(name: str) -> Response:
    return _serve(name)
