"""``agentmill submit`` cannot half-do a batch, and the CLI's manners: real API, real redis-server,
the CLI as a process of its own (test_client_cli's setup)."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from producer.listing import Catalog
from shared.quotas import DEFAULT_TENANT
from tests.integration.helpers import producer_for
from tests.integration.test_client_cli import api_server
from tests.support import forkserver
from tests.support.cli import ROOT, cli
from tests.support.redis_server import free_port
from tests.support.schema import K

pytestmark = pytest.mark.integration

LINES = 2_500
# 250 runs a second, in bursts of one batch: the second part of a 2,500-line file is refused (429)
# until the bucket has refilled, 4 s after the first part took it, however long the first part
# took to be stored (at 1,000 a second a part that took over 1 s on a loaded machine found the
# bucket full again, and the rate limit the tests are about was never reached).
QUOTA = {"tenant_submits_per_second": 250, "tenant_submit_burst": 1_000}


@asynccontextmanager
async def api_at(redis_url: str, **settings: Any) -> AsyncIterator[str]:
    port = free_port()
    server = api_server(redis_url, port, **settings)
    task = asyncio.create_task(server.serve())
    try:
        while not server.started:
            await asyncio.sleep(0.01)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task


def runs_file(path: Path, n: int) -> Path:
    """n runs, line i (from 1) tagged metadata.line = i."""
    rows = (
        {"inputMessages": [{"role": "user", "content": "hi"}], "metadata": {"line": i}}
        for i in range(1, n + 1)
    )
    path.write_bytes(b"\n".join(orjson.dumps(r) for r in rows) + b"\n")
    return path


async def assert_every_line_once(redis: Redis, url: str, batch_id: str, printed: list[str]) -> None:
    """The batch holds one run per line: as many runs as lines, each line's run once, and they are
    the runs the CLI printed."""
    async with httpx.AsyncClient(base_url=url) as c:
        view = (await c.get(f"/v1/batches/{batch_id}")).json()
        listed: list[str] = []
        cursor: str | None = None
        while True:
            page = (await c.get(f"/v1/batches/{batch_id}/runs", params={"limit": 500, **({"cursor": cursor} if cursor else {})})).json()  # fmt: skip
            listed += [r["runId"] for r in page["runs"]]
            if not (cursor := page["next"]):
                break
    assert view["total"] == LINES and len(listed) == LINES == len(set(listed))
    assert sorted(listed) == sorted(printed)
    pipe = redis.pipeline()
    for rid in listed:
        pipe.hget(K.run(rid), "input")
    lines = [orjson.loads(raw)["metadata"]["line"] for raw in await pipe.execute()]
    assert sorted(lines) == list(range(1, LINES + 1))


async def finishes(url: str, batch_id: str) -> bool:
    """Once all its runs end (aborted here: no worker), the batch is finished: its closing part came."""
    async with httpx.AsyncClient(base_url=url) as c:
        await c.post(f"/v1/batches/{batch_id}/abort")
        return bool((await c.get(f"/v1/batches/{batch_id}")).json()["finished"])


async def test_a_large_file_is_one_batch_through_a_rate_limited_api(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    jsonl = runs_file(tmp_path / "runs.jsonl", LINES)
    async with api_at(redis_url, **QUOTA) as url:
        out = await asyncio.to_thread(cli, redis_url, "submit", str(jsonl), "--api", url)
        assert out.returncode == 0, out.stderr
        batch_id, *run_ids = out.stdout.split("\n")[:-1]  # stdout: data only
        assert batch_id.startswith("bat_") and len(run_ids) == LINES
        assert f"batch {batch_id}: {LINES} runs in 3 part(s)" in out.stderr  # named before sending
        assert "429 rate_limited; sent again in" in out.stderr  # the quota refused a part: retried
        assert "part 3/3 (lines 2001-2500): 500 accepted" in out.stderr  # progress, on stderr
        await assert_every_line_once(redis, url, batch_id, run_ids)
        assert await finishes(url, batch_id)


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGINT])
async def test_a_submission_killed_midway_resumes_with_every_line_once(
    redis: Redis, redis_url: str, tmp_path: Path, sig: signal.Signals
) -> None:
    jsonl = runs_file(tmp_path / "runs.jsonl", LINES)
    journals = str(tmp_path / "state")
    async with api_at(redis_url, **QUOTA) as url:
        # `agentmill submit` forked from the test process's fork server (tests/support/forkserver.py:
        # run as `python -m app.cli` would, without a fresh interpreter's imports), its output piped
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        try:
            proc = forkserver.popen(
                ["-m", "app.cli", "submit", str(jsonl), "--api", url], cwd=ROOT,
                env={**os.environ, "AGENTMILL_CLI_STATE_DIR": journals, "COLUMNS": "200"},
                stdout=out_w, stderr=err_w,
            )  # fmt: skip
        finally:
            os.close(out_w)
            os.close(err_w)
        with open(out_r, "rb") as out, open(err_r, "rb") as err:
            drained = asyncio.ensure_future(asyncio.to_thread(out.read))  # stdout, read as it comes
            said: list[str] = []
            while not said or not said[-1].startswith("part 1/3 (lines 1-1000): 1000 accepted"):
                said.append((await asyncio.wait_for(asyncio.to_thread(err.readline), 15)).decode())
                assert said[-1], said
            proc.send_signal(sig)  # part 2 is waiting out its 429
            tail = await asyncio.wait_for(asyncio.to_thread(err.read), 15)
            await asyncio.wait_for(drained, 15)
        await asyncio.to_thread(proc.wait, 15)
        said.append(tail.decode())
        batch_id = said[0].split()[1].rstrip(":")
        resume = next(line for line in said if "resume with:" in line).split("resume with: ")[1].split()
        assert resume[:2] == ["agentmill", "submit"] and resume[-2:] == ["--batch-id", batch_id]
        if sig == signal.SIGINT:  # Ctrl-C: says where it stopped and how to go on
            assert proc.returncode == 130 and "interrupted: batch" in said[-1] and "Traceback" not in said[-1]
        async with httpx.AsyncClient(base_url=url) as c:
            view = (await c.get(f"/v1/batches/{batch_id}")).json()
        assert view["total"] == 1_000 and not view["finished"]
        again = await asyncio.to_thread(
            cli, redis_url, *resume[1:], env={"AGENTMILL_CLI_STATE_DIR": journals}
        )
        assert again.returncode == 0, again.stderr
        assert "1 sent before" in again.stderr and "part 1/3" not in again.stderr  # only what was missing
        printed = again.stdout.split("\n")[1:-1]
        await assert_every_line_once(redis, url, batch_id, printed)
        # Running it once more sends nothing and prints the same runs.
        third = await asyncio.to_thread(
            cli, redis_url, *resume[1:], env={"AGENTMILL_CLI_STATE_DIR": journals}
        )
        assert third.returncode == 0 and "part " not in third.stderr and third.stdout == again.stdout
        assert await finishes(url, batch_id)


async def test_straight_to_redis_a_batch_sent_again_without_its_journal_creates_nothing_twice(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """The direct-Redis path, in parts of 2; the journal lost (another machine): --batch-id sends
    every part again, and item i is still the same run."""
    jsonl = runs_file(tmp_path / "runs.jsonl", 5)
    env = {"AGENTMILL_MAX_BATCH": "2", "AGENTMILL_CLI_STATE_DIR": str(tmp_path / "state")}
    first = await asyncio.to_thread(cli, redis_url, "submit", str(jsonl), "--batch-id", "nightly-1", env=env)
    assert first.returncode == 0 and "part 3/3 (lines 5-5): 1 accepted" in first.stderr, first.stderr
    (tmp_path / "state" / "submit-nightly-1.jsonl").unlink()
    again = await asyncio.to_thread(cli, redis_url, "submit", str(jsonl), "--resume", "nightly-1", env=env)
    assert again.returncode == 0 and "part 1/3" in again.stderr and again.stdout == first.stdout
    assert first.stdout.split()[0] == "nightly-1" and len(set(first.stdout.split()[1:])) == 5
    p = producer_for(redis, redis_url)
    view = await Catalog(p).batch(DEFAULT_TENANT, "nightly-1")
    assert view is not None and view["total"] == 5
    # Another file under the same batch and journal is refused, not mixed in.
    other = runs_file(tmp_path / "other.jsonl", 3)
    mixed = await asyncio.to_thread(cli, redis_url, "submit", str(other), "--batch-id", "nightly-1", env=env)
    assert mixed.returncode == 2 and "started from another file" in mixed.stderr, mixed.stderr
