"""The console's run page for an economy run parked in a provider batch: its lane, and the batch
it waits in (economyWait), on the HTML app.js builds (Node and tests/support/console_dom.js, as in
test_console_render.py) against a real API, redis-server, worker and the local batch server."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from tests.integration.api_support import A, api, settings
from tests.integration.test_console_render import NODE, render
from tests.support.batch_server import BatchServer, tool_rounds_backend
from tests.support.economy_workers import economy_run, procs, profiles

pytestmark = [pytest.mark.integration, pytest.mark.timeout(90)]


@pytest.mark.skipif(NODE is None, reason="node is not installed")
async def test_the_console_shows_an_economy_runs_lane_and_the_batch_it_waits_in(
    redis_url: str, tmp_path: Path
) -> None:
    async with BatchServer(tool_rounds_backend("echo", rounds=0), delay_s=60) as server:
        path = profiles(tmp_path, server.base_url)
        async with (
            api(settings(redis_url, profiles=str(path))) as url,
            httpx.AsyncClient(base_url=url, headers=A) as c,
        ):
            r = await c.post("/v1/runs", json=economy_run(0))
            assert r.status_code in (200, 201, 202), r.text
            run_id = r.json()["runId"]
            workers = procs(redis_url, path, 1)
            try:
                for _ in range(300):  # parked, its batch at the provider
                    view = (await c.get(f"/v1/runs/{run_id}", params={"include": "input"})).json()
                    if (view.get("economyWait") or {}).get("batchState") == "submitted":
                        break
                    await asyncio.sleep(0.1)
                assert view["lane"] == "economy" and view["status"] == "awaiting_model", view
                html = await render(url, f"#/run/{run_id}", 'id="economy-batch-state">submitted<')
            finally:
                for w in workers:
                    w.stop()
        assert '<strong id="run-lane">economy</strong>' in html, html
        assert '<strong id="economy-batch-state">submitted</strong>' in html, html
        wait = view["economyWait"]
        assert f"<code>{wait['customId']}</code>" in html and f"({wait['providerBatchId']})" in html, html
