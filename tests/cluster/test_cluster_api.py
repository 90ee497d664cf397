"""What users do through the HTTP API, on a real Redis Cluster the module starts itself (three
masters, three replicas, AGENTMILL_REDIS_CLUSTER=true, 16 partitions): a 200-run batch with its
webhook, paged listings, tailing a run's stream with plain redis-cli and SSE, a session whose runs
live away from their home partition, an abort, and a manual failover under a second batch.

One cluster, one API (uvicorn in this process) and one in-process worker serve the whole module;
the tests run in file order on one event loop, and the failover comes last.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import shutil
import subprocess
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import orjson
import pytest
import pytest_asyncio
from starlette.requests import Request
from starlette.responses import Response

from producer.scope import Scope
from shared import keys
from shared.settings import Settings
from tests.integration.api_support import A, HookServer, api, key, run_body
from tests.integration.api_support import settings as api_settings
from tests.integration.helpers import running_worker
from tests.support.redis_cluster import LocalRedisCluster
from tests.support.schema import ids_where
from tests.support.waits import until

# One process runs the module (--dist loadgroup): its cluster (and what it builds on it) is
# module-scoped, and spread over the test processes each built all of it again.
pytestmark = [
    pytest.mark.integration,
    pytest.mark.xdist_group("cluster_api"),
    pytest.mark.timeout(120),
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.skipif(
        shutil.which("redis-cli") is None or shutil.which("redis-server") is None,
        reason="redis-server and redis-cli are needed to create a cluster",
    ),
]

LAYOUT = keys.Layout(16)  # the default partitions on a cluster
BATCH = "cl-api-batch-200"
FAILOVER_BATCH = "cl-api-batch-failover"
SESSION = "cl-api-session"
HOOK_PATH = "/batch-done"


# ---- the module's cluster, API and worker ----


@dataclass
class Env:
    cluster: LocalRedisCluster
    http: httpx.AsyncClient
    hook_url: str
    received: list[tuple[float, dict[str, str], dict[str, Any]]] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)

    def hooks_for(self, batch_id: str) -> list[tuple[float, dict[str, str], dict[str, Any]]]:
        return [r for r in self.received if r[2].get("batchId") == batch_id]


@dataclass
class DoneBatch:
    ids: list[str]
    view: dict[str, Any]
    done_at: float  # monotonic, when GET /v1/batches/{id} first said finished


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalRedisCluster]:
    t0 = time.monotonic()
    with LocalRedisCluster(masters=3, replicas_per_master=1) as c:
        print(f"\ncluster of {len(c.ports)} nodes up in {time.monotonic() - t0:.1f} s")
        yield c


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def env(cluster: LocalRedisCluster) -> AsyncIterator[Env]:
    received: list[tuple[float, dict[str, str], dict[str, Any]]] = []

    async def hook(request: Request) -> Response:
        received.append((time.monotonic(), dict(request.headers), orjson.loads(await request.body())))
        return Response(status_code=200)

    receiver = HookServer(hook, HOOK_PATH)
    await receiver.start()
    s = api_settings(cluster.url, redis_cluster=True, webhook_allow_hosts="127.0.0.1")
    assert s.partitions is None, "AGENTMILL_PARTITIONS is set: this module tests the default 16"
    try:
        async with (
            api(s) as url,
            running_worker(cluster.url, redis_cluster=True),
            httpx.AsyncClient(base_url=url, headers=A, timeout=15) as http,
        ):
            yield Env(cluster, http, f"http://127.0.0.1:{receiver.port}{HOOK_PATH}", received)
    finally:
        await receiver.stop()


async def get_json(http: httpx.AsyncClient, path: str, **params: Any) -> Any:
    r = await http.get(path, params=params)
    assert r.status_code == 200, f"GET {path} {params}: {r.status_code} {r.text}"
    return r.json()


async def get_runs(
    http: httpx.AsyncClient, run_ids: list[str], parallel: int = 16
) -> dict[str, dict[str, Any]]:
    """GET /v1/runs/{id} for each id (a few at a time); every answer must be a 200."""
    sem = asyncio.Semaphore(parallel)

    async def one(rid: str) -> dict[str, Any]:
        async with sem:
            view: dict[str, Any] = await get_json(http, f"/v1/runs/{rid}")
            return view

    views = await asyncio.gather(*(one(r) for r in run_ids))
    return dict(zip(run_ids, views, strict=True))


async def all_pages(
    http: httpx.AsyncClient, path: str, *, max_pages: int = 200, **params: Any
) -> list[list[dict[str, Any]]]:
    """Every page of a listing, following ``next`` until it is null."""
    pages: list[list[dict[str, Any]]] = []
    cursor: str | None = None
    for _ in range(max_pages):
        q = {**params, **({"cursor": cursor} if cursor else {})}
        page = await get_json(http, path, **q)
        pages.append(page["runs"])
        cursor = page["next"]
        if cursor is None:
            return pages
    raise AssertionError(f"{path} {params}: the cursor did not end within {max_pages} pages")


async def wait_batch_finished(http: httpx.AsyncClient, batch_id: str, within: float) -> dict[str, Any]:
    async def finished() -> Any:
        view = await get_json(http, f"/v1/batches/{batch_id}")
        return view if view["finished"] else None

    try:
        view: dict[str, Any] = await until(f"batch {batch_id} to finish", finished, within, every=0.2)
    except AssertionError as e:
        last = await get_json(http, f"/v1/batches/{batch_id}")
        raise AssertionError(f"{e}; batch now: {last}") from None
    return view


def part_of(view: dict[str, Any]) -> keys.Partition:
    """The partition a run lives on, from the streamKey GET /v1/runs/{id} shows."""
    assert view.get("streamKey"), f"GET /v1/runs/{view.get('runId')} shows no streamKey: {view}"
    return LAYOUT.of_key(view["streamKey"])


def slot_owners(cluster: LocalRedisCluster) -> dict[int, int]:
    """Each partition slot's master port, from one look at the cluster."""
    masters = cluster.masters()
    assert len(masters) == 3, masters
    out = {}
    for p in LAYOUT.parts:
        owners = [m.port for m in masters if any(a <= p.slot <= b for a, b in m.slots)]
        assert len(owners) == 1, (p, masters)
        out[p.slot] = owners[0]
    return out


async def sse_events(
    http: httpx.AsyncClient, run_id: str, within: float = 10.0
) -> list[tuple[int, str, dict[str, Any]]]:
    """(id, event, data) of every event GET /v1/runs/{id}/events sends (it ends after the terminal one)."""
    out: list[tuple[int, str, dict[str, Any]]] = []

    async def read() -> None:
        async with http.stream("GET", f"/v1/runs/{run_id}/events") as r:
            assert r.status_code == 200, (r.status_code, await r.aread())
            assert r.headers["content-type"].startswith("text/event-stream"), r.headers
            ev: dict[str, str] = {}
            async for line in r.aiter_lines():
                if line == "":
                    if "id" in ev:
                        out.append((int(ev["id"]), ev["event"], orjson.loads(ev["data"])))
                    ev = {}
                elif not line.startswith(":"):
                    name, _, value = line.partition(":")
                    ev[name] = value.removeprefix(" ")

    try:
        await asyncio.wait_for(read(), within)
    except TimeoutError:
        raise AssertionError(
            f"the SSE stream of {run_id} did not end within {within} s; got seqs {[e[0] for e in out]}"
        ) from None
    return out


# ---- 1-3: a 200-run batch ----


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def batch200(env: Env) -> DoneBatch:
    runs = [run_body([{"text": f"answer {i}"}]) for i in range(200)]
    t0 = time.monotonic()
    r = await env.http.post(
        "/v1/runs/batch", json={"runs": runs, "batchId": BATCH, "batchWebhook": env.hook_url}, timeout=30
    )
    assert r.status_code == 200, r.text
    assert r.json()["batchId"] == BATCH
    results = r.json()["results"]
    errors = [x for x in results if "runId" not in x]
    assert errors == [] and len(results) == 200, errors[:3]
    ids = [x["runId"] for x in results]
    assert len(set(ids)) == 200
    env.timings["batch200 submit"] = time.monotonic() - t0
    view = await wait_batch_finished(env.http, BATCH, within=45)
    done_at = time.monotonic()
    env.timings["batch200 submit -> finished"] = done_at - t0
    return DoneBatch(ids, view, done_at)


async def test_a_200_run_batch_completes_fires_its_webhook_once_and_spreads_over_every_master(
    env: Env, batch200: DoneBatch
) -> None:
    view = batch200.view
    assert view["batchId"] == BATCH and view["finished"] is True, view
    assert view["total"] == 200 and view["done"] == 200 and view["progress"] == 1.0, view
    assert view["counts"]["completed"] == 200, view["counts"]
    assert sum(view["counts"].values()) == 200, view["counts"]
    assert view["finishedAt"] is not None and view["finishedAt"] >= view["createdAt"], view

    # The batch webhook: once, when the batch finished; nothing more comes afterwards.
    await until(f"the webhook of batch {BATCH}", lambda: asyncio.sleep(0, env.hooks_for(BATCH)), within=15)
    first = env.hooks_for(BATCH)[0][0]
    env.timings["batch200 finished -> webhook"] = first - batch200.done_at
    await asyncio.sleep(2.5)  # the deliverer polls every 0.5 s: a second delivery would be here by now
    hooks = env.hooks_for(BATCH)
    assert len(hooks) == 1, [(h[1].get("x-agentmill-delivery"), h[2]) for h in hooks]
    _, headers, sent = hooks[0]
    assert headers["x-agentmill-delivery"] == Scope.of(Settings(), "tenant-a").batch_delivery(BATCH), headers
    assert sent["batchId"] == BATCH and sent["finished"] is True, sent
    assert sent["total"] == 200 and sent["done"] == 200 and sent["counts"]["completed"] == 200, sent

    # Every run completed, on its home partition, and the partitions' slots span all three masters.
    views = await get_runs(env.http, batch200.ids)
    statuses = Counter(v["status"] for v in views.values())
    assert statuses == Counter({"completed": 200}), statuses
    owners = slot_owners(env.cluster)
    per_master: Counter[int] = Counter()
    for rid, v in views.items():
        part = part_of(v)
        assert part is LAYOUT.home(key(rid)), (rid, v["streamKey"], LAYOUT.home(key(rid)))
        assert v["lastSeq"] >= 3, v  # running, the answer, completed at least
        per_master[owners[part.slot]] += 1
    print(f"runs per master: {dict(per_master)}")
    assert set(per_master) == {m.port for m in env.cluster.masters()}, per_master
    assert min(per_master.values()) >= 20, per_master  # 16 partitions over 3 masters: ~60 each


async def test_the_batch_listing_pages_every_run_once_newest_first(env: Env, batch200: DoneBatch) -> None:
    limit = 7
    pages = await all_pages(env.http, "/v1/runs", batchId=BATCH, limit=limit)
    rows = [row for page in pages for row in page]
    listed = [row["runId"] for row in rows]
    assert len(listed) == 200 and len(set(listed)) == 200, (len(listed), len(set(listed)))
    assert set(listed) == set(batch200.ids), set(batch200.ids) ^ set(listed)
    assert len(pages) == math.ceil(200 / limit), [len(p) for p in pages]
    assert all(len(p) == limit for p in pages[:-1]) and 0 < len(pages[-1]) <= limit, [len(p) for p in pages]
    order = [(row["createdAt"], key(row["runId"])) for row in rows]  # ties: by the id the keys use
    assert order == sorted(order, reverse=True), "not newest first (createdAt, then the run's key descending)"
    ties = sum(1 for a, b in itertools.pairwise(order) if a[0] == b[0])
    print(f"batch listing: {len(pages)} pages of {limit}; {ties} neighbours share a createdAt")
    for row in rows:
        assert row["batchId"] == BATCH and row["status"] == "completed" and row["agent"] == "scripted", row
        assert row["finishedAt"] >= row["createdAt"], row

    everything = [row for page in await all_pages(env.http, "/v1/runs", limit=500) for row in page]
    ids = [row["runId"] for row in everything]
    assert len(ids) == len(set(ids)), "a run listed twice by GET /v1/runs"
    assert set(batch200.ids) <= set(ids), len(set(batch200.ids) - set(ids))
    order = [(row["createdAt"], key(row["runId"])) for row in everything]
    assert order == sorted(order, reverse=True)


async def test_a_runs_stream_tails_with_plain_redis_cli_and_replays_over_sse(
    env: Env, batch200: DoneBatch
) -> None:
    rid = batch200.ids[0]
    view = await get_json(env.http, f"/v1/runs/{rid}")
    stream_key, last_seq = view["streamKey"], view["lastSeq"]
    assert view["status"] == "completed" and last_seq >= 3, view
    part = part_of(view)
    assert stream_key == part.events(key(rid)), (stream_key, part.events(key(rid)))
    # Ask a master that does not own the stream's slot: redis-cli -c follows the MOVED.
    owner = env.cluster.master_for_slot(part.slot)
    other = next(m.port for m in env.cluster.masters() if m.port != owner)
    cli = shutil.which("redis-cli")
    assert cli is not None
    done = await asyncio.to_thread(
        subprocess.run,
        [cli, "-c", "-p", str(other), "--json", "XRANGE", stream_key, "-", "+"],
        capture_output=True,
        timeout=10,
    )
    assert done.returncode == 0, done.stderr.decode()
    entries = orjson.loads(done.stdout)
    assert isinstance(entries, list) and len(entries) == last_seq, done.stdout[:500]
    cli_ids = [e[0] for e in entries]
    cli_fields = [dict(zip(e[1][::2], e[1][1::2], strict=True)) for e in entries]
    assert cli_ids == [f"{n}-0" for n in range(1, last_seq + 1)], cli_ids
    assert [int(f["seq"]) for f in cli_fields] == list(range(1, last_seq + 1))
    assert orjson.loads(cli_fields[-1]["payload"])["status"] == "completed", cli_fields[-1]

    sse = await sse_events(env.http, rid)
    assert [seq for seq, _, _ in sse] == list(range(1, last_seq + 1)), [s for s, _, _ in sse]
    assert [kind for _, kind, _ in sse] == [f["kind"] for f in cli_fields]
    assert all(data["seq"] == seq and data["runId"] == rid for seq, _, data in sse), sse[:2]
    assert sse[-1][1] == "status" and sse[-1][2]["payload"]["status"] == "completed", sse[-1]
    # Resuming after a seq replays only what follows it.
    r = await env.http.get(f"/v1/runs/{rid}/events", headers={"Last-Event-ID": str(last_seq - 1)})
    assert r.status_code == 200 and [ln for ln in r.text.splitlines() if ln.startswith("id:")] == [
        f"id: {last_seq}"
    ], r.text


# ---- 4: a session of client-named runs living away from their home partitions ----


def session_run_ids() -> list[str]:
    """Three ids: the first and last hash to another partition than the session, the middle one to
    the session's own."""
    home = LAYOUT.home(key(SESSION))
    away = ids_where(LAYOUT, "cl-api-srun-", 2, lambda p: p is not home, key)
    (same,) = ids_where(LAYOUT, "cl-api-srun-h", 1, lambda p: p is home, key)
    return [away[0], same, away[1]]


async def test_a_session_of_client_named_runs_away_from_home(env: Env) -> None:
    ids = session_run_ids()
    home = LAYOUT.home(key(SESSION))
    assert [LAYOUT.home(key(i)) is home for i in ids] == [False, True, False]
    scripts: list[list[dict[str, Any]]] = [
        [{"text": "first answer", "delayMs": 300}],
        [{"text": "second answer", "delayMs": 300}],
        [{"echoContext": True}],
    ]
    for rid, script in zip(ids, scripts, strict=True):
        r = await env.http.post(
            "/v1/runs", json=run_body(script, runId=rid, sessionId=SESSION, autoCreateSession=True)
        )
        assert r.status_code == 202, r.text
        assert r.json()["runId"] == rid, r.json()
    for rid in ids:
        r = await env.http.get(f"/v1/runs/{rid}/wait", params={"timeout": 20})
        assert r.status_code == 200 and r.json()["status"] == "completed", r.text
    views = await get_runs(env.http, ids)
    for rid, v in views.items():
        assert v["runId"] == rid and v["sessionId"] == SESSION and v["status"] == "completed", v
        assert part_of(v) is home, f"run {rid} lives on {part_of(v)}, not its session's {home}"

    # One after the other: each run started after the previous one ended.
    spans = []
    for rid in ids:
        events = (await get_json(env.http, f"/v1/runs/{rid}/events", format="json", limit=1000))["events"]
        assert [e["seq"] for e in events] == list(range(1, views[rid]["lastSeq"] + 1)), events
        spans.append((events[0]["ts"], events[-1]["ts"]))
    for (_, end), (start, _) in itertools.pairwise(spans):
        assert start >= end, f"session runs overlapped: {spans}"
    # The third saw the first two's answers: the session's history crossed partitions intact.
    final = views[ids[2]]["result"]["finalAssistantMessage"]["content"]
    assert "first answer" in final and "second answer" in final, final

    session = await get_json(env.http, f"/v1/sessions/{SESSION}")
    assert session["sessionId"] == SESSION and session["runs"] == ids, session
    assert session["activeRun"] is None, session
    assert [loop["runId"] for loop in session["history"]] == ids, session["history"]
    listed = [
        row["runId"] for page in await all_pages(env.http, "/v1/runs", sessionId=SESSION) for row in page
    ]
    assert listed == ids[::-1], listed


# ---- 5: abort ----


async def test_aborting_a_long_running_run(env: Env) -> None:
    r = await env.http.post("/v1/runs", json=run_body([{"text": "x", "delayMs": 20000}]))
    assert r.status_code == 202, r.text
    rid = r.json()["runId"]

    async def running() -> Any:
        return (await get_json(env.http, f"/v1/runs/{rid}"))["status"] == "running"

    await until(f"run {rid} to be running", running, within=10, every=0.05)
    t0 = time.monotonic()
    r = await env.http.post(f"/v1/runs/{rid}/abort")
    assert r.status_code == 200 and r.json() == {"runId": rid, "result": "requested"}, r.text
    r = await env.http.get(f"/v1/runs/{rid}/wait", params={"timeout": 5})
    elapsed = time.monotonic() - t0
    env.timings["abort -> aborted"] = elapsed
    assert r.status_code == 200, r.text
    view = r.json()
    assert view["status"] == "aborted", f"still {view['status']} {elapsed:.1f} s after the abort: {view}"
    assert elapsed < 5.0, elapsed
    assert view["result"]["status"] == "aborted", view
    events = (await get_json(env.http, f"/v1/runs/{rid}/events", format="json"))["events"]
    assert events[-1]["kind"] == "status" and events[-1]["payload"]["status"] == "aborted", events[-1]
    assert [e["seq"] for e in events] == list(range(1, view["lastSeq"] + 1))
    again = await env.http.post(f"/v1/runs/{rid}/abort")
    assert again.status_code == 200 and again.json()["result"] == "finished", again.text


async def test_runs_at_a_time_and_priorities_on_every_partition(env: Env) -> None:
    """Runs with a runAt 4 s ahead, spread over the partitions (a batch), stay scheduled, listed
    as such, then run; one of them aborted while scheduled never runs."""
    at = int(time.time() * 1000) + 4000
    runs = [run_body([{"text": f"at {i}"}], runAt=at, priority=i % 10) for i in range(40)]
    r = await env.http.post("/v1/runs/batch", json={"runs": runs, "batchId": "cl-api-run-at"})
    assert r.status_code == 200, r.text
    ids = [x["runId"] for x in r.json()["results"]]
    homes = {LAYOUT.home(key(i)).index for i in ids}
    assert len(homes) > 8, homes  # spread over the partitions, so over every master
    listed = (await get_json(env.http, "/v1/runs", status="scheduled", batchId="cl-api-run-at", limit=100))[
        "runs"
    ]
    assert {x["runId"] for x in listed} == set(ids) and {x["runAt"] for x in listed} == {at}
    assert (await env.http.post(f"/v1/runs/{ids[0]}/abort")).json()["result"] == "aborted"

    async def ran() -> Any:
        view = await get_json(env.http, "/v1/batches/cl-api-run-at")
        return view["counts"]["completed"] == len(ids) - 1 and view["counts"]["scheduled"] == 0

    await until("the scheduled runs to complete", ran, within=30, every=0.1)
    assert time.time() * 1000 >= at
    for rid in ids[1:4]:
        events = (await get_json(env.http, f"/v1/runs/{rid}/events", format="json"))["events"]
        assert events[0]["ts"] >= at, (events[0], at)
    assert (await get_json(env.http, f"/v1/runs/{ids[0]}"))["status"] == "aborted"


# ---- 6: a manual failover under load (last: it changes the cluster) ----


async def test_a_manual_failover_while_a_batch_runs(env: Env) -> None:
    script = [
        {
            "text": "calling a tool",
            "delayMs": 600,
            "toolCalls": [{"name": "echo", "arguments": {"text": "a"}}],
        },
        {
            "text": "calling it again",
            "delayMs": 600,
            "toolCalls": [{"name": "echo", "arguments": {"text": "b"}}],
        },
        {"text": "and the answer after them", "delayMs": 500},
    ]
    r = await env.http.post(
        "/v1/runs/batch", json={"runs": [run_body(script) for _ in range(50)], "batchId": FAILOVER_BATCH}
    )
    assert r.status_code == 200, r.text
    ids = [x.get("runId") for x in r.json()["results"]]
    assert len(ids) == 50 and all(ids), r.json()["results"][:3]
    t0 = time.monotonic()
    by_part = Counter(LAYOUT.home(key(rid)) for rid in ids)
    target = by_part.most_common(1)[0][0]
    on_target = [rid for rid in ids if LAYOUT.home(key(rid)) is target]

    async def some_running() -> Any:
        views = await get_runs(env.http, on_target)
        return [rid for rid, v in views.items() if v["status"] == "running"]

    await until(f"a run of {target} running", some_running, within=15, every=0.05)
    old = env.cluster.master_for_slot(target.slot)
    fo_start_ms, t_fo = time.time() * 1000, time.monotonic()
    new = await asyncio.to_thread(env.cluster.failover, target.slot)
    fo_end_ms = time.time() * 1000
    env.timings["failover"] = time.monotonic() - t_fo
    assert new != old and env.cluster.master_for_slot(target.slot) == new, (old, new)
    mid = await get_json(env.http, f"/v1/batches/{FAILOVER_BATCH}")
    print(
        f"failover of slot {target.slot} ({len(on_target)} runs there): {old} -> {new}; batch then {mid['counts']}"
    )
    assert mid["done"] < 50, f"the batch had finished before the failover ended: {mid}"

    view = await wait_batch_finished(env.http, FAILOVER_BATCH, within=40)
    env.timings["failover batch submit -> finished"] = time.monotonic() - t0
    assert view["total"] == 50 and view["counts"]["completed"] == 50, view["counts"]

    views = await get_runs(env.http, ids)
    assert Counter(v["status"] for v in views.values()) == Counter({"completed": 50})
    across = 0
    for rid in on_target:  # the runs of the failed-over partition: clean streams, read from the new master
        assert part_of(views[rid]) is target
        events = (await get_json(env.http, f"/v1/runs/{rid}/events", format="json", limit=1000))["events"]
        assert [e["seq"] for e in events] == list(range(1, views[rid]["lastSeq"] + 1)), rid
        assert sum(1 for e in events if e["kind"] == "tool_result") == 2, [e["kind"] for e in events]
        across += events[0]["ts"] < fo_start_ms and events[-1]["ts"] > fo_end_ms
    assert across > 0, "no run of the failed-over partition was writing before and after the failover"
    print("timings (s): " + ", ".join(f"{k} {v:.2f}" for k, v in env.timings.items()))


# ---- blocking stream reads across a failover ----
# A master demoted by a failover answers its blocked XREADs "UNBLOCKED force unblock …": the
# topology retries that on the new master (before, /wait answered 500 and SSE streams were cut).


async def test_long_polls_and_sse_streams_survive_a_failover_of_their_runs_master(env: Env) -> None:
    part = LAYOUT.parts[5]
    ids = ids_where(LAYOUT, "cl-api-lp-", 4, lambda p: p is part, key)
    for rid in ids:
        r = await env.http.post(
            "/v1/runs", json=run_body([{"text": "slow answer", "delayMs": 2500}], runId=rid)
        )
        assert r.status_code == 202, r.text

    async def all_running() -> Any:
        return all(v["status"] == "running" for v in (await get_runs(env.http, ids)).values())

    await until("the long-poll runs to be running", all_running, within=10, every=0.05)
    waits = [asyncio.create_task(env.http.get(f"/v1/runs/{rid}/wait", params={"timeout": 20})) for rid in ids]
    streams = [asyncio.create_task(sse_events(env.http, rid, within=25)) for rid in ids[:2]]
    try:
        await asyncio.sleep(0.3)  # every long-poll and stream is blocked in XREAD on the partition's master
        await asyncio.to_thread(env.cluster.failover, part.slot)
        answers = await asyncio.wait_for(asyncio.gather(*waits), 30)
        tails = await asyncio.wait_for(asyncio.gather(*streams), 30)
    finally:
        for t in [*waits, *streams]:
            t.cancel()
        await asyncio.gather(*waits, *streams, return_exceptions=True)
    for rid, r in zip(ids, answers, strict=True):
        assert r.status_code == 200 and r.json()["status"] == "completed", (rid, r.status_code, r.text[:200])
    for rid, events in zip(ids, tails, strict=False):
        last = (await get_json(env.http, f"/v1/runs/{rid}"))["lastSeq"]
        assert [seq for seq, _, _ in events] == list(range(1, last + 1)), (rid, [e[0] for e in events])
