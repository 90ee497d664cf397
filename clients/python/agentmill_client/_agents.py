"""The clients' agent calls (``/v1/agents``), mixed into AsyncClient and Client."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agentmill_client import _wire as wire
from agentmill_client.agents import AgentsPage, AgentVersionView, AgentView

if TYPE_CHECKING:
    import httpx

__all__ = ["AgentCalls", "AsyncAgentCalls"]


class AsyncAgentCalls:
    http: httpx.AsyncClient

    async def create_agent(self, profile: dict[str, Any], *, current: bool = True) -> AgentVersionView:
        """Version 1 of a new agent, or the next version of ``profile["name"]``; ``current``: new runs
        get it at once (False: ramp it or point to it later)."""
        r = await self.http.post(
            "/v1/agents", json=profile, params={"current": "true" if current else "false"}
        )
        return AgentVersionView.model_validate(wire.check(r))

    async def list_agents(self) -> AgentsPage:
        return AgentsPage.model_validate(wire.check(await self.http.get("/v1/agents")))

    async def get_agent(self, name: str) -> AgentView:
        """The agent with its current version's profile, its versions and its ramp."""
        return AgentView.model_validate(wire.check(await self.http.get(f"/v1/agents/{name}")))

    async def get_agent_version(self, name: str, version: int) -> AgentVersionView:
        return AgentVersionView.model_validate(
            wire.check(await self.http.get(f"/v1/agents/{name}/versions/{version}"))
        )

    async def set_current_agent_version(self, name: str, version: int) -> AgentView:
        """New runs get ``version`` (roll back or forward)."""
        r = await self.http.post(f"/v1/agents/{name}/current", json={"version": version})
        return AgentView.model_validate(wire.check(r))

    async def ramp_agent(self, name: str, version: int, percent: float) -> AgentView:
        """``percent`` of new runs (chosen by run id) get ``version``; 0 ends the ramp."""
        r = await self.http.post(
            f"/v1/agents/{name}/current", json={"ramp": {"version": version, "percent": percent}}
        )
        return AgentView.model_validate(wire.check(r))

    async def delete_agent(self, name: str) -> AgentView:
        """No new runs of the agent; its running runs finish on their version."""
        return AgentView.model_validate(wire.check(await self.http.delete(f"/v1/agents/{name}")))


class AgentCalls:
    """The same calls for the blocking client (run on its loop, by its AsyncClient)."""

    _async: AsyncAgentCalls

    def _run(self, coro: Any) -> Any:
        raise NotImplementedError

    def create_agent(self, profile: dict[str, Any], *, current: bool = True) -> AgentVersionView:
        return self._run(self._async.create_agent(profile, current=current))  # type: ignore[no-any-return]

    def list_agents(self) -> AgentsPage:
        return self._run(self._async.list_agents())  # type: ignore[no-any-return]

    def get_agent(self, name: str) -> AgentView:
        return self._run(self._async.get_agent(name))  # type: ignore[no-any-return]

    def get_agent_version(self, name: str, version: int) -> AgentVersionView:
        return self._run(self._async.get_agent_version(name, version))  # type: ignore[no-any-return]

    def set_current_agent_version(self, name: str, version: int) -> AgentView:
        return self._run(self._async.set_current_agent_version(name, version))  # type: ignore[no-any-return]

    def ramp_agent(self, name: str, version: int, percent: float) -> AgentView:
        return self._run(self._async.ramp_agent(name, version, percent))  # type: ignore[no-any-return]

    def delete_agent(self, name: str) -> AgentView:
        return self._run(self._async.delete_agent(name))  # type: ignore[no-any-return]
