"""The answers of the /v1/agents calls (agentmill_client.agents), for the API's routes and the CLI
straight to Redis alike: a tenant's agents (producer.agents) and the operator's profiles beside
them, read-only. A name no agent of the tenant has is a SubmissionError 404."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agentmill_client.agents import AgentsPage, AgentVersionView, AgentView, RampSpec
from producer.agent_choice import Pointers
from producer.agents import AgentDirectory
from producer.submission import SubmissionError
from shared.profiles import AgentProfile

__all__ = ["AgentViews"]


def _operator_view(profile: AgentProfile, *, full: bool) -> AgentView:
    shown = None
    if full:  # the provider as its kind and model: where it connects and with which key is the operator's
        shown = profile.model_dump(by_alias=True, exclude_none=True)
        shown["provider"] = {"kind": profile.provider.kind, "model": profile.provider.model_name}
    return AgentView(name=profile.name, source="operator", profile=shown)


def _view(name: str, p: Pointers, profile: dict[str, Any] | None = None) -> AgentView:
    return AgentView.model_validate({"name": name, "source": "tenant", **p.view(), "profile": profile})


def _not_found(what: str) -> SubmissionError:
    return SubmissionError("unknown_agent", f"no agent {what}", status=404)


class AgentViews:
    """The agent calls of one tenant."""

    def __init__(
        self, agents: AgentDirectory, operator: Mapping[str, AgentProfile] | None, tenant: str
    ) -> None:
        self.agents, self.operator, self.tenant = agents, dict(operator or {}), tenant

    def _writable(self, name: str) -> None:
        if name in self.operator:
            raise SubmissionError(
                "read_only", f"{name!r} is an operator's profile: read-only through the API", status=409
            )

    async def create(self, body: dict[str, Any], *, current: bool, max_priority: int) -> AgentVersionView:
        name, version = await self.agents.create(
            self.tenant, body, make_current=current, max_priority=max_priority
        )
        return await self.version(name, version)

    async def listing(self) -> AgentsPage:
        mine = [_view(n, p) for n, p in await self.agents.listing(self.tenant)]
        theirs = [_operator_view(p, full=False) for _, p in sorted(self.operator.items())]
        return AgentsPage(agents=[*mine, *theirs])

    async def show(self, name: str) -> AgentView:
        if (op := self.operator.get(name)) is not None:
            return _operator_view(op, full=True)
        p = await self.agents.pointers(self.tenant, name, fresh=True)
        if p is None:
            raise _not_found(repr(name))
        found = await self.agents.version(self.tenant, name, p.current) if p.current is not None else None
        return _view(name, p, found[0] if found is not None else None)

    async def version(self, name: str, version: int) -> AgentVersionView:
        p = await self.agents.pointers(self.tenant, name, fresh=True)
        ok = p is not None and 1 <= version <= p.latest
        found = await self.agents.version(self.tenant, name, version) if ok else None
        if p is None or found is None:
            raise _not_found(f"{name}@{version}")
        return AgentVersionView(
            name=name, version=version, created_at=p.created[version - 1], profile=found[0]
        )

    async def point(
        self, name: str, version: int | None, ramp: RampSpec | None, *, ramp_given: bool
    ) -> AgentView:
        """The current version (``version``) and/or the ramp (``ramp_given``: None ends it)."""
        self._writable(name)
        if version is None and not ramp_given:
            raise SubmissionError("invalid_input", 'give "version", "ramp", or both', field="version")
        p: Pointers | None = None
        if version is not None:
            p = await self.agents.point(self.tenant, name, "current", version)
        if ramp_given:
            v, pct = (None, 0.0) if ramp is None else (ramp.version, ramp.percent)
            p = await self.agents.point(self.tenant, name, "ramp", v, pct)
        assert p is not None
        return _view(name, p)

    async def delete(self, name: str) -> AgentView:
        self._writable(name)
        return _view(name, await self.agents.point(self.tenant, name, "delete"))
