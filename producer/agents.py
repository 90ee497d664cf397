"""A tenant's agents kept through the API (POST /v1/agents): versions, the current one, a ramp.

Kept in two hashes at the tenant's home partition (shared/keys.py ``agents``, ``agent_versions``):
each agent's pointers as JSON, and each version's profile as the tenant gave it, immutable. Every
change is one script on the pointers (shared/lua/agent_create.lua, agent_point.lua). A tenant keeps
at most AGENTMILL_MAX_AGENTS agents of at most AGENTMILL_MAX_AGENT_VERSIONS versions each.

A submission naming one is pinned to a version here (producer.agent_choice): its pointers are read
at most every ``POINTERS_FRESH_S`` per API process (a change reaches every API process within it;
the process that made it sees it at once), and a version's profile once (immutable; kept in a
bounded LRU). A deleted agent takes no new runs; its versions stay readable to the runs that use
them for the retention and the longest run (``keep_ms``), then a creation forgets them.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import orjson
from redis.asyncio import Redis

from producer.agent_choice import AgentChoice, Pointers
from producer.submission import SubmissionError
from shared import agent_rules, keys
from shared.agent_rules import AgentRefusal, parse_ref
from shared.calls.agents import AgentCreate, AgentPoint, AgentPointVerdict
from shared.connections import connections_from
from shared.profiles import AgentProfile
from shared.replies import text
from shared.script_sending import Parts, run_script
from shared.scripts import Scripts
from shared.settings import Settings

__all__ = ["MAX_PROFILE_BYTES", "POINTERS_FRESH_S", "AgentDirectory", "Ref"]

POINTERS_FRESH_S = 0.2  # how long an API process uses the pointers it read
MAX_PROFILE_BYTES = 64 * 1024  # one version's profile as JSON
_KEPT_POINTERS = 4_096
_KEPT_VERSIONS = 1_024
Ref = tuple[str, int | None]  # a submission's agent as written and its agentVersion


def _unknown(name: str) -> SubmissionError:
    return SubmissionError("unknown_agent", f"no agent {name!r}", status=404, field="name")


class AgentDirectory:
    """Every tenant's agents, through ``parts``; ``operator``: the file's profiles (None: any)."""

    def __init__(
        self,
        parts: Parts,
        scripts: Scripts,
        settings: Settings,
        operator: Callable[[], Mapping[str, AgentProfile] | None],
    ) -> None:
        self.parts, self.scripts, self.settings, self._operator = parts, scripts, settings, operator
        self.connections = connections_from(settings.providers, dev=settings.dev_profiles)
        self.keep_ms = (settings.retention_s + settings.run_duration_max_ms // 1000) * 1000
        self._pointers: OrderedDict[tuple[str, str], tuple[float, Pointers | None]] = OrderedDict()
        self._versions: OrderedDict[tuple[str, str, int], tuple[dict[str, Any], AgentProfile]] = OrderedDict()
        self.reads = 0  # pointer reads that went to Redis (a test counts them)

    @property
    def operator(self) -> Mapping[str, AgentProfile]:
        return self._operator() or {}

    def home(self, tenant: str) -> keys.Partition:
        return self.parts.layout.home(tenant)

    # ---- changes ----

    async def create(
        self, tenant: str, body: dict[str, Any], *, make_current: bool, max_priority: int
    ) -> tuple[str, int]:
        """The next version of ``body["name"]`` (version 1 of a new agent): (name, version).
        SubmissionError: 422 naming the field that breaks a rule, 413 too large, 409 full."""
        try:
            agent_rules.checked(
                body, self.connections, self.operator, max_priority=max_priority,
                duration_max_ms=self.settings.run_duration_max_ms, dev=self.settings.dev_profiles,
            )  # fmt: skip
        except AgentRefusal as exc:
            raise SubmissionError("invalid_agent", exc.message, field=exc.field) from None
        stored = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
        if len(stored) > MAX_PROFILE_BYTES:
            raise SubmissionError("too_large", f"the profile is {len(stored)} bytes as JSON; at most "
                                  f"{MAX_PROFILE_BYTES}", status=413)  # fmt: skip
        name = str(body["name"])
        part = self.home(tenant)
        call = AgentCreate(tenant, name, stored, "1" if make_current else "", self.settings.max_agents,
                           self.settings.max_agent_versions, self.keep_ms)  # fmt: skip
        reply = await run_script(self.parts, self.scripts.agent_create, part, call.keys(part), call.argv())
        verdict, n = AgentCreate.verdict(reply).value, int(text(reply[1]))
        if verdict == "full":
            raise SubmissionError("agents_full", f"tenant {tenant!r} keeps {n} agents, the most "
                                  "(AGENTMILL_MAX_AGENTS); delete one first", status=409, field="name")  # fmt: skip
        if verdict == "versions_full":
            raise SubmissionError("versions_full", f"agent {name!r} has {n} versions, the most "
                                  "(AGENTMILL_MAX_AGENT_VERSIONS)", status=409, field="name")  # fmt: skip
        self._pointers.pop((tenant, name), None)
        return name, n

    async def point(
        self, tenant: str, name: str, what: str, version: int | None = None, percent: float = 0.0
    ) -> Pointers:
        """Set the current version, the ramp, or delete (``what``); 404 for no such agent, 422 for
        no such version."""
        part = self.home(tenant)
        call = AgentPoint(tenant, name, what, "" if version is None else str(version), repr(percent))
        reply = await run_script(self.parts, self.scripts.agent_point, part, call.keys(part), call.argv())
        verdict, out = AgentPoint.verdict(reply), text(reply[1])
        if verdict is AgentPointVerdict.UNKNOWN:
            raise _unknown(name)
        if verdict is AgentPointVerdict.NO_VERSION:
            raise SubmissionError("unknown_version", f"agent {name!r} has versions 1 to {out}; no {version}",
                                  field="version")  # fmt: skip
        got = Pointers.parse(orjson.loads(out))
        self._pointers[(tenant, name)] = (time.monotonic(), None if got.deleted else got)
        return got

    # ---- reads ----

    async def pointers(self, tenant: str, name: str, *, fresh: bool = False) -> Pointers | None:
        """The agent's pointers (None: no such agent, or deleted)."""
        now = time.monotonic()
        hit = self._pointers.get((tenant, name))
        if hit is not None and not fresh and now - hit[0] < POINTERS_FRESH_S:
            return hit[1]
        part = self.home(tenant)

        async def go(c: Redis) -> Any:
            return await c.hget(part.agents(tenant), name)  # type: ignore[misc]

        self.reads += 1
        raw = await self.parts.call(part, go)
        got = Pointers.parse(orjson.loads(raw)) if raw else None
        got = None if got is None or got.deleted else got
        self._pointers[(tenant, name)] = (now, got)
        self._pointers.move_to_end((tenant, name))
        while len(self._pointers) > _KEPT_POINTERS:
            self._pointers.popitem(last=False)
        return got

    async def listing(self, tenant: str) -> list[tuple[str, Pointers]]:
        part = self.home(tenant)

        async def go(c: Redis) -> Any:
            return await c.hgetall(part.agents(tenant))  # type: ignore[misc]

        found = await self.parts.call(part, go)
        out = [(text(k), Pointers.parse(orjson.loads(v))) for k, v in found.items()]
        return sorted(((n, p) for n, p in out if not p.deleted), key=lambda x: x[0])

    async def version(self, tenant: str, name: str, n: int) -> tuple[dict[str, Any], AgentProfile] | None:
        """A version's profile as the tenant gave it and as it runs (None: no such version)."""
        key = (tenant, name, n)
        hit = self._versions.get(key)
        if hit is not None:
            self._versions.move_to_end(key)
            return hit
        part = self.home(tenant)

        async def go(c: Redis) -> Any:
            return await c.hget(part.agent_versions(tenant), f"{name}@{n}")  # type: ignore[misc]

        raw = await self.parts.call(part, go)
        if raw is None:
            return None
        body = orjson.loads(raw)
        got = (body, agent_rules.build(body, self.connections))
        self._versions[key] = got
        while len(self._versions) > _KEPT_VERSIONS:
            self._versions.popitem(last=False)
        return got

    async def choices(self, tenant: str, refs: Iterable[Ref]) -> dict[Ref, AgentChoice]:
        """The tenant's agents among the submissions' ``refs``, each with the profiles of the versions
        its runs may get; a ref naming none of them is left out (the file's profiles answer it)."""
        out: dict[Ref, AgentChoice] = {}
        for ref in set(refs):
            agent, given = ref
            name, asked = parse_ref(agent)
            asked = given if given is not None else asked
            if name in self.operator:
                continue
            p = await self.pointers(tenant, name)
            if p is None:
                continue
            if asked is not None and not 1 <= asked <= p.latest:
                why = f"agent: {name!r} has versions 1 to {p.latest}; no {asked}"
                out[ref] = AgentChoice(
                    name, p, asked, refusal=SubmissionError("unknown_version", why, field="agent")
                )
                continue
            choice = AgentChoice(name, p, asked)
            for v in choice.wanted():
                found = await self.version(tenant, name, v)
                if found is None:
                    raise SubmissionError(
                        "unknown_version", f"agent: {name!r} version {v} is gone", field="agent"
                    )
                choice.profiles[v] = found[1]
            out[ref] = choice
        return out
