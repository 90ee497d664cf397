"""The llama.cpp peers installed by bin/peers/llama.sh, each on a free port: llama-cpp-python's
OpenAI-compatible server (``LlamaServer``) and llama.cpp's own ``llama-server --jinja``
(``LlamaCppServer``), both serving the same Gemma 3 270M GGUF.

``recordings()`` talks to a running server and returns the transcripts the unit suite replays
(tests/data/llama_cpp/): the exact response bytes for requests our provider builds.
"""

from __future__ import annotations

import asyncio
import base64
import os
import random
import struct
import subprocess
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import httpx
import orjson

from agentmill_client.models import Message, ResponseFormat, ToolCall
from shared.provider_config import ProviderConfig
from tests.support.redis_server import free_port
from worker.core.config import ToolSpec
from worker.machine import ModelRequest
from worker.models.openai import request_body
from worker.tools.builtin import BUILTINS

PEERS = Path(os.environ.get("AGENTMILL_PEERS_DIR", Path.home() / ".cache" / "agentmill-peers"))
VENV = PEERS / "llama"
DATA = Path(__file__).resolve().parents[1] / "data" / "llama_cpp"
# The GGUF has no chat template: llama-server gets Gemma's turns with Hermes-style tool calls.
TOOLS_TEMPLATE = Path(__file__).with_name("gemma_tools.jinja")
SYSTEM = "You are a helpful assistant. Use the calculator tool for arithmetic."
FORCED = {"type": "function", "function": {"name": "calculator"}}
# A structured answer Gemma 270M can give under the server's grammar (responseFormatStyle
# json_object_schema: llama-cpp-python 0.3.36 takes {"type": "json_object", "schema": …}, not json_schema).
PICK = {
    "type": "object",
    "properties": {"colour": {"type": "string", "maxLength": 20}, "sure": {"type": "boolean"}},
    "required": ["colour", "sure"],
    "additionalProperties": False,
}
PICK_FORMAT = ResponseFormat.model_validate(
    {"type": "json_schema", "jsonSchema": {"name": "pick", "schema": PICK}}
)


def installed() -> tuple[Path, Path] | None:
    python = VENV / "bin" / "python"
    models = sorted((VENV / "models").glob("*.gguf")) if (VENV / "models").is_dir() else []
    return (python, models[0]) if python.exists() and models else None


class _Server:
    """A server process on a free loopback port, serving ``model``; stopped (its own pid) on exit."""

    def __init__(self, log: Path, model: Path) -> None:
        self.model = model
        self.port = free_port()
        self.log = log
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def command(self) -> list[str]:
        raise NotImplementedError

    def ready_url(self) -> str:
        return f"{self.base_url}/models"

    def start(self, within_s: float = 120.0) -> Self:
        out = open(self.log, "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(self.command(), stdout=out, stderr=out)
        deadline = time.monotonic() + within_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the llama server exited with {self.proc.returncode}; see {self.log}")
            try:
                if httpx.get(self.ready_url(), timeout=1.0).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the llama server did not answer within {within_s} s; see {self.log}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def server_installed() -> tuple[Path, Path] | None:
    """llama.cpp's ``llama-server`` and the GGUF, when bin/peers/llama.sh has built it."""
    exe = VENV / "bin" / "llama-server"
    found = installed()
    stamped = (VENV / ".agentmill-llama-server-installed").exists()
    return (exe, found[1]) if found and exe.exists() and stamped else None


class LlamaServer(_Server):
    """``python -m llama_cpp.server``."""

    def __init__(self, log: Path) -> None:
        found = installed()
        if found is None:
            raise RuntimeError("llama-cpp-python is not installed: run bin/peers/llama.sh (or bin/dev peer)")
        self.python = found[0]
        super().__init__(log, found[1])

    def command(self) -> list[str]:
        return [str(self.python), "-m", "llama_cpp.server", "--model", str(self.model),
                "--chat_format", "chatml-function-calling", "--host", "127.0.0.1", "--port", str(self.port)]  # fmt: skip


class LlamaCppServer(_Server):
    """llama.cpp's ``llama-server --jinja`` on a free loopback port: OpenAI-style tool calls from
    the chat template (``TOOLS_TEMPLATE``), streamed under ``tool_choice`` "auto" as well; one slot
    (``--parallel 1``) of ``ctx`` tokens."""

    def __init__(self, log: Path, ctx: int = 8192) -> None:
        found = server_installed()
        if found is None:
            raise RuntimeError("llama-server is not installed: run bin/peers/llama.sh (or bin/dev peer)")
        self.exe = found[0]
        self.ctx = ctx
        super().__init__(log, found[1])

    def command(self) -> list[str]:
        return [str(self.exe), "--model", str(self.model), "--jinja", "--chat-template-file", str(TOOLS_TEMPLATE),
                "-c", str(self.ctx), "--parallel", "1", "--no-webui", "--host", "127.0.0.1", "--port", str(self.port)]  # fmt: skip

    def ready_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/health"  # 503 until the model is loaded


def provider(base_url: str, **kw: Any) -> ProviderConfig:
    return ProviderConfig.model_validate(
        {"kind": "openai", "baseUrl": base_url, "model": "gemma-3-270m", "temperature": 0, **kw}
    )


def calculator() -> ToolSpec:
    t = BUILTINS["calculator"]
    return ToolSpec(name=t.name, description=t.description, parameters=t.parameters)


def body(
    cfg: ProviderConfig,
    messages: list[Message],
    tools: list[ToolSpec] | None = None,
    response_format: ResponseFormat | None = None,
) -> dict[str, Any]:
    """The exact request body our provider sends for these messages."""
    req = ModelRequest(run_id="rec", session_id=None, messages=messages, tools=tools or [],
                       model_call_index=1, attempt=0, failures=0, response_format=response_format)  # fmt: skip
    return request_body(cfg, req)


@dataclass
class Transcript:
    request: dict[str, Any]
    status: int
    content_type: str
    body: bytes
    broke: str = ""  # the transport error that ended the body early, if any


async def post(url: str, payload: dict[str, Any], answering: asyncio.Event | None = None) -> Transcript:
    """One request on its own connection; the body's bytes as they came, even if it broke off.
    ``answering`` is set once the body holds a content delta."""
    parts: list[bytes] = []
    async with (
        httpx.AsyncClient(timeout=120) as client,
        client.stream("POST", f"{url}/chat/completions", json=payload) as resp,
    ):
        ctype = resp.headers.get("content-type", "")
        try:
            async for b in resp.aiter_raw():
                parts.append(b)
                if answering is not None and b'"content": "' in b"".join(parts):
                    answering.set()
        except httpx.TransportError as exc:
            return Transcript(payload, resp.status_code, ctype, b"".join(parts), type(exc).__name__)
        return Transcript(payload, resp.status_code, ctype, b"".join(parts))


def user(text: str) -> list[Message]:
    return [Message(role="system", content=SYSTEM), Message(role="user", content=text)]


async def recordings(base_url: str) -> dict[str, Transcript]:
    """One of each quirk the unit suite replays, from the live server."""
    plain = provider(base_url, maxTokens=48)
    forced = provider(base_url, toolChoice=FORCED)
    auto = provider(base_url, toolChoice="auto")
    out: dict[str, Transcript] = {}
    tools = [calculator()]
    out["chat_stream"] = await post(base_url, body(plain, user("Name a colour.")))
    out["tool_call_stream"] = await post(base_url, body(forced, user("What is 6*7?"), tools))
    # tool_choice "auto" while streaming: when the model picks a message, the server's grammar
    # lets it say nothing; when it picks a tool, the server fails after sending 200 OK.
    # tool_choice "auto" while streaming: when the model picks a message, the server's grammar
    # lets it say nothing; when it picks a tool, the server fails after sending 200 OK: no bytes.
    out["empty_stream_auto"] = await post(
        base_url, body(auto, [Message(role="user", content="What is 6*7?")], tools)
    )
    out["auto_tool_broken_stream"] = await post(base_url, body(auto, user("Name a colour."), tools))
    # The follow-up of a tool call with "content": null, as agentmill once sent it.
    call = ToolCall(id="call_1", name="calculator", arguments='{"expression": "6*7"}')
    follow = body(forced, [*user("What is 6*7?"), Message(role="assistant", tool_calls=[call]),
                           Message(role="tool", content="42", tool_call_id="call_1", name="calculator")],
                  tools)  # fmt: skip
    follow["messages"][2]["content"] = None
    out["null_content_500"] = await post(base_url, follow)
    # A stream the server interrupts because another request arrives (its default).
    answering = asyncio.Event()
    story = body(
        provider(base_url, maxTokens=400), user("Write a long story about a dragon, in ten paragraphs.")
    )
    first = asyncio.create_task(post(base_url, story, answering))
    await asyncio.wait_for(answering.wait(), 60)
    await post(base_url, body(plain, user("Name a fruit.")))
    out["interrupted_stream"] = await first
    out.update(await structured_recordings(base_url))
    out.update(await image_recordings(base_url))
    return out


STRUCTURED_PROMPT = "Name a colour, and say whether you are sure, as JSON."


async def structured_recordings(base_url: str) -> dict[str, Transcript]:
    """A structured answer: the schema sent as llama-cpp-python's json_object schema (a grammar);
    and OpenAI's json_schema shape, which this server refuses."""
    grammar = provider(base_url, maxTokens=96, responseFormatStyle="json_object_schema")
    openai_style = provider(base_url, maxTokens=96)
    return {
        "structured_stream": await post(base_url, body(grammar, user(STRUCTURED_PROMPT), None, PICK_FORMAT)),
        "json_schema_refused": await post(
            base_url, body(openai_style, user(STRUCTURED_PROMPT), None, PICK_FORMAT)
        ),
    }


def png(side: int, seed: int = 31) -> bytes:
    """A real PNG, ``side`` × ``side`` RGB pixels of seeded noise (incompressible, so its size
    grows with ``side``, as a photo's does)."""
    rows = random.Random(seed).randbytes(side * side * 3)
    raw = b"".join(b"\0" + rows[y * side * 3 : (y + 1) * side * 3] for y in range(side))

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", side, side, 8, 2, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")
    )


def data_url(image: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(image).decode()


IMAGE_PROMPT = "Name a colour."
TINY = data_url(png(1))  # 1 × 1: a 69-byte PNG
PHOTO = data_url(png(40))  # 40 × 40 of noise: 4.8 kB, 6.5 k characters of base64


def image_message(url: str, text: str = IMAGE_PROMPT) -> dict[str, Any]:
    """A user message of a text part and an image part, as a client sends it."""
    parts = [{"type": "text", "text": text}, {"type": "image_url", "image_url": {"url": url}}]
    return {"role": "user", "content": parts}


def with_image(url: str) -> list[Message]:
    """``image_message(url)`` alone: after the system prompt, Gemma 270M answers it with nothing."""
    return [Message.model_validate(image_message(url))]


async def image_recordings(base_url: str) -> dict[str, Transcript]:
    """A text-and-image message: a tiny image sent as parts (accepted: the chatml template renders the
    list of parts into the prompt as text, data URL included); a photo-sized one as parts (its base64
    overflows the context window: a 200 with an empty body); the same photo with
    ``imageParts: "placeholder"``."""
    parts = provider(base_url, maxTokens=48)
    placeholder = provider(base_url, maxTokens=48, imageParts="placeholder")
    return {
        "image_parts_stream": await post(base_url, body(parts, with_image(TINY))),
        "image_parts_overflow": await post(base_url, body(parts, with_image(PHOTO))),
        "image_placeholder_stream": await post(base_url, body(placeholder, with_image(PHOTO))),
    }


def save(transcripts: dict[str, Transcript]) -> None:
    """Write these transcripts (the index keeps the others)."""
    DATA.mkdir(parents=True, exist_ok=True)
    index: dict[str, Any] = {}
    if (DATA / "transcripts.json").exists():
        index = orjson.loads((DATA / "transcripts.json").read_bytes())
    for name, t in transcripts.items():
        suffix = ".sse" if t.content_type.startswith("text/event-stream") else ".body"
        (DATA / f"{name}{suffix}").write_bytes(t.body)
        index[name] = {"file": f"{name}{suffix}", "status": t.status, "contentType": t.content_type,
                       "broke": t.broke, "request": t.request}  # fmt: skip
    (DATA / "transcripts.json").write_bytes(orjson.dumps(index, option=orjson.OPT_INDENT_2) + b"\n")


def load() -> dict[str, Transcript]:
    index = orjson.loads((DATA / "transcripts.json").read_bytes())
    return {
        name: Transcript(
            v["request"], v["status"], v["contentType"], (DATA / v["file"]).read_bytes(), v["broke"]
        )
        for name, v in index.items()
    }
