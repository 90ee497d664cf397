"""Arize Phoenix (arize-phoenix on PyPI), as installed by bin/peers/phoenix.sh, on free ports: a real
OTLP/HTTP trace receiver written by others, read back through its REST API.

``DATA`` holds what it received in the peer test (tests/peer/test_phoenix_traces.py, rewritten with
AGENTMILL_RECORD=1), which tests/unit/test_phoenix_replay.py checks in CI.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx

from tests.support.redis_server import free_port

PEERS = Path(os.environ.get("AGENTMILL_PEERS_DIR", Path.home() / ".cache" / "agentmill-peers"))
BIN = PEERS / "phoenix" / "bin" / "phoenix"
DATA = Path(__file__).resolve().parents[1] / "data" / "phoenix" / "trace.json"


def installed() -> Path | None:
    return BIN if BIN.exists() else None


class Phoenix:
    """``phoenix serve`` on free loopback ports with its own working directory (SQLite inside);
    stopped (its own pid) on exit."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, within_s: float = 180.0) -> Phoenix:
        env = {**os.environ, "PHOENIX_WORKING_DIR": str(self.workdir), "PHOENIX_PORT": str(self.port),
               "PHOENIX_GRPC_PORT": str(free_port()), "PHOENIX_HOST": "127.0.0.1"}  # fmt: skip
        env = {k: v for k, v in env.items() if not k.startswith("OTEL_")}  # Phoenix traces nothing of its own
        with open(self.workdir / "phoenix.log", "ab") as log:
            self.proc = subprocess.Popen(
                [str(BIN), "serve"], env=env, stdout=log, stderr=log, cwd=self.workdir
            )
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"phoenix exited ({self.proc.returncode}): see {self.workdir}/phoenix.log")
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"phoenix did not answer /healthz within {within_s} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)

    def spans(self, project: str = "default") -> list[dict[str, Any]]:
        """Every span Phoenix holds for ``project``, through its REST API (cursor pages)."""
        out: list[dict[str, Any]] = []
        cursor: str | None = None
        while True:
            params: dict[str, Any] = {"limit": 1000, **({"cursor": cursor} if cursor else {})}
            r = httpx.get(f"{self.url}/v1/projects/{project}/spans", params=params, timeout=10)
            if r.status_code == 404:
                return out
            r.raise_for_status()
            page = r.json()
            out += page["data"]
            cursor = page.get("next_cursor")
            if not cursor:
                return out


def check_trace(spans: list[dict[str, Any]], root_name: str) -> dict[str, int]:
    """What must hold of the spans Phoenix holds for one run submitted inside the caller's span
    ``root_name``, whose first worker was SIGKILLed mid-run: one trace; its one root the caller's
    span; the surviving attempt a child of it; the killed worker's finished spans children of its
    lost attempt span, in the same trace; model calls read by Phoenix as LLM spans (from the GenAI
    attributes), tool calls with their names and ids. Returns counts (for the report)."""
    assert len({s["context"]["trace_id"] for s in spans}) == 1, "more than one trace"
    ids = {s["context"]["span_id"] for s in spans}
    roots = [s for s in spans if s["parent_id"] is None]
    assert [r["name"] for r in roots] == [root_name], roots
    root = roots[0]["context"]["span_id"]
    attempts = [s for s in spans if s["name"].startswith("invoke_agent ")]
    assert len(attempts) == 1 and attempts[0]["parent_id"] == root, attempts  # the victim's never ended
    attempt = attempts[0]
    assert attempt["span_kind"] == "AGENT", attempt  # Phoenix read gen_ai.operation.name invoke_agent
    assert (
        attempt["attributes"]["agentmill.run.attempt"] == 2
        and attempt["attributes"]["agentmill.run.crashes"] == 1
    )
    assert attempt["attributes"]["agentmill.run.outcome"] == "completed"
    orphans = [s for s in spans if s["parent_id"] is not None and s["parent_id"] not in ids]
    assert orphans and len({s["parent_id"] for s in orphans}) == 1, orphans  # the victim's lost attempt
    chats = [s for s in spans if s["name"].startswith("chat ")]
    tools = [s for s in spans if s["name"].startswith("execute_tool ")]
    assert chats and tools
    for c in chats:
        a = c["attributes"]
        assert c["span_kind"] == "LLM" and a["gen_ai.operation.name"] == "chat", c
        assert a["gen_ai.request.model"] == a["llm.model_name"] == "scripted", a
        assert a["gen_ai.usage.input_tokens"] > 0 and a["gen_ai.usage.output_tokens"] > 0, a
        assert c["parent_id"] in {attempt["context"]["span_id"], orphans[0]["parent_id"]}
    for t in tools:
        a = t["attributes"]
        assert t["span_kind"] == "TOOL" and a["gen_ai.operation.name"] == "execute_tool", t
        assert a["gen_ai.tool.name"] == "flaky", t
        assert a["gen_ai.tool.call.id"]
    victim_calls = {t["attributes"]["gen_ai.tool.call.id"] for t in tools if t in orphans}
    rescuer_calls = {t["attributes"]["gen_ai.tool.call.id"] for t in tools if t not in orphans}
    assert rescuer_calls and not victim_calls & rescuer_calls  # a recorded call is never run again
    return {"spans": len(spans), "chat": len(chats), "execute_tool": len(tools), "victim": len(orphans)}


def recorded(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The spans as the recording keeps them: what the checks read, in start order."""
    keep = ("name", "context", "parent_id", "span_kind", "status_code", "attributes")
    out = [{k: s[k] for k in keep} | {"events": [e["name"] for e in s.get("events", [])]} for s in spans]
    return sorted(
        out, key=lambda s: next((x["start_time"] for x in spans if x["context"] == s["context"]), "")
    )
