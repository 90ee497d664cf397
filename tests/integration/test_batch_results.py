"""A batch's results as one JSONL download (GET /v1/batches/{id}/results): a real API, a
real redis-server and a real worker."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import orjson
import pytest
from redis.asyncio import Redis

from agentmill_client.api import BatchResultLine
from agentmill_client.client import AsyncClient, Client
from producer.batch_results import BYTES_MAX, PAGE, SCAN_MAX, walk
from producer.listing import Catalog
from tests.integration.api_support import A, B, api, run_body, settings, until_batch
from tests.integration.helpers import producer_for, running_worker
from tests.support.cli import cli
from tests.support.redis_server import free_port

pytestmark = pytest.mark.integration
TERMINAL = ("completed", "failed", "aborted")
PART = 1_000
# The clients' timeout: only a hang's bound. The API and the worker share the test's loop, and with
# 64 runs going on a loaded machine an answer took over httpx's default 5 s (a read timed out).
HANG_S = 60


def _item(i: int) -> dict[str, Any]:
    """Item i answers "answer i"; every 7th fails instead (the provider refuses it)."""
    if i % 7 == 3:
        return run_body([{"error": {"status": 400, "message": f"bad request {i}"}}])
    return run_body([{"text": f"answer {i}"}])


async def _send(c: httpx.AsyncClient, batch_id: str, n: int) -> None:
    """The batch in parts of PART items, each placed by its offset, the last closing it."""
    for start in range(0, n, PART):
        part = [_item(i) for i in range(start, min(n, start + PART))]
        body = {"runs": part, "batchId": batch_id, "offset": start, "more": start + PART < n}
        r = await c.post("/v1/runs/batch", json=body)
        assert r.status_code == 200, r.text
        assert all("runId" in x for x in r.json()["results"])


async def _export(c: httpx.AsyncClient, batch_id: str, **params: str) -> list[dict[str, Any]]:
    """The download, read as a stream, each line parsed on its own."""
    lines: list[dict[str, Any]] = []
    async with c.stream("GET", f"/v1/batches/{batch_id}/results", params=params) as r:
        assert r.status_code == 200
        assert r.headers["content-type"] == "application/x-ndjson"
        async for line in r.aiter_lines():
            if line:
                lines.append(orjson.loads(line))
    return lines


def _check_line(line: dict[str, Any]) -> None:
    """A line says what its run is: ended with its answer or error, or still going with neither."""
    i = line["index"]
    if line["status"] not in TERMINAL:
        assert not {"text", "output", "lastError", "usage"} & line.keys(), line
    elif i % 7 == 3:
        assert line["status"] == "failed" and "text" not in line, line
        assert line["lastError"]["code"] and f"bad request {i}" in line["lastError"]["message"], line
    else:
        assert line["status"] == "completed" and line["text"] == f"answer {i}", line
        assert line["usage"]["outputTokens"] >= 0


async def _exported_in_item_order(redis_url: str, n: int) -> None:
    """Exported before the worker starts (all queued), while it works through the batch, and after:
    every run once, in item order, what it says matching its item. Four partitions: the batch's
    runs spread over them, the export merges their pages."""
    s = settings(redis_url, tenant_submits_per_second=1_000_000, partitions=4)
    async with api(s) as url, httpx.AsyncClient(base_url=url, headers=A, timeout=HANG_S) as c:
        await _send(c, "big", n)
        before = await _export(c, "big")
        assert [x["index"] for x in before] == list(range(n))
        assert {x["status"] for x in before} == {"queued"}
        assert all(set(x) == {"runId", "index", "status"} for x in before)
        async with running_worker(redis_url, max_jobs=64, partitions=4):
            # While the runs finish: each run once, in order, finished ones with their answers.
            await until_batch(c, "big", lambda v: v["done"] >= n // 4, within=60)
            during = await _export(c, "big")
            assert [x["index"] for x in during] == list(range(n))
            assert [x["runId"] for x in during] == [x["runId"] for x in before]
            for line in during:
                _check_line(line)
            unfinished = sum(x["status"] not in TERMINAL for x in during)
            view = await until_batch(c, "big", lambda v: v["finished"], within=60)
            assert view["finished"], view
        after = await _export(c, "big")
        assert [x["index"] for x in after] == list(range(n))
        assert [x["runId"] for x in after] == [x["runId"] for x in before]
        for line in after:
            assert line["status"] in ("completed", "failed"), line
            _check_line(line)
        print(f"{n} runs: {unfinished} were still going during the second export")

        failed = await _export(c, "big", status="failed")
        assert [x["index"] for x in failed] == [i for i in range(n) if i % 7 == 3]
        assert all(x["status"] == "failed" and x["lastError"]["code"] for x in failed)
        both = await _export(c, "big", status="failed,completed")
        assert [x["index"] for x in both] == list(range(n))


async def test_a_2000_run_batch_exports_every_run_once_in_item_order_while_it_finishes(
    redis_url: str,
) -> None:
    await _exported_in_item_order(redis_url, 2_000)


@pytest.mark.slow
async def test_a_10000_run_batch_exports_every_run_once_in_item_order_while_it_finishes(
    redis_url: str,
) -> None:
    await _exported_in_item_order(redis_url, 10_000)


async def test_results_are_the_tenants_own_and_bad_filters_are_refused(redis_url: str) -> None:
    async with (
        api(settings(redis_url)) as url,
        httpx.AsyncClient(base_url=url, headers=A, timeout=HANG_S) as c,
    ):
        await _send(c, "mine", 3)
        r = await c.get("/v1/batches/mine/results", headers=B)
        assert r.status_code == 404 and r.json()["error"]["code"] == "unknown_batch"
        r = await c.get("/v1/batches/nope/results")
        assert r.status_code == 404
        for bad in ("done", "failed,,nope", ","):
            r = await c.get("/v1/batches/mine/results", params={"status": bad})
            assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_input", (bad, r.text)
        assert [x["index"] for x in await _export(c, "mine")] == [0, 1, 2]


async def test_the_python_client_streams_typed_lines(redis_url: str) -> None:
    async with api(settings(redis_url)) as url, running_worker(redis_url):
        async with httpx.AsyncClient(base_url=url, headers=A, timeout=HANG_S) as c:
            await _send(c, "typed", 10)
            await until_batch(c, "typed", lambda v: v["finished"])
        async with AsyncClient(url, token="tok-a") as client:
            lines = [x async for x in client.batch_results("typed")]
            assert all(isinstance(x, BatchResultLine) for x in lines)
            assert [x.index for x in lines] == list(range(10))
            assert lines[0].text == "answer 0" and lines[3].last_error is not None
            failed = [x async for x in client.batch_results("typed", status=["failed"])]
            assert [x.index for x in failed] == [3]


async def test_the_blocking_client_and_the_cli_write_the_lines(redis_url: str) -> None:
    async with api(settings(redis_url)) as url, running_worker(redis_url):
        async with httpx.AsyncClient(base_url=url, headers=A, timeout=HANG_S) as c:
            await _send(c, "cli", 8)
            await until_batch(c, "cli", lambda v: v["finished"])
            expected = await _export(c, "cli")

        def blocking() -> list[BatchResultLine]:
            with Client(url, token="tok-a") as client:
                return list(client.batch_results("cli"))

        assert [
            x.model_dump(by_alias=True, exclude_none=True) for x in await asyncio.to_thread(blocking)
        ] == expected
        # stdout is the lines and nothing else, through the API and straight from Redis alike. The
        # five CLI processes run side by side.
        nobody = f"http://127.0.0.1:{free_port()}"
        via_api, direct, failed, other, down = await asyncio.gather(
            *(
                asyncio.to_thread(cli, redis_url, "batch", "results", "cli", *args)
                for args in (
                    ("--api", url, "--token", "tok-a"),
                    ("--tenant", "tenant-a"),
                    ("--tenant", "tenant-a", "--status", "failed"),
                    ("--api", url, "--token", "tok-b"),
                    ("--api", nobody),
                )
            )
        )
        for out in (via_api, direct):
            assert out.returncode == 0, out.stderr
            assert [orjson.loads(x) for x in out.stdout.splitlines()] == expected
            assert "8 run(s)" in out.stderr
        assert [orjson.loads(x)["index"] for x in failed.stdout.splitlines()] == [3]
        assert other.returncode == 2 and other.stdout == "" and "no batch cli" in other.stderr
        assert (
            down.returncode == 1
            and down.stdout == ""
            and "stopped after 0 run(s): ConnectError" in down.stderr
        )


@pytest.mark.parametrize("partitions", [1, 4])
async def test_runs_that_name_their_ids_keep_their_place_even_when_scoped(
    redis_url: str, partitions: int
) -> None:
    """Items with their own runId, one of them an id another tenant holds (each run is kept under
    its tenant's HMAC-scoped id, producer.submission.Scope): each line at its item's index, under
    the id the tenant chose."""
    s = settings(redis_url, partitions=partitions)
    async with api(s) as url, httpx.AsyncClient(base_url=url, headers=A, timeout=HANG_S) as c:
        r = await c.post("/v1/runs", json={**_item(0), "runId": "taken-1"}, headers=B)
        assert r.status_code in (200, 201, 202), r.text
        items = [
            {**_item(0), "runId": "own-0"},
            {**_item(1), "runId": "taken-1"},
            _item(2),
            {**_item(3), "runId": "own-3"},
        ]
        r = await c.post("/v1/runs/batch", json={"runs": items, "batchId": "named", "offset": 10})
        assert r.status_code == 200, r.text
        ids = [x["runId"] for x in r.json()["results"]]
        assert ids[:2] == ["own-0", "taken-1"] and ids[3] == "own-3"
        lines = await _export(c, "named")
        assert [(x["index"], x["runId"]) for x in lines] == list(zip(range(10, 14), ids, strict=True))
        assert [x["runId"] for x in await _export(c, "named", status="queued")] == ids


async def test_each_script_call_looks_at_a_bounded_number_of_runs(redis: Redis, redis_url: str) -> None:
    """BATCH_RESULTS on a real Redis: a filter nothing matches still stops after SCAN_MAX entries,
    a page after PAGE runs, and big results after BYTES_MAX; the next call starts after where it
    stopped."""
    n = SCAN_MAX + PAGE + 10
    p = producer_for(redis, redis_url, tenant_submits_per_second=0, tenant_max_active=0, max_batch=n)
    await p.submit_many([_item(1)] * n, batch_id="bounded")
    part = p.parts.parts[0]

    async def call(start: tuple[int, str], wanted: str, batch: str = "bounded") -> list[Any]:
        args = ["default", batch, *start, PAGE, SCAN_MAX, wanted, BYTES_MAX]
        return list(await p.scripts.batch_results(*p.scripts.frame(part, [], args)))

    empty = await call((0, ""), "failed")
    assert len(empty) == 2 and int(empty[0]) == SCAN_MAX - 1  # stopped at the 2,000th entry, none kept
    rest = await call((int(empty[0]), empty[1].decode()), "failed")
    assert rest == [b"", b""]  # the end, after the other 510
    page = await call((0, ""), "")
    assert (len(page) - 2) // 5 == PAGE and int(page[0]) == PAGE - 1
    # Results of 300 KB each (aborted with a long reason): a call answers 4 of them, not 500.
    await p.submit_many([_item(1)] * 10, batch_id="large")
    await Catalog(p).abort_batch("default", "large", "x" * 300_000)
    page = await call((0, ""), "", "large")
    assert (len(page) - 2) // 5 == 4 and int(page[0]) == 3


async def test_runs_sharing_an_item_index_page_by_rank_on_a_real_redis(redis: Redis, redis_url: str) -> None:
    """A part sent again at the same offset with other runIds: two runs per item index. Pages of one
    run each (the smallest bound) still give every run once, in (index, runId) order."""
    p = producer_for(redis, redis_url, tenant_submits_per_second=0)
    for prefix, more in (("b-", True), ("a-", False)):
        items = [{**_item(i), "runId": f"{prefix}{i}"} for i in range(3)]
        await p.submit_many(items, batch_id="twice", more=more)
    part = p.parts.parts[0]

    async def ask(where: list[int], start: tuple[int, str]) -> list[Any]:
        args = ["default", "twice", *start, 1, 1, "", BYTES_MAX]
        return [list(await p.scripts.batch_results(*p.scripts.frame(part, [], args)))]

    got = [(r[0], r[1]) async for page in walk(ask, 1) for r in page]
    assert got == [(i, f"{x}-{i}") for i in range(3) for x in "ab"]


async def test_runs_submitted_on_their_own_keep_their_place(redis_url: str) -> None:
    """Items whose input turns out to place them elsewhere than their id was claimed (a session
    created from ``"autoCreateSession": "true"``, which the placement before validation does not
    read as true) go through SUBMIT on their own, under their tenant-scoped ids; one with a session
    of its own goes in SUBMIT_MANY with the session's client id beside its item index. Each line is
    still at its item's index, under the id the tenant knows."""
    s = settings(redis_url, partitions=4)
    async with api(s) as url, httpx.AsyncClient(base_url=url, headers=A, timeout=HANG_S) as c:
        items = [{**_item(i), "autoCreateSession": "true"} if i % 2 else _item(i) for i in range(8)]
        items[3]["runId"] = "mine-3"
        items[4].update(sessionId="own-session", autoCreateSession=True)
        r = await c.post("/v1/runs/batch", json={"runs": items, "batchId": "alone", "offset": 20})
        assert r.status_code == 200, r.text
        ids = [x["runId"] for x in r.json()["results"]]
        assert ids[3] == "mine-3" and len(set(ids)) == 8
        lines = await _export(c, "alone")
        assert [(x["index"], x["runId"]) for x in lines] == list(zip(range(20, 28), ids, strict=True))
        assert (await c.get(f"/v1/runs/{ids[4]}")).json()["sessionId"] == "own-session"


async def test_a_structured_output_run_exports_its_parsed_output(redis_url: str) -> None:
    """A run with a responseFormat ends with ``result.output``: its line carries that parsed answer
    as ``output`` (and not the text it was parsed from), falsy answers included; a plain run's line
    its text. The typed client reads the same."""
    rf = {"type": "json_schema", "jsonSchema": {"name": "pick", "schema": {"type": ["object", "boolean"]}}}
    items = [
        run_body([{"json": {"colour": "green", "sure": True}}], responseFormat=rf),
        _item(1),
        run_body([{"json": False}], responseFormat=rf),
    ]
    async with api(settings(redis_url)) as url, running_worker(redis_url):
        async with httpx.AsyncClient(base_url=url, headers=A, timeout=HANG_S) as c:
            r = await c.post("/v1/runs/batch", json={"runs": items, "batchId": "shaped"})
            assert r.status_code == 200, r.text
            await until_batch(c, "shaped", lambda v: v["finished"])
            lines = await _export(c, "shaped")
        assert [x["status"] for x in lines] == ["completed"] * 3, lines
        assert lines[0]["output"] == {"colour": "green", "sure": True} and "text" not in lines[0]
        assert lines[1]["text"] == "answer 1" and "output" not in lines[1]
        assert lines[2]["output"] is False and "text" not in lines[2]
        async with AsyncClient(url, token="tok-a") as client:
            typed = [x async for x in client.batch_results("shaped")]
        assert [x.output for x in typed] == [{"colour": "green", "sure": True}, None, False]
