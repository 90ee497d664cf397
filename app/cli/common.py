"""What every ``agentmill`` command shares: the consoles, how a command reaches Redis or the API,
and how a run's events are shown."""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any

import click
import orjson
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from agentmill_client.errors import ApiError
from agentmill_client.models import RunEvent
from agentmill_client.statuses import TERMINAL
from shared.loop import run as run_loop
from shared.settings import get_settings

if TYPE_CHECKING:
    from agentmill_client.client import AsyncClient

__all__ = [
    "CliError",
    "api_client",
    "console",
    "counts_text",
    "describe",
    "direct_producer",
    "either_way",
    "emit_json",
    "err",
    "exit_with",
    "failure_text",
    "json_option",
    "print_event",
    "progress_bar",
    "reach",
    "route",
    "safe_url",
    "say_error",
    "wire",
]

console = Console(stderr=False, highlight=False)
# soft_wrap: a line on stderr stays one line whatever its length and the terminal (or pipe) width
err = Console(stderr=True, highlight=False, soft_wrap=True)


class CliError(Exception):
    """A failure the command explains in one line (stderr, exit code 2), not with a traceback."""


def exit_with(coro: Coroutine[Any, Any, int]) -> None:
    """Run a command; what commonly goes wrong (the API or Redis unreachable, a refused token, a URL
    without a scheme) is one line on stderr and exit code 2; Ctrl-C is exit code 130."""
    try:
        code = run_loop(coro)
    except KeyboardInterrupt:
        code = 130
    except Exception as exc:
        said = failure_text(exc)
        if said is None:
            raise
        say_error(said)
        code = 2
    sys.exit(code)


def say_error(text: str) -> None:
    """``error: text`` on stderr, one line however long (text is shown as is, never as markup)."""
    err.print(f"[red]error:[/] {escape(text)}", soft_wrap=True, highlight=False)


# ---- data for scripts ----


def json_option(f: Any) -> Any:
    """--json: the command's answer as JSON on stdout (one document; one object a line for a list or
    a stream), nothing else there."""
    return click.option(
        "--json", "as_json", is_flag=True, help="print JSON on stdout (the API's camelCase wire form)"
    )(f)


def wire(model: BaseModel) -> dict[str, Any]:
    """A model answered by the API as the API sends it: camelCase, every field."""
    return model.model_dump(mode="json", by_alias=True)


def emit_json(value: Any) -> None:
    """One JSON document on one line of stdout, never wrapped or styled."""
    sys.stdout.write(orjson.dumps(value).decode() + "\n")
    sys.stdout.flush()


def failure_text(exc: BaseException) -> str | None:
    """What went wrong, in a line, for the failures a command explains; None for the others."""
    import httpx
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    if isinstance(exc, CliError):
        return str(exc)
    if isinstance(exc, ApiError):
        why = " (the token is missing, unknown or not allowed)" if exc.status in (401, 403) else ""
        return f"the API answered {exc.status} {exc.code}: {exc.message}{why}"
    if isinstance(exc, httpx.TransportError):
        try:
            u = exc.request.url
            where = f"{u.scheme}://{u.netloc.decode()}"
        except RuntimeError:  # httpx: raised before a request existed
            where = "the API"
        return f"cannot reach the API at {where}: {str(exc) or type(exc).__name__}"
    if isinstance(exc, RedisConnectionError | RedisTimeoutError | ConnectionError):
        return f"cannot reach Redis at {safe_url(get_settings().redis_url)}: {exc}"
    return None


async def either_way(
    api_url: str | None,
    token: str | None,
    via_api: Callable[[AsyncClient], Awaitable[Any]],
    via_producer: Callable[[Any], Awaitable[Any]],
) -> tuple[Any, int]:
    """One call of a command: through the API client with ``--api``, else on a producer straight to
    Redis. (its answer, 0), or (None, 2) once a refusal is said on stderr; a refused token raises
    (exit_with says it)."""
    from producer.submission import SubmissionError

    try:
        if api_url:
            async with api_client(api_url, token) as c:
                return await via_api(c), 0
        async with direct_producer() as p:
            return await via_producer(p), 0
    except ApiError as exc:
        if exc.status in (401, 403):
            raise
        say_error(exc.message)
    except SubmissionError as exc:
        say_error(exc.message)
    return None, 2


def api_client(url: str, token: str | None) -> AsyncClient:
    """The HTTP client of ``--api URL`` with ``--token`` (else the AGENTMILL_TOKEN setting); a URL
    without http:// or https:// is a CliError."""
    from agentmill_client.client import AsyncClient

    if not url.startswith(("http://", "https://")):
        raise CliError(f"--api needs a URL starting with http:// or https:// (got {url!r})")
    return AsyncClient(url, token=get_settings().token if token is None else token)


# ---- readable events ----


def counts_text(counts: dict[str, int]) -> str:
    """A batch's counts by status, as words ("3 completed, 1 failed")."""
    return ", ".join(f"{n} {s.replace('_', ' ')}" for s, n in counts.items() if n)


def describe(e: RunEvent) -> str:
    p = e.payload
    k = e.kind.value
    if k == "status":
        s = p.get("status")
        if s == "retrying":
            return f"[yellow]↻ retrying[/] attempt {p.get('attempt')} in {p.get('delayMs', 0) / 1000:.1f} s ({p.get('reason')})"
        if s == "completed":
            return f"[green]✓ completed[/] after {p.get('iterations')} iterations"
        if s in TERMINAL:  # failed, aborted or superseded (completed is above)
            er = p.get("error") or {}
            return f"[red]✗ {s}[/] {er.get('code', '')}: {er.get('message', '')}"
        if s == "awaiting_human":
            calls = ", ".join(
                f"{c['name']}({c['arguments']}) [{c['toolCallId']}]" for c in p.get("pendingApprovals", [])
            )
            return f"[magenta]⏸ awaiting approval[/] {calls}"
        if s == "awaiting_tools":
            calls = ", ".join(
                f"{c['name']}({c['arguments']}) [{c['toolCallId']}]" for c in p.get("pendingToolCalls", [])
            )
            return f"[magenta]⏸ awaiting client tool results[/] {calls}"
        extra = {k2: v for k2, v in p.items() if k2 != "status"}
        return f"[cyan]● {s}[/] {orjson.dumps(extra).decode() if extra else ''}"
    if k == "model_delta":
        frag = p.get("text") or (p.get("toolCall") or {}).get("arguments", "")
        return f"[dim]… {frag!r}[/]"
    if k == "assistant_message":
        m = p.get("message", {})
        if m.get("toolCalls"):
            return "assistant → " + ", ".join(f"{c['name']}({c['arguments']})" for c in m["toolCalls"])
        return f"assistant: [bold]{m.get('content', '')}[/]"
    if k == "tool_call":
        where = " [client]" if p.get("execution") == "client" else ""
        return f"→ {p.get('name')}({p.get('arguments')}){where} [{p.get('toolCallId')}]"
    if k == "tool_result":
        color = "red" if p.get("isError") else "green"
        return f"[{color}]← {p.get('name')}:[/] {str(p.get('content', ''))[:200]}"
    if k == "error":
        where = p.get("name") or p.get("scope", "")
        return f"[red]! {p.get('code')}[/] ({where}) {str(p.get('message', ''))[:200]}"
    if k == "compaction":
        return f"⇊ compacted {p.get('removed')} messages ({p.get('reason')})"
    return f"{k}: {orjson.dumps(p).decode()[:200]}"


def print_event(e: RunEvent) -> None:
    console.print(f"[dim]{e.seq:>4}[/] {describe(e)}")


# ---- direct-Redis helpers ----


@contextlib.asynccontextmanager
async def direct_producer() -> AsyncIterator[Any]:
    """A Producer on the partitions the settings name (REDIS_URL, AGENTMILL_REDIS_CLUSTER,
    AGENTMILL_PARTITIONS), closed after."""
    from producer.service import Producer
    from shared.partitions import Partitions
    from shared.preflight import check_archive_driver
    from shared.profiles import profiles_from
    from shared.scripts import prepare_scripts

    settings = get_settings()
    check_archive_driver(settings)
    parts: Partitions[Any] = Partitions.from_settings(settings, retries=3)
    producer = None
    try:
        await parts.start()
        await prepare_scripts(parts, settings)
        producer = Producer(
            parts, settings=settings, profiles=profiles_from(settings.profiles, dev=settings.dev_profiles)
        )
        yield producer
    finally:
        if producer is not None and producer.archive is not None:
            await producer.archive.aclose()
        await parts.aclose()


def safe_url(url: str) -> str:
    """The URL without its password, for messages."""
    if "@" in url:
        scheme, _, rest = url.partition("://")
        return f"{scheme}://***@{rest.split('@', 1)[1]}"
    return url


def route(api_url: str | None, tenant: str | None, redis: bool) -> tuple[str | None, str]:
    """The way a command goes: (the API's URL, or None for Redis; the tenant on Redis). An explicit
    --api wins; --redis or --tenant mean Redis; else AGENTMILL_API_URL when set; else Redis. --api
    with --redis or --tenant is a CliError: through the API, the token names the tenant."""
    from shared.quotas import DEFAULT_TENANT

    if api_url is not None and (redis or tenant is not None):
        flag = "--redis" if redis else "--tenant"
        raise CliError(f"--api goes through the HTTP API, whose token names the tenant: drop {flag} or --api")
    if api_url is None and not redis and tenant is None:
        api_url = get_settings().api_url or None
    return api_url, tenant or DEFAULT_TENANT


def reach(f: Any) -> Any:
    """--api/--token (through the HTTP API, the token's tenant; AGENTMILL_API_URL the default) or
    --redis/--tenant (straight to Redis): the command gets api_url (None: Redis), token and tenant."""

    @functools.wraps(f)
    def routed(*args: Any, api_url: str | None, token: str | None, tenant: str | None, redis: bool,
               **kwargs: Any) -> Any:  # fmt: skip
        try:
            chosen, named = route(api_url, tenant, redis)
        except CliError as exc:
            say_error(str(exc))
            sys.exit(2)
        return f(*args, api_url=chosen, token=token, tenant=named, **kwargs)

    g: Any = click.option(
        "--tenant",
        default=None,
        help="the tenant, straight to Redis (default: default; implies --redis)",
    )(routed)
    g = click.option(
        "--redis", is_flag=True, help="straight to Redis (REDIS_URL) even when AGENTMILL_API_URL is set"
    )(g)
    g = click.option("--token", default=None, help="bearer token with --api (default: AGENTMILL_TOKEN)")(g)
    return click.option(
        "--api", "api_url", default=None,
        help="through the HTTP API at this URL instead of Redis (default: AGENTMILL_API_URL)",
    )(g)  # fmt: skip


def progress_bar() -> Progress:
    """A bar with its description, count and elapsed time (a batch's or the demo's runs)."""
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,  # progress is not data: stdout stays clean for what a command answers
    )
