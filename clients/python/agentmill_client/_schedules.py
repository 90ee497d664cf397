"""The clients' schedule calls (``/v1/schedules``), mixed into AsyncClient and Client."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentmill_client import _wire as wire
from agentmill_client.schedules import ScheduleAnswer, ScheduleInput, SchedulesPage, ScheduleView

if TYPE_CHECKING:
    import httpx

__all__ = ["AsyncScheduleCalls", "ScheduleCalls"]


def _body(schedule: ScheduleInput | dict[str, Any]) -> dict[str, Any]:
    if isinstance(schedule, dict):
        return schedule
    return schedule.model_dump(mode="json", by_alias=True, exclude_none=True)


class AsyncScheduleCalls:
    http: httpx.AsyncClient

    async def create_schedule(self, schedule: ScheduleInput | dict[str, Any]) -> ScheduleView:
        """Create a schedule (the same definition again under its scheduleId: the schedule as it is)."""
        return ScheduleView.model_validate(
            wire.check(await self.http.post("/v1/schedules", json=_body(schedule)))
        )

    async def get_schedule(self, schedule_id: str, *, next: int = 5) -> ScheduleView:
        """The schedule with its ``next`` firing times."""
        return ScheduleView.model_validate(
            wire.check(await self.http.get(f"/v1/schedules/{schedule_id}", params={"next": next}))
        )

    async def list_schedules(self, *, limit: int = 100) -> SchedulesPage:
        return SchedulesPage.model_validate(
            wire.check(await self.http.get("/v1/schedules", params={"limit": limit}))
        )

    async def delete_schedule(self, schedule_id: str) -> ScheduleAnswer:
        return ScheduleAnswer.model_validate(
            wire.check(await self.http.delete(f"/v1/schedules/{schedule_id}"))
        )

    async def pause_schedule(self, schedule_id: str) -> ScheduleAnswer:
        return ScheduleAnswer.model_validate(
            wire.check(await self.http.post(f"/v1/schedules/{schedule_id}/pause"))
        )

    async def resume_schedule(self, schedule_id: str) -> ScheduleAnswer:
        return ScheduleAnswer.model_validate(
            wire.check(await self.http.post(f"/v1/schedules/{schedule_id}/resume"))
        )


class ScheduleCalls:
    """The same calls for the blocking client (run on its loop, by its AsyncClient)."""

    _async: AsyncScheduleCalls

    def _run(self, coro: Any) -> Any:
        raise NotImplementedError

    def create_schedule(self, schedule: ScheduleInput | dict[str, Any]) -> ScheduleView:
        return self._run(self._async.create_schedule(schedule))  # type: ignore[no-any-return]

    def get_schedule(self, schedule_id: str, *, next: int = 5) -> ScheduleView:
        return self._run(self._async.get_schedule(schedule_id, next=next))  # type: ignore[no-any-return]

    def list_schedules(self, *, limit: int = 100) -> SchedulesPage:
        return self._run(self._async.list_schedules(limit=limit))  # type: ignore[no-any-return]

    def delete_schedule(self, schedule_id: str) -> ScheduleAnswer:
        return self._run(self._async.delete_schedule(schedule_id))  # type: ignore[no-any-return]

    def pause_schedule(self, schedule_id: str) -> ScheduleAnswer:
        return self._run(self._async.pause_schedule(schedule_id))  # type: ignore[no-any-return]

    def resume_schedule(self, schedule_id: str) -> ScheduleAnswer:
        return self._run(self._async.resume_schedule(schedule_id))  # type: ignore[no-any-return]
