"""The one error of the HTTP API, raised by its routes and by the Python client alike."""

from __future__ import annotations

__all__ = ["ApiError"]


class ApiError(Exception):
    """An error answer of the API: HTTP ``status``, a stable ``code``, a message, and the headers the
    API sends with it (Retry-After, WWW-Authenticate). The wire shape is
    ``{"error": {"code": …, "message": …}}``."""

    def __init__(
        self, status: int, code: str, message: str, *, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers
