"""LiteLLM's proxy, as installed by bin/peers/litellm.sh, on a free port: the Messages API
(``/v1/messages``) in front of a chat-completions server (the llama.cpp peer), offline.

The model is ``hosted_vllm/<name>`` with ``api_base`` (LiteLLM's ``openai/`` prefix would call the
Responses API, which llama-cpp-python does not serve); ``LITELLM_LOCAL_MODEL_COST_MAP=True`` keeps it
from fetching its price map from the internet at start.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx

from tests.support.redis_server import free_port

PEERS = Path(os.environ.get("AGENTMILL_PEERS_DIR", Path.home() / ".cache" / "agentmill-peers"))
VENV = PEERS / "litellm"
MASTER_KEY = "sk-agentmill-peer-test"
MODEL = "gemma"


def installed() -> Path | None:
    exe = VENV / "bin" / "litellm"
    return exe if exe.exists() and (VENV / ".agentmill-installed").exists() else None


class LiteLLMProxy:
    """``litellm --config …`` on a free loopback port; stopped (its own pid) on exit."""

    def __init__(self, upstream: str, workdir: Path, params: str = "") -> None:
        """``params``: more ``litellm_params`` lines of the model, as YAML."""
        exe = installed()
        if exe is None:
            raise RuntimeError("LiteLLM is not installed: run bin/peers/litellm.sh")
        self.exe = exe
        self.port = free_port()
        self.workdir = workdir
        self.log = workdir / "litellm.log"
        self.config = workdir / "litellm.yaml"
        self.config.write_text(
            "model_list:\n"
            f"  - model_name: {MODEL}\n"
            "    litellm_params:\n"
            "      model: hosted_vllm/gemma-3-270m\n"
            f"      api_base: {upstream}\n"
            "      api_key: none\n"
            f"{params}"
            "litellm_settings:\n"
            "  drop_params: true\n"
            "  num_retries: 0\n"
        )
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, within_s: float = 180.0) -> LiteLLMProxy:
        env = {**os.environ, "LITELLM_MASTER_KEY": MASTER_KEY, "LITELLM_LOCAL_MODEL_COST_MAP": "True",
               "LITELLM_TELEMETRY": "False", "DISABLE_SCHEMA_UPDATE": "True"}  # fmt: skip
        out = open(self.log, "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            [str(self.exe), "--config", str(self.config), "--host", "127.0.0.1", "--port", str(self.port),
             "--num_workers", "1"],
            stdout=out, stderr=out, env=env, cwd=self.workdir,
        )  # fmt: skip
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"LiteLLM exited with {self.proc.returncode}; see {self.log}")
            try:
                if httpx.get(f"{self.base_url}/health/liveliness", timeout=1.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"LiteLLM did not answer within {within_s} s; see {self.log}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
