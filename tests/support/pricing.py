"""A priced OpenAI-compatible profile (``gpt``, on a FakeOpenAI) and what its tokens cost."""

from __future__ import annotations

from pathlib import Path

import orjson

__all__ = ["PRICING", "USER", "cost", "write_priced_profile"]

PRICING = {"inputPerMTok": 3.0, "outputPerMTok": 15.0}


def cost(inp: int, out: int) -> float:
    return (inp * PRICING["inputPerMTok"] + out * PRICING["outputPerMTok"]) / 1e6


def write_priced_profile(path: Path, base_url: str) -> Path:
    """Profile ``gpt`` at ``base_url`` (key from FAKE_OPENAI_KEY), priced, with the echo tool."""
    path.write_bytes(orjson.dumps({"profiles": [{
        "name": "gpt", "provider": {"kind": "openai", "baseUrl": base_url, "model": "fake-1",
                                    "apiKeyEnv": "FAKE_OPENAI_KEY", "pricing": PRICING},
        "tools": ["echo"]}]}))  # fmt: skip
    return path


USER = {"agent": "gpt", "inputMessages": [{"role": "user", "content": "compute please"}]}  # a run of gpt
