"""The web console in a real headless Chromium (Debian's chromium + chromium-driver, Selenium).

Installed by bin/peers/chromium.sh; run with `bin/dev peer` (or `pytest -m peer`). The API, Redis
and the worker are real; the browser signs in with a token, follows a running run's events live,
approves its pending tool call, aborts another run from its page, and keeps a screenshot.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from shared.settings import Settings
from tests.integration.api_support import api, run_body
from tests.integration.helpers import running_worker

pytestmark = [pytest.mark.integration, pytest.mark.peer]
PEERS = Path(os.environ.get("AGENTMILL_PEERS_DIR", Path.home() / ".cache" / "agentmill-peers"))


def _binaries() -> tuple[str, str] | None:
    found: dict[str, str] = {}
    env = PEERS / "chromium.env"
    if env.exists():
        for line in env.read_text().splitlines():
            k, _, v = line.partition("=")
            found[k] = v
    chromium = found.get("CHROMIUM") or shutil.which("chromium")
    driver = found.get("CHROMEDRIVER") or shutil.which("chromedriver")
    return (chromium, driver) if chromium and driver else None


def _browser(chromium: str, driver_path: str, profile: str) -> Any:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    opts = webdriver.ChromeOptions()
    opts.binary_location = chromium
    for arg in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                "--disable-background-networking", "--disable-component-update", "--disable-sync",
                "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1280,1000"):  # fmt: skip
        opts.add_argument(arg)
    opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(driver_path), options=opts)


APPROVAL = run_body(
    [{"error": {"status": 503, "message": "overloaded"}},  # one retry, shown with its delay
     {"text": "Let me check that with the echo tool, one moment. " * 4, "delayMs": 5000,
      "toolCalls": [{"id": "call-1", "name": "echo", "arguments": {"text": "hi"}}]},
     {"text": "the answer, after approval, streamed slowly", "delayMs": 1500}],
    toolPolicy={"requireApprovalByDefault": True},
)  # fmt: skip


def _submit(url: str) -> tuple[str, str]:
    """The two runs the browser looks at (sent once the browser is up, so the first is still running)."""
    body = {"runs": [APPROVAL, run_body([{"stall": True}])], "batchId": "ui-batch"}
    r = httpx.post(f"{url}/v1/runs/batch", json=body, headers={"Authorization": "Bearer tok-ui"})
    approval_run, stalled_run = (x["runId"] for x in r.json()["results"])
    return approval_run, stalled_run


def _scenario(url: str, chromium: str, driver_path: str, shots: Path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    profile = tempfile.mkdtemp(prefix="agentmill-chromium-")
    d = _browser(chromium, driver_path, profile)
    try:
        wait = WebDriverWait(d, 20, poll_frequency=0.05)

        def status_of_page() -> str:
            return str(d.find_element(By.ID, "run-status").text)

        # Sign in: a wrong token is refused on the page, the right one opens the runs table.
        d.get(f"{url}/ui")
        wait.until(ec.visibility_of_element_located((By.ID, "token"))).send_keys("wrong")
        d.find_element(By.CSS_SELECTOR, "#login-form button").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "login-error"), "not accepted"))
        d.find_element(By.ID, "token").send_keys("tok-ui")
        d.find_element(By.CSS_SELECTOR, "#login-form button").click()
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, "table caption")))
        approval_run, stalled_run = _submit(url)
        # The table refreshes itself: the new runs appear without a reload.
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, f'tr[data-run="{approval_run}"]')))
        assert d.execute_script("return sessionStorage.getItem('agentmill.token')") == "tok-ui"

        # The running run: its page shows it running, then events arrive while we watch.
        d.find_element(By.LINK_TEXT, approval_run).click()
        wait.until(lambda _: status_of_page() == "running")
        seen_first = len(d.find_elements(By.CSS_SELECTOR, "#timeline li"))
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, '#timeline li[data-kind="tool_call"]')))
        assert len(d.find_elements(By.CSS_SELECTOR, "#timeline li")) > seen_first, "no event arrived live"
        # The model streamed its reply: deltas came in before the assistant message.
        kinds = [li.get_attribute("data-kind") for li in d.find_elements(By.CSS_SELECTOR, "#timeline li")]
        assert "model_delta" in kinds and kinds.index("model_delta") < kinds.index("assistant_message")

        # It asks for approval: approve from the page; the run resumes and completes, live.
        retry = d.find_element(By.CSS_SELECTOR, '#timeline li[data-status="retrying"]')
        assert "attempt 1 in" in retry.text and " s (" in retry.text, retry.text
        approve = wait.until(
            ec.element_to_be_clickable((By.CSS_SELECTOR, 'button[data-action="approve"][data-call="c1.0"]'))
        )
        assert status_of_page() == "awaiting human"
        assert d.find_element(By.CSS_SELECTOR, 'button[data-action="reject"][data-call="c1.0"]').is_enabled()
        d.save_screenshot(str(shots / "run-awaiting-approval.png"))
        approve.click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "approvals"), "approved"))
        wait.until(lambda _: status_of_page() == "completed")
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, '#timeline li[data-kind="tool_result"]')))
        assert "after approval" in d.find_element(By.ID, "timeline").text
        # Its usage, kept up to date by the usage events (and the run's GET).
        wait.until(ec.text_to_be_present_in_element((By.ID, "run-usage"), "(estimated)"))
        assert d.find_element(By.ID, "run-usage").text.startswith("Usage: ")
        assert d.find_elements(By.CSS_SELECTOR, '#timeline li[data-kind="usage"]')
        assert d.find_element(By.ID, "abort").get_attribute("disabled") is not None
        shot = shots / "run-page.png"
        d.save_screenshot(str(shot))
        print(f"\nscreenshot of the run page: {shot}")

        # Another run, stalled in its model call: abort it from its page.
        d.get(f"{url}/ui#/run/{stalled_run}")
        wait.until(lambda _: status_of_page() == "running")
        d.find_element(By.ID, "abort").click()
        wait.until(ec.text_to_be_present_in_element((By.ID, "toast"), "abort requested"))
        wait.until(lambda _: status_of_page() == "aborted")
        last = d.find_elements(By.CSS_SELECTOR, '#timeline li[data-kind="status"]')[-1]
        assert last.get_attribute("data-status") == "aborted"
        d.save_screenshot(str(shots / "aborted-run.png"))

        # The runs table filters by status; the batch page shows progress.
        from selenium.webdriver.support.ui import Select

        d.find_element(By.LINK_TEXT, "Runs").click()
        Select(wait.until(ec.presence_of_element_located((By.ID, "f-status")))).select_by_value("aborted")
        d.find_element(By.ID, "f-batchId").send_keys("ui-batch")
        d.find_element(By.CSS_SELECTOR, "form.filters button[type=submit]").click()
        wait.until(lambda _: "status=aborted" in d.current_url and "batchId=ui-batch" in d.current_url)
        wait.until(ec.presence_of_element_located((By.CSS_SELECTOR, f'tr[data-run="{stalled_run}"]')))
        assert not d.find_elements(By.CSS_SELECTOR, f'tr[data-run="{approval_run}"]')
        row = f'tr[data-run="{stalled_run}"]'
        assert d.find_element(By.CSS_SELECTOR, f'{row} td[data-col="error"]').text == "aborted"
        assert d.find_element(By.CSS_SELECTOR, f'{row} td[data-col="duration"]').text.endswith(" s")
        assert d.find_element(By.CSS_SELECTOR, f'{row} td[data-col="iterations"]').text.isdigit()
        d.save_screenshot(str(shots / "runs-page.png"))
        d.get(f"{url}/ui#/batch/ui-batch")
        wait.until(
            ec.text_to_be_present_in_element(
                (By.CSS_SELECTOR, 'label[for="batch-progress"]'), "2 of 2 runs ended"
            )
        )
        assert d.find_element(By.CSS_SELECTOR, 'dd[data-count="completed"]').text == "1"
        assert d.find_element(By.CSS_SELECTOR, 'dd[data-count="aborted"]').text == "1"
        # Its usage totals: the completed run's calls (the scripted model's are estimated, unpriced).
        assert int(d.find_element(By.CSS_SELECTOR, 'dd[data-usage="inputTokens"]').text) > 0
        assert d.find_element(By.CSS_SELECTOR, 'dd[data-usage="costUsd"]').text == "no pricing"
        assert d.find_element(By.CSS_SELECTOR, 'dd[data-usage="estimated"]').text == "partly"
        d.save_screenshot(str(shots / "batch-page.png"))
        # Its results file: fetched with the token, saved from an object URL.
        saved = Path(profile) / "downloads"
        d.execute_cdp_cmd("Browser.setDownloadBehavior", {"behavior": "allow", "downloadPath": str(saved)})
        d.find_element(By.ID, "download-results").click()
        got = saved / "batch-ui-batch-results.jsonl"
        wait.until(lambda _: got.exists() and got.read_text().count("\n") == 2)
        lines = [orjson.loads(x) for x in got.read_text().splitlines()]
        assert [(x["index"], x["runId"], x["status"]) for x in lines] == [
            (0, approval_run, "completed"), (1, stalled_run, "aborted"),
        ]  # fmt: skip
        assert lines[0]["text"] == "the answer, after approval, streamed slowly"

        # The pool page: the live worker, the partitions, and the last hour drawn per minute (the
        # worker reports every 10 s: the two runs' bars appear without a reload).
        d.find_element(By.LINK_TEXT, "Pool").click()
        wait.until(ec.text_to_be_present_in_element((By.CSS_SELECTOR, 'dd[data-count="workers"]'), "1"))
        assert len(d.find_elements(By.CSS_SELECTOR, "#workers tr[data-worker]")) == 1
        assert len(d.find_elements(By.CSS_SELECTOR, "#partitions tbody tr")) == 1
        WebDriverWait(d, 25, poll_frequency=0.2).until(
            ec.presence_of_element_located((By.CSS_SELECTOR, "#chart-ended rect.bar.s-aborted"))
        )
        assert d.find_elements(By.CSS_SELECTOR, "#chart-ended rect.bar.s-completed")
        assert d.find_elements(By.CSS_SELECTOR, "#chart-started rect.bar.s-started")
        shot = shots / "pool-page.png"
        d.save_screenshot(str(shot))
        print(f"\nscreenshot of the pool page: {shot}")

        # A structured-output run repaired once: its parsed output, pretty-printed as text (markup
        # in it stays text), and the repair in the timeline.
        output = {"colour": "green", "note": "<img src=x onerror=alert(1)>"}
        rf = {
            "type": "json_schema",
            "jsonSchema": {"name": "pick", "schema": {"type": "object", "required": ["colour"]}},
        }
        r = httpx.post(f"{url}/v1/runs", headers={"Authorization": "Bearer tok-ui"},
                       json=run_body([{"json": {"color": "green"}}, {"json": output}], responseFormat=rf))  # fmt: skip
        d.get(f"{url}/ui#/run/{r.json()['runId']}")
        wait.until(ec.visibility_of_element_located((By.ID, "run-output")))
        assert d.find_element(By.ID, "run-output").text == json.dumps(output, indent=2)
        assert not d.find_elements(By.CSS_SELECTOR, "#run-output img")
        assert d.find_elements(By.CSS_SELECTOR, '#timeline li[data-status="repairing"]')
        d.save_screenshot(str(shots / "structured-run.png"))

        # A failed run retried from its page: the retry's page opens naming its origin and completes;
        # a fork of the retry at seq 1 from its page names its origin and seq.
        r = httpx.post(f"{url}/v1/runs", headers={"Authorization": "Bearer tok-ui"},
                       json=run_body([{"error": {"status": 400, "message": "no"}}, {"text": "fine now"}]))  # fmt: skip
        failed = r.json()["runId"]
        d.get(f"{url}/ui#/run/{failed}")
        wait.until(lambda _: status_of_page() == "failed")
        wait.until(ec.element_to_be_clickable((By.ID, "retry"))).click()
        wait.until(lambda _: "#/run/" in d.current_url and failed not in d.current_url)
        retried = d.current_url.rsplit("/", 1)[-1]
        wait.until(lambda _: status_of_page() == "completed")
        assert d.find_element(By.CSS_SELECTOR, "[data-lineage]").text == f"(retry of {failed})"
        assert d.find_element(By.ID, "retry").get_attribute("disabled") is not None  # a completed run
        forkseq = d.find_element(By.ID, "fork-seq")
        forkseq.clear()
        forkseq.send_keys("1")
        d.find_element(By.ID, "fork").click()
        wait.until(lambda _: retried not in d.current_url)
        wait.until(lambda _: status_of_page() == "completed")
        assert d.find_element(By.CSS_SELECTOR, "[data-lineage]").text == f"(fork of {retried} at seq 1)"
        d.save_screenshot(str(shots / "fork-page.png"))

        # Nothing the page did broke its CSP (a violation is logged as a console error).
        errors = [e for e in d.get_log("browser") if e["level"] == "SEVERE" and "401" not in e["message"]]
        assert errors == [], errors
    except Exception:  # keep what the browser showed, for the failure's report
        d.save_screenshot(str(shots / "failure.png"))
        (shots / "failure.html").write_text(d.page_source)
        print(
            f"\nfailure at {d.current_url}; screenshot and page in {shots}; console: {d.get_log('browser')}"
        )
        raise
    finally:
        d.quit()
        shutil.rmtree(profile, ignore_errors=True)


async def test_console_in_a_real_browser(redis_url: str) -> None:
    found = _binaries()
    if found is None:
        pytest.skip("chromium and chromedriver are not installed (bin/peers/chromium.sh)")
    pytest.importorskip("selenium")
    chromium, driver_path = found
    shots = Path(os.environ.get("AGENTMILL_ARTIFACTS_DIR") or tempfile.mkdtemp(prefix="agentmill-console-"))
    shots.mkdir(parents=True, exist_ok=True)
    settings = Settings(redis_url=redis_url, api_tokens="tok-ui=tenant-ui", operator_tenants="tenant-ui")
    async with api(settings) as url, running_worker(redis_url, delta_flush_ms=50):
        async with httpx.AsyncClient(base_url=url, headers={"Authorization": "Bearer tok-ui"}) as c:
            # The page's response carries the strict CSP; the API behind it still wants the token.
            page = await c.get("/ui", headers={"Authorization": ""})
            assert page.status_code == 200 and "script-src 'self'" in page.headers["content-security-policy"]
            assert "'unsafe-inline'" not in page.headers["content-security-policy"]
            assert (await c.get("/v1/runs", headers={"Authorization": ""})).status_code == 401
            assert (await c.get("/ui/nothing.js")).status_code == 404
        await asyncio.to_thread(_scenario, url, chromium, driver_path, shots)
    assert (shots / "run-page.png").stat().st_size > 10_000
    assert (shots / "pool-page.png").stat().st_size > 10_000
    print(f"screenshots kept in {shots}")
