"""``agentmill agents create|list|show|current|ramp|delete``: a tenant's agents in numbered versions,
through the HTTP API (``--api``) or straight to Redis (``--tenant``), as producer.agents keeps them.
stdout holds a line an agent, or with ``--json`` the API's answer (``list --json``: one agent a line)."""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import click
import orjson

from agentmill_client.agents import AgentsPage, AgentVersionView, AgentView, RampSpec
from app.cli.common import (
    console,
    either_way,
    emit_json,
    exit_with,
    json_option,
    reach,
    say_error,
    wire,
)

__all__ = ["agents"]


@click.group(help="Agents kept through the API, in numbered versions (POST /v1/agents).")
def agents() -> None:
    pass


Call = Callable[[Any], Awaitable[Any]]


async def _call(
    api_url: str | None, token: str | None, tenant: str, as_json: bool, via_api: Call, via_redis: Call
) -> int:
    """One call through the API client or producer.agent_views (with ``tenant``); prints the answer."""

    async def direct(p: Any) -> Any:
        from producer.agent_views import AgentViews
        from shared.quotas import Quotas

        return await via_redis(
            (AgentViews(p.submitter.agents, p.profiles, tenant), Quotas(p.settings).of(tenant).max_priority)
        )

    answer, code = await either_way(api_url, token, via_api, direct)
    if code:
        return code
    (_emit if as_json else _show)(answer)
    return 0


def _line(v: AgentView) -> str:
    if v.source == "operator":
        return f"{v.name}  (operator's profile, read-only)"
    ramp = f"  ramp v{v.ramp.version} {v.ramp.percent:g} %" if v.ramp else ""
    return f"{v.name}  current v{v.current_version}  latest v{v.latest_version}{ramp}"


def _show(answer: Any) -> None:
    if isinstance(answer, AgentsPage):
        for v in answer.agents:
            console.print(_line(v), soft_wrap=True, highlight=False, markup=False)
    elif isinstance(answer, AgentView):
        console.print(_line(answer), soft_wrap=True, highlight=False, markup=False)
        for s in answer.versions:
            console.print(f"  v{s.version}  created {s.created_at}", highlight=False, markup=False)
    elif isinstance(answer, AgentVersionView):
        console.print(f"{answer.name}  v{answer.version}", highlight=False, markup=False)


def _emit(answer: Any) -> None:
    if isinstance(answer, AgentsPage):
        for v in answer.agents:
            emit_json(wire(v))
    else:
        emit_json(wire(answer))


@agents.command("create", help="Create an agent or its next version; PROFILE is a JSON file ('-' for stdin).")
@click.argument("profile_file", metavar="PROFILE")
@click.option("--no-current", is_flag=True, help="do not give new runs this version yet (ramp it later)")
@json_option
@reach
def create(
    profile_file: str, no_current: bool, as_json: bool, api_url: str | None, token: str | None, tenant: str
) -> None:
    raw = sys.stdin.buffer.read() if profile_file == "-" else Path(profile_file).read_bytes()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        say_error(f"PROFILE: not JSON ({exc})")
        sys.exit(2)

    async def via_redis(a: tuple[Any, int]) -> Any:
        return await a[0].create(body, current=not no_current, max_priority=a[1])

    exit_with(
        _call(
            api_url, token, tenant, as_json, lambda c: c.create_agent(body, current=not no_current), via_redis
        )
    )


@agents.command("list", help="The tenant's agents, then the operator's profiles.")
@json_option
@reach
def ls(as_json: bool, api_url: str | None, token: str | None, tenant: str) -> None:
    exit_with(_call(api_url, token, tenant, as_json, lambda c: c.list_agents(), lambda a: a[0].listing()))


@agents.command("show", help="An agent (its versions and ramp), or one version with --version.")
@click.argument("name")
@click.option("--version", "version", type=click.IntRange(1), default=None, help="this version's profile")
@json_option
@reach
def show(
    name: str, version: int | None, as_json: bool, api_url: str | None, token: str | None, tenant: str
) -> None:
    if version is None:
        exit_with(
            _call(api_url, token, tenant, as_json, lambda c: c.get_agent(name), lambda a: a[0].show(name))
        )
    else:
        exit_with(_call(api_url, token, tenant, as_json, lambda c: c.get_agent_version(name, version),
                        lambda a: a[0].version(name, version)))  # fmt: skip


@agents.command("current", help="Give new runs VERSION (roll back or forward).")
@click.argument("name")
@click.argument("version", type=click.IntRange(1))
@json_option
@reach
def current(
    name: str, version: int, as_json: bool, api_url: str | None, token: str | None, tenant: str
) -> None:
    exit_with(_call(api_url, token, tenant, as_json, lambda c: c.set_current_agent_version(name, version),
                    lambda a: a[0].point(name, version, None, ramp_given=False)))  # fmt: skip


@agents.command("ramp", help="Give PERCENT of new runs (chosen by run id) VERSION; 0 ends the ramp.")
@click.argument("name")
@click.argument("version", type=click.IntRange(1))
@click.argument("percent", type=click.FloatRange(0, 100))
@json_option
@reach
def ramp(
    name: str,
    version: int,
    percent: float,
    as_json: bool,
    api_url: str | None,
    token: str | None,
    tenant: str,
) -> None:
    spec = RampSpec(version=version, percent=percent)
    exit_with(_call(api_url, token, tenant, as_json, lambda c: c.ramp_agent(name, version, percent),
                    lambda a: a[0].point(name, None, spec, ramp_given=True)))  # fmt: skip


@agents.command("delete", help="Delete an agent: no new runs; its running runs finish on their version.")
@click.argument("name")
@json_option
@reach
def delete(name: str, as_json: bool, api_url: str | None, token: str | None, tenant: str) -> None:
    exit_with(
        _call(api_url, token, tenant, as_json, lambda c: c.delete_agent(name), lambda a: a[0].delete(name))
    )
