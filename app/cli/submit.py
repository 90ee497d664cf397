"""``agentmill submit``: a JSONL file as one batch, sent in parts that cannot be half-done.

The batch is named before the first part goes out (printed on stderr at once, with the command
that resumes it). Each part is placed by its offset, so the API (or Redis) derives the same run ids
from (batch, item index) whenever it is sent: sending a part again creates nothing new. A part
refused for a passing reason (429, 5xx, a dropped connection) is sent again after the answer's
Retry-After or a backoff (app.cli.plan). Every acknowledged part is appended to a journal
(AGENTMILL_CLI_STATE_DIR/submit-BATCH.jsonl), so ``--batch-id BATCH`` (or ``--resume BATCH``) sends
only the parts not acknowledged, then the closing one. Bad lines (not JSON, not an object) are
reported by line number and the rest is still submitted. Data goes to stdout (the batch id, then
one accepted run id per line); progress and errors to stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import random
import re
import shlex
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click
import orjson

from agentmill_client import limits
from agentmill_client.errors import ApiError
from agentmill_client.ids import ID_PATTERN, new_batch_id
from agentmill_client.models import run_at_ms
from app.cli.common import (
    CliError,
    api_client,
    console,
    counts_text,
    direct_producer,
    err,
    exit_with,
    failure_text,
    progress_bar,
    reach,
    wire,
)
from app.cli.key_flags import concurrency_flag, debounce_flag, rate_flag
from app.cli.plan import PASSING_CODES, Parsed, Part, parse_jsonl, parts, retry_delay_ms, to_send
from shared.quotas import DEFAULT_TENANT
from shared.settings import get_settings

__all__ = ["Journal", "submit"]

Outcome = str | tuple[str, str]  # a run id, or (error code, message)
_LANE_FLAGS = {"priority": "--priority", "runAt": "--run-at", "concurrency": "--concurrency", "rate": "--rate",
               "debounce": "--debounce"}  # fmt: skip


@click.command(help="Submit runs from a JSONL file (one RunInput object per line) as one batch.")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--wait", is_flag=True, help="show the batch's progress until every run ends")
@reach
@click.option(
    "--batch-id",
    "--resume",
    "batch_id",
    default=None,
    help="name the batch; a batch of this file started before is resumed (only its missing parts are sent)",
)
@click.option(
    "--priority",
    type=click.IntRange(limits.MIN_PRIORITY, limits.MAX_PRIORITY),
    default=None,
    help=f"the priority ({limits.MIN_PRIORITY}-{limits.MAX_PRIORITY}, higher first; default {limits.DEFAULT_PRIORITY})"
    " of the runs whose line names none",
)
@click.option(
    "--run-at",
    default=None,
    help="when the runs whose line names no runAt may start: RFC 3339 (2026-01-31T09:00:00Z) or epoch ms",
)
@click.option(
    "--concurrency",
    default=None,
    help="KEY or KEY=LIMIT: the concurrency key of the runs whose line names none",
)
@click.option(
    "--rate", default=None, help="KEY=LIMIT/PERIOD_S: the rate key of the runs whose line names none"
)
@click.option(
    "--debounce", default=None, help="KEY=PERIOD_MS: the debounce key of the runs whose line names none"
)
def submit(
    file: Path,
    wait: bool,
    api_url: str | None,
    token: str | None,
    tenant: str,
    batch_id: str | None,
    priority: int | None,
    run_at: str | None,
    concurrency: str | None,
    rate: str | None,
    debounce: str | None,
) -> None:
    lanes: dict[str, Any] = {}
    if priority is not None:
        lanes["priority"] = priority
    if run_at is not None:
        try:
            lanes["runAt"] = run_at_ms(run_at)
        except ValueError as exc:
            raise click.BadParameter(str(exc).removeprefix("runAt: "), param_hint="--run-at") from None
    shown = {k: str(v) for k, v in lanes.items()}
    for name, given, parse in (("concurrency", concurrency, concurrency_flag), ("rate", rate, rate_flag),
                               ("debounce", debounce, debounce_flag)):  # fmt: skip
        if given is not None:
            lanes[name], shown[name] = parse(given), given
    exit_with(_submit(file, wait, api_url, token, tenant, batch_id, lanes, shown))


@dataclass
class Journal:
    """The parts of a batch acknowledged so far, appended as they are (a torn last line, from a
    process killed while writing it, is ignored). Its header pins the file and the part size."""

    path: Path
    part_size: int
    done: dict[int, list[Outcome]]  # offset -> each item's outcome

    @classmethod
    def open(cls, batch_id: str, file: Path, digest: str, part_size: int, items: int) -> Journal:
        folder = Path(get_settings().cli_state_dir or _default_state_dir())
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise CliError(
                f"cannot keep the batch's journal in {folder} ({exc}): set AGENTMILL_CLI_STATE_DIR"
            ) from exc
        path = folder / f"submit-{batch_id}.jsonl"
        header = {"batchId": batch_id, "file": str(file.resolve()), "sha256": digest, "items": items}
        if not path.exists():
            path.write_bytes(orjson.dumps({**header, "partSize": part_size}) + b"\n")
            return cls(path, part_size, {})
        first, *rest = path.read_bytes().splitlines()
        started = orjson.loads(first)
        if started.get("sha256") != digest:
            raise CliError(
                f"batch {batch_id} was started from another file ({started.get('file')}, "
                f"{started.get('items')} runs): resume it with that file unchanged ({path})"
            )
        done: dict[int, list[Outcome]] = {}
        for line in rest:
            with contextlib.suppress(orjson.JSONDecodeError):
                rec = orjson.loads(line)
                done[rec["offset"]] = [r if isinstance(r, str) else (r[0], r[1]) for r in rec["results"]]
        return cls(path, int(started["partSize"]), done)

    def record(self, offset: int, outcomes: list[Outcome]) -> None:
        line = orjson.dumps({"offset": offset, "results": outcomes}) + b"\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
        self.done[offset] = outcomes


def _default_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "agentmill"


@dataclass
class Sender:
    """One way to the pool: send(part items, offset, more) -> outcomes; view() -> the batch view;
    passing(exc) -> (HTTP status or None, Retry-After s) when exc is worth sending the part again."""

    send: Callable[[list[dict[str, Any]], int, bool], Awaitable[list[Outcome]]]
    view: Callable[[], Awaitable[dict[str, Any] | None]]
    passing: Callable[[BaseException], tuple[int | None, float | None] | None]


@contextlib.asynccontextmanager
async def _through_api(url: str, token: str | None, batch_id: str) -> AsyncIterator[Sender]:
    import httpx

    async with api_client(url, token) as c:
        reached = False

        async def send(items: list[dict[str, Any]], offset: int, more: bool) -> list[Outcome]:
            nonlocal reached
            answer = await c.create_batch(items, batch_id=batch_id, offset=offset, more=more)
            reached = True
            return [
                r.run_id if r.run_id and r.error is None else
                ((r.error.code, r.error.message) if r.error else ("not_accepted", "not accepted"))
                for r in answer.results
            ]  # fmt: skip

        async def view() -> dict[str, Any] | None:
            view: dict[str, Any] = wire(await c.get_batch(batch_id))
            return view

        def passing(exc: BaseException) -> tuple[int | None, float | None] | None:
            if isinstance(exc, ApiError):
                after = (exc.headers or {}).get("Retry-After", "")
                return exc.status, float(after) if after.isdigit() else None
            # No answer: sent again once this API has answered (it restarts, a proxy drops us);
            # an API never reached is a clear error at once.
            return (None, None) if reached and isinstance(exc, httpx.TransportError) else None

        yield Sender(send, view, passing)


@contextlib.asynccontextmanager
async def _through_redis(batch_id: str, tenant: str) -> AsyncIterator[Sender]:
    from redis.exceptions import ConnectionError as RedisConnectionError
    from redis.exceptions import TimeoutError as RedisTimeoutError

    from producer.listing import Catalog

    async with direct_producer() as p:
        reached = False

        async def send(items: list[dict[str, Any]], offset: int, more: bool) -> list[Outcome]:
            nonlocal reached
            got = await p.submit_many(items, tenant=tenant, batch_id=batch_id, offset=offset, more=more)
            reached = True
            return [o.run_id if hasattr(o, "run_id") else (o.code, o.message) for o in got]

        async def view() -> dict[str, Any] | None:
            return await Catalog(p).batch(tenant, batch_id)

        def passing(exc: BaseException) -> tuple[int | None, float | None] | None:
            lost = isinstance(exc, RedisConnectionError | RedisTimeoutError)  # as for the API: once reached
            return (None, None) if reached and lost else None

        yield Sender(send, view, passing)


class _PassingItemError(Exception):
    """An item of the part was refused for a passing reason (Redis briefly away, a quota)."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.code = code


async def _send_part(sender: Sender, parsed: Parsed, part: Part, of: int) -> list[Outcome]:
    items = parsed.items[part.offset : part.offset + part.count]
    attempt = 0
    while True:
        try:
            outcomes = await sender.send(items, part.offset, not part.last)
            passing = next((o for o in outcomes if not isinstance(o, str) and o[0] in PASSING_CODES), None)
            if passing is None:
                return outcomes
            raise _PassingItemError(*passing)
        except Exception as exc:
            attempt += 1
            found = (None, None) if isinstance(exc, _PassingItemError) else sender.passing(exc)
            delay = retry_delay_ms(attempt, *found, random.random()) if found is not None else None
            if delay is None:
                raise
            what = f"{exc.status} {exc.code}" if isinstance(exc, ApiError) else str(exc) or type(exc).__name__
            err.print(
                f"part {part.number}/{of}: {what}; sent again in {delay / 1000:.1f} s (retry {attempt})"
            )
            await asyncio.sleep(delay / 1000)


async def _submit(
    file: Path,
    wait: bool,
    api_url: str | None,
    token: str | None,
    tenant: str,
    named: str | None,
    lanes: dict[str, Any],
    shown: dict[str, str],
) -> int:
    if named is not None and not re.match(ID_PATTERN, named):
        raise CliError(
            f"--batch-id {named!r}: letters, digits and _.:- only, at most 128, not starting with a sign"
        )
    data = await asyncio.to_thread(file.read_bytes)
    parsed = parse_jsonl(data)
    for item in parsed.items:  # the flags fill in what a line leaves out (a resume repeats them)
        for k, v in lanes.items():
            item.setdefault(k, v)
    batch_id = named or new_batch_id()
    n = len(parsed.items)
    journal = Journal.open(batch_id, file, hashlib.sha256(data).hexdigest(), get_settings().max_batch, n)
    plan = parts(n, journal.part_size)
    todo = to_send(plan, journal.done)
    way = ["--api", api_url] if api_url else ["--tenant", tenant] if tenant != DEFAULT_TENANT else []
    resume = shlex.join(["agentmill", "submit", str(file), *way,
                         *(["--wait"] if wait else []),
                         *[a for k, v in shown.items() for a in (_LANE_FLAGS[k], v)],
                         "--batch-id", batch_id])  # fmt: skip
    before = len(plan) - len([p for p in todo if p.offset not in journal.done])
    err.print(
        f"batch {batch_id}: {n} runs in {len(plan)} part(s)" + (f", {before} sent before" if before else "")
    )
    if todo:
        err.print(f"  interrupted? resume with: {resume}", soft_wrap=True)
    for number, why in parsed.bad:
        err.print(f"[red]line {number}:[/] {why}", soft_wrap=True)
    final: dict[str, Any] | None = None
    async with contextlib.AsyncExitStack() as stack:
        sender = await stack.enter_async_context(
            _through_api(api_url, token, batch_id) if api_url else _through_redis(batch_id, tenant)
        )
        try:
            for part in todo:
                outcomes = await _send_part(sender, parsed, part, len(plan))
                journal.record(part.offset, outcomes)
                ok = sum(1 for o in outcomes if isinstance(o, str))
                last = parsed.lines[part.offset + part.count - 1]
                err.print(
                    f"part {part.number}/{len(plan)} (lines {parsed.lines[part.offset]}-{last}): "
                    f"{ok} accepted, {part.count - ok} rejected"
                )
        except asyncio.CancelledError:
            err.print(f"interrupted: batch {batch_id} is not complete; resume with: {resume}", soft_wrap=True)
            raise
        except Exception as exc:
            said = failure_text(exc) or f"{type(exc).__name__}: {exc}"
            raise CliError(f"{said}\nbatch {batch_id} is not complete; resume with: {resume}") from exc
        if wait and any(isinstance(o, str) for outs in journal.done.values() for o in outs):
            final = await _batch_progress(batch_id, sender.view)
    return _report(batch_id, parsed, journal, final)


def _report(batch_id: str, parsed: Parsed, journal: Journal, final: dict[str, Any] | None) -> int:
    accepted: list[str] = []
    rejected = len(parsed.bad)
    for offset in sorted(journal.done):
        for i, o in enumerate(journal.done[offset], offset):
            if isinstance(o, str):
                accepted.append(o)
                continue
            rejected += 1
            code, message = o
            message = re.sub(r"^runs\.\d+(?:\.|: )", "", message)  # the item's place in its part
            err.print(f"[red]line {parsed.lines[i]}:[/] {code}: {message}", soft_wrap=True)
    err.print(f"batch {batch_id}: accepted {len(accepted)}, rejected {rejected}")
    console.print(batch_id)
    for rid in accepted:
        console.print(rid, soft_wrap=True)
    not_completed = final is not None and final["counts"].get("completed", 0) < final["total"]
    return 1 if rejected or not_completed else 0


async def _batch_progress(
    batch_id: str, view: Callable[[], Awaitable[dict[str, Any] | None]]
) -> dict[str, Any] | None:
    """A progress bar (stderr) of the batch's ended runs, until all have ended."""
    final: dict[str, Any] | None = None
    with progress_bar() as bar:
        task = bar.add_task(f"batch {batch_id}", total=None)
        while True:
            final = await view()
            if final is None:  # expired meanwhile
                return None
            bar.update(
                task,
                total=final["total"],
                completed=final["done"],
                description=f"batch {batch_id} ({counts_text(final['counts'])})",
            )
            if final["finished"]:
                return final
            await asyncio.sleep(0.2)
