"""The console renders a run's usage and output and a batch's usage totals, checked on
the HTML app.js builds: Node runs app.js with a small DOM of its own (tests/support/console_dom.js)
against a real API, redis-server, worker and OpenAI-compatible server, so no browser is needed.
(The Chromium test, tests/integration/test_console_browser.py, drives the same pages in a browser.)"""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
from pathlib import Path

import httpx
import orjson
import pytest

from producer.api.routes_ui import UI_DIR
from tests.integration.api_support import A, B, api, run_body, settings, until_batch
from tests.integration.helpers import running_worker
from tests.support.fake_openai import FakeOpenAI, Reply
from tests.support.pricing import USER, cost

pytestmark = pytest.mark.integration
HARNESS = Path(__file__).parents[1] / "support" / "console_dom.js"
NODE = shutil.which("node")


async def render(url: str, page: str, ready: str, token: str = "tok-a") -> str:
    """The console's view of ``#page`` once its HTML holds ``ready`` (then the nav's Pool link)."""
    assert NODE is not None
    args = [NODE, str(HARNESS), str(UI_DIR / "app.js"), url, token, page, ready, "15000"]
    done = await asyncio.to_thread(subprocess.run, args, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, (done.returncode, done.stdout[-3000:], done.stderr[-3000:])
    return done.stdout


@pytest.mark.skipif(NODE is None, reason="node is not installed")
async def test_the_console_shows_a_runs_usage_and_output_and_a_batchs_totals(
    redis_url: str,
    priced: tuple[FakeOpenAI, Path],
) -> None:
    fake, path = priced
    fake.replies += [
        Reply(text='{"colour": "green", "note": "<b>bold</b>"}', usage=(100, 20)),
        Reply(text='{"colour": "blue", "note": "<b>bold</b>"}', usage=(40, 2)),
    ]
    rf = {"type": "json_schema", "jsonSchema": {"name": "pick", "schema": {"type": "object"}}}
    s = settings(redis_url, profiles=str(path))
    async with api(s) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        body = {"runs": [{**USER, "responseFormat": rf}] * 2, "batchId": "ui-usage"}
        r = await c.post("/v1/runs/batch", json=body)
        assert r.status_code == 200, r.text
        structured = r.json()["results"][0]["runId"]
        async with running_worker(redis_url, profiles=str(path)):
            view = await until_batch(c, "ui-usage", lambda v: v["finished"])
        assert view["counts"]["completed"] == 2, view
        one = (await c.get(f"/v1/runs/{structured}")).json()
        mine = one["usage"]
        run_html = await render(url, f"#/run/{structured}", "the run has ended")
        batch_html = await render(url, "#/batch/ui-usage", 'data-usage="inputTokens"')
    # The run: its usage (the replies were handed out in some order: the run's own figures), its
    # output pretty-printed as text (its markup escaped), a usage event in the timeline.
    colour = "green" if mine["inputTokens"] == 100 else "blue"
    assert f'"colour": "{colour}"' in run_html.replace("&quot;", '"')
    n_in, n_out = mine["inputTokens"], mine["outputTokens"]
    assert {(n_in, n_out), (40 + 100 - n_in, 20 + 2 - n_out)} == {(100, 20), (40, 2)}
    want = f"Usage: {n_in:,} tokens in, {n_out:,} out, ${cost(n_in, n_out):.6f}"
    assert f'<p id="run-usage" data-input="{n_in}" data-output="{n_out}">{want}</p>' in run_html, run_html
    assert '<section id="output"' in run_html and "&lt;b&gt;bold&lt;/b&gt;" in run_html
    assert "<b>" not in run_html
    assert '<li data-kind="usage">' in run_html and f"{n_in:,} tokens in, {n_out:,} out" in run_html
    # The batch: both runs' usage summed.
    assert '<dd data-usage="inputTokens">140</dd>' in batch_html, batch_html
    assert '<dd data-usage="outputTokens">22</dd>' in batch_html
    assert f'<dd data-usage="costUsd">{cost(140, 22):.6f}</dd>' in batch_html
    assert '<dd data-usage="estimated">no</dd>' in batch_html


HOSTILE = "<img src=x onerror=alert(1)> & <script>alert(2)</script>"


@pytest.mark.skipif(NODE is None, reason="node is not installed")
async def test_a_run_page_shows_its_input_agent_and_event_times_and_the_pool_links_to_runs(
    redis_url: str,
) -> None:
    messages = [
        {"role": "system", "content": "be brief"},
        {
            "role": "user",
            "content": [{"type": "text", "text": HOSTILE}, {"type": "text", "text": "line two"}],
        },
    ]
    s = settings(redis_url, operator_tenants="tenant-a")
    async with api(s) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        async with running_worker(redis_url):
            r = await c.post(
                "/v1/runs", json=run_body([{"text": "done", "delayMs": 300}], inputMessages=messages)
            )
            run_id = r.json()["runId"]
            for _ in range(100):
                if (await c.get(f"/v1/runs/{run_id}")).json()["status"] == "completed":
                    break
                await asyncio.sleep(0.1)
        # The page's data: the agent always, the input messages when asked for, as sent.
        plain = (await c.get(f"/v1/runs/{run_id}")).json()
        assert plain["agent"] == "scripted" and plain["status"] == "completed"
        assert plain.get("inputMessages") is None
        full = (await c.get(f"/v1/runs/{run_id}", params={"include": "input"})).json()
        assert full["inputMessages"] == messages
        bad = await c.get(f"/v1/runs/{run_id}", params={"include": "secrets"})
        assert bad.status_code == 422 and bad.json()["error"]["field"] == "include"
        every = ["admin", "control", "read", "submit"]  # a token of the token file may do everything
        assert (await c.get("/v1/me")).json() == {"tenant": "tenant-a", "operator": True, "scopes": every,
                                                  "actor": "token-file"}  # fmt: skip
        assert (await c.get("/v1/me", headers=B)).json() == {"tenant": "tenant-b", "operator": False,
                                                             "scopes": every, "actor": "token-file"}  # fmt: skip
        run_html = await render(url, f"#/run/{run_id}", "the run has ended")
        runs_html = await render(url, "#/runs", f'data-run="{run_id}"')
        pool_html = await render(url, "#/pool", 'id="partitions"')
        refused_html = await render(url, "#/pool", 'id="not-operator"', token="tok-b")
    # The input: each message's role and text, the hostile text escaped, never markup.
    assert '<li data-role="system"><span class="role">system</span><pre>be brief</pre></li>' in run_html
    escaped = HOSTILE.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    assert (
        f'<li data-role="user"><span class="role">user</span><pre>{escaped}\nline two</pre></li>' in run_html
    )
    assert "<img" not in run_html and "<script" not in run_html
    assert '<strong id="run-agent">scripted</strong>' in run_html
    # Each event: its time, the time since the run was created and since the event before.
    stamps = re.findall(
        r'<span class="ts" data-ts="(\d+)"[^>]*><time datetime="[^"]+">([\d:.]+)</time>( \+[^<(]+)?( \(Δ [^)]+\))?</span>',
        run_html,
    )
    assert len(stamps) >= 3, run_html
    assert all(since.startswith(" +") for _, _, since, _ in stamps)
    assert not stamps[0][3] and all(gap.startswith(" (Δ ") for _, _, _, gap in stamps[1:])
    # The runs table: one short date-time a cell, the full one in its title.
    created = re.search(
        r'<td data-col="created"><time datetime="([^"]+)" title="([^"]+)">([^<]+)</time></td>', runs_html
    )
    assert created is not None, runs_html
    assert re.fullmatch(r"\d\d-\d\d \d\d:\d\d:\d\d", created.group(3)) and created.group(2).endswith(" UTC")
    assert '<table class="runs">' in runs_html
    assert "table.runs td { white-space: nowrap;" in (UI_DIR / "app.css").read_text()  # one line a run
    # The pool: each partition's counts open the runs table filtered by that status; the nav shows
    # the Pool link to an operator, and tells another tenant why it has no pool page, not as an error.
    for status in ("queued", "running", "awaiting_human"):
        assert f'href="#/runs?status={status}" data-status-link="{status}"' in pool_html
    assert '<a id="nav-pool">Pool</a>' in pool_html
    assert '<a id="nav-pool" hidden>Pool</a>' in refused_html
    assert "<code>tenant-b</code>, is not one" in refused_html
    assert 'class="error"' not in refused_html and 'role="alert"' not in refused_html


@pytest.mark.skipif(NODE is None, reason="node is not installed")
async def test_the_console_shows_cache_reads_and_writes(redis_url: str, tmp_path: Path) -> None:
    """A model reporting prompt caching (the scripted one, as Anthropic's would): the run's usage line
    and the batch's totals say how much of the input was read from and written to the cache."""
    path = tmp_path / "profiles.json"
    provider = {"kind": "scripted", "mode": "script", "model": "claude-sonnet-4-5", "reportCache": True}
    path.write_bytes(orjson.dumps({"profiles": [
        {"name": "cached", "provider": provider, "systemPrompt": "Be careful. " * 500, "tools": ["echo"]}]}))  # fmt: skip
    script = [{"toolCalls": [{"name": "echo", "arguments": {"text": "x"}}]}] * 2 + [{"text": "done"}]
    run = {
        "agent": "cached",
        "inputMessages": [{"role": "user", "content": "go"}],
        "runtimeHints": {"script": script},
    }
    s = settings(redis_url, profiles=str(path))
    async with api(s) as url, httpx.AsyncClient(base_url=url, headers=A) as c:
        r = await c.post("/v1/runs/batch", json={"runs": [run], "batchId": "ui-cache"})
        assert r.status_code == 200, r.text
        run_id = r.json()["results"][0]["runId"]
        async with running_worker(redis_url, profiles=str(path)):
            view = await until_batch(c, "ui-cache", lambda v: v["finished"])
        u = view["usage"]
        assert u["cacheReadTokens"] > 0 and u["cacheWriteTokens"] > 0, view
        run_html = await render(url, f"#/run/{run_id}", "the run has ended")
        batch_html = await render(url, "#/batch/ui-cache", 'data-usage="cacheReadTokens"')
    cached = f"{u['inputTokens']:,} tokens in ({u['cacheReadTokens']:,} read from cache, {u['cacheWriteTokens']:,} written)"
    assert f"Usage: {cached}, {u['outputTokens']:,} out, ${u['costUsd']:.6f}" in run_html, run_html
    assert f'<dd data-usage="cacheReadTokens">{u["cacheReadTokens"]}</dd>' in batch_html, batch_html
    assert f'<dd data-usage="cacheWriteTokens">{u["cacheWriteTokens"]}</dd>' in batch_html
