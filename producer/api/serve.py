"""How the API is served: uvicorn with a deadline on slow request headers.

uvicorn bounds an idle keep-alive connection but not one that trickles its request headers byte
by byte (each byte restarts nothing and nothing times it out), so a few hundred such connections
would hold the process. The protocol below closes a connection whose request headers are not
complete ``header_timeout_s`` after it opened or after its previous response; the body has its
own deadline in the app (producer/api/middleware.py, BodyLimit).

On SIGTERM or Ctrl-C uvicorn stops accepting and waits for the open requests to end: ``ApiServer``
first sets the app's ``closing`` event, which ends the SSE streams and long-polls at once
(producer/api/streams.py, ``unless_closing``), so the process exits promptly. Whoever serves the
API builds its server with ``api_server``: a plain ``uvicorn.Server`` never sets ``closing``, and its
shutdown (a signal or ``should_exit``) waits for every open stream's run to end.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from shared.settings import Settings

__all__ = ["ApiServer", "HeaderDeadlineProtocol", "api_server", "server_config"]

log = logging.getLogger("agentmill.api")


class HeaderDeadlineProtocol(H11Protocol):
    header_timeout_s: float = 10.0

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm_header_deadline()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._arm_header_deadline()

    def connection_lost(self, exc: Exception | None) -> None:
        handle = getattr(self, "_header_deadline", None)
        if handle is not None:
            handle.cancel()
        super().connection_lost(exc)

    def _arm_header_deadline(self) -> None:
        handle = getattr(self, "_header_deadline", None)
        if handle is not None:
            handle.cancel()
        self._header_deadline = self.loop.call_later(self.header_timeout_s, self._headers_overdue)

    def _headers_overdue(self) -> None:
        waiting = self.cycle is None or self.cycle.response_complete  # no request under way
        if waiting and not self.transport.is_closing():
            self.transport.close()


def server_config(app: Any, settings: Settings, **kw: Any) -> uvicorn.Config:
    """uvicorn's Config for the API app with the header deadline of ``settings``."""
    protocol = type(
        "HeaderDeadlineProtocol", (HeaderDeadlineProtocol,), {"header_timeout_s": settings.header_timeout_s}
    )
    return uvicorn.Config(app, http=protocol, **kw)


class ApiServer(uvicorn.Server):
    """uvicorn's Server that tells the app's streams to end before it waits for them, and logs
    where it listens once it does."""

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        bound = [s.getsockname() for server in getattr(self, "servers", []) for s in server.sockets]
        if self.started and bound:
            host, port = bound[0][0], bound[0][1]
            shown = f"[{host}]" if ":" in host else host
            log.info("agentmill api listening on http://%s:%d", shown, port)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        closing = getattr(getattr(self.config.app, "state", None), "closing", None)
        if isinstance(closing, asyncio.Event):
            closing.set()  # on the loop, after the signal: the streams end, uvicorn stops waiting
        await super().shutdown(sockets)


def api_server(app: Any, settings: Settings, **kw: Any) -> ApiServer:
    """The API's server as `agentmill api` runs it: ``ApiServer`` on ``server_config``."""
    return ApiServer(server_config(app, settings, **kw))
