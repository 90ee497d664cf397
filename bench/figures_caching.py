"""Figure 13: what prompt caching does to an agent's bill. One 20-step run (a tool call a step, a
system prompt of about 2,000 tokens), priced as Claude Sonnet 4.5 by the price table (genai-prices),
its scripted model reporting cache reads and writes as Anthropic's caching would, beside the same
run without caching. Deterministic (the scripted model's usage is agentmill's estimate): one
repetition tells it."""

from __future__ import annotations

import subprocess
from typing import Any

import orjson
from redis.asyncio import Redis

from bench.figure import Figure
from bench.plumbing import ROOT, Plumbing

STEPS = 20
MODEL = "claude-sonnet-4-5"
# An agent's system prompt of about 2,000 tokens (4 characters a token): instructions and examples
SYSTEM = "Follow the operator's instructions; call a tool when a fact is needed, then answer. " * 95


class CachingFigures(Plumbing):
    @staticmethod
    def caching_profiles() -> str:
        """Two profiles of the same model and prompt: ``cached`` reports caching, ``uncached`` not."""

        def profile(name: str, cache: bool) -> dict[str, object]:
            provider = {
                "kind": "scripted",
                "mode": "script",
                "model": MODEL,
                "reportCache": cache,
                "maxTokens": 256,
            }
            return {"name": name, "provider": provider, "systemPrompt": SYSTEM, "tools": ["echo"],
                    "loopLimits": {"maxIterations": STEPS + 5}}  # fmt: skip

        path = ROOT / "bench" / "results" / "caching-profiles.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(orjson.dumps({"profiles": [profile("cached", True), profile("uncached", False)]}))
        return str(path)

    async def fig_caching(self, r: Redis) -> None:
        path = self.caching_profiles()
        script: list[dict[str, Any]] = [
            {"toolCalls": [{"name": "echo", "arguments": {"text": f"step {i}"}}]} for i in range(STEPS)
        ]
        script.append({"text": "done"})
        await self.flush(r)
        p = self.producer(r, profiles=path)
        box: list[subprocess.Popen[bytes]] = [self.spawn(["-m", "app.worker"], AGENTMILL_PROFILES=path)]
        try:
            usage = {}
            for agent in ("cached", "uncached"):
                sub = await p.submit(self.script_run(script, agent=agent))
                rec = await p.wait(sub.run_id, timeout_s=120)
                if rec is None or rec.result is None or rec.result.usage is None:
                    raise RuntimeError(f"the {agent} run did not end with a usage")
                usage[agent] = rec.result.usage
        finally:
            self.stop(box[0])
        cached, plain = usage["cached"], usage["uncached"]
        f = Figure(
            f"13. a {STEPS}-step run's cost (USD, {MODEL} at the table's prices), prompt caching on",
            "USD",
            base_name="the same run without caching",
            target="–",
            higher_is_better=False,
        )
        f.ours.append(cached.cost_usd or 0.0)
        f.base.append(plain.cost_usd or 0.0)
        f.extra = {
            "prompt_tokens": float(cached.input_tokens),
            "prompt_tokens_uncached_run": float(plain.input_tokens),
            "cache_read_tokens": float(cached.cache_read_tokens),
            "cache_write_tokens": float(cached.cache_write_tokens),
            "output_tokens": float(cached.output_tokens),
        }
        f.note = (
            f"prompt tokens {cached.input_tokens:,} in both (of them {cached.cache_read_tokens:,} read from "
            f"the cache, {cached.cache_write_tokens:,} written to it), output {cached.output_tokens:,}; "
            f"${cached.cost_usd:.4f} cached against ${plain.cost_usd:.4f}"
        )
        self.figures.append(f)
