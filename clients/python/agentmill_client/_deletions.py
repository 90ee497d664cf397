"""The clients' deletion calls (``DELETE /v1/runs/{id}``, ``DELETE /v1/sessions/{id}``,
``/v1/deletions``), mixed into AsyncClient and Client."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentmill_client import _wire as wire
from agentmill_client.api import DeletionView, RunDeleted, SessionDeleted

if TYPE_CHECKING:
    import httpx

__all__ = ["AsyncDeletionCalls", "DeletionCalls"]


class AsyncDeletionCalls:
    http: httpx.AsyncClient

    async def delete_run(self, run_id: str) -> RunDeleted:
        """Delete a run and its sub-agents' runs, in Redis and the archive (a running run is aborted
        first); a run deleted before answers from its tombstone (``already_deleted``)."""
        return RunDeleted.model_validate(wire.check(await self.http.delete(f"/v1/runs/{run_id}")))

    async def delete_session(self, session_id: str) -> SessionDeleted:
        """Delete every run of a session, and the session."""
        return SessionDeleted.model_validate(wire.check(await self.http.delete(f"/v1/sessions/{session_id}")))

    async def create_deletion(self, metadata: dict[str, Any]) -> DeletionView:
        """Delete every run whose metadata has these values, in the background: its progress with
        ``get_deletion``."""
        return DeletionView.model_validate(
            wire.check(await self.http.post("/v1/deletions", json={"metadata": metadata}))
        )

    async def get_deletion(self, deletion_id: str) -> DeletionView:
        return DeletionView.model_validate(wire.check(await self.http.get(f"/v1/deletions/{deletion_id}")))


class DeletionCalls:
    """The same calls for the blocking client (run on its loop, by its AsyncClient)."""

    _async: AsyncDeletionCalls

    def _run(self, coro: Any) -> Any:
        raise NotImplementedError

    def delete_run(self, run_id: str) -> RunDeleted:
        return self._run(self._async.delete_run(run_id))  # type: ignore[no-any-return]

    def delete_session(self, session_id: str) -> SessionDeleted:
        return self._run(self._async.delete_session(session_id))  # type: ignore[no-any-return]

    def create_deletion(self, metadata: dict[str, Any]) -> DeletionView:
        return self._run(self._async.create_deletion(metadata))  # type: ignore[no-any-return]

    def get_deletion(self, deletion_id: str) -> DeletionView:
        return self._run(self._async.get_deletion(deletion_id))  # type: ignore[no-any-return]
