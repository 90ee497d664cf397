"""Runs against the test MCP server (tests/support/mcp_server.py): the ``mcp`` profile that reaches
it as ``srv`` (its tools ``srv__<name>``), scripted runs calling them, and their results."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from agentmill_client.outputs import RunEvent
from shared.profiles import load_profiles

__all__ = ["TOKEN", "call", "mcp_run", "profiles_file", "results"]

TOKEN = "t0ken"  # MCP_TEST_TOKEN: the profile sends it as the server's bearer token


def profiles_file(url: str, path: Path, **server: Any) -> str:
    doc = {
        "profiles": [
            {
                "name": "mcp",
                "provider": {"kind": "scripted", "mode": "script", "chunkChars": 16},
                "mcpServers": [
                    {
                        "name": "srv",
                        "url": url,
                        "allowHosts": ["127.0.0.1"],
                        "headers": {"Authorization": "Bearer ${env:MCP_TEST_TOKEN}"},
                        "allowTools": ["add", "slow", "boom", "picture", "whoami"],
                        **server,
                    }
                ],
                "toolSettings": {
                    "srv__add": {"retryDelayMs": 50, "maxTries": 3},
                    "srv__whoami": {"requiresApproval": True},
                },
                "toolPolicy": {"maxParallel": 4},
            }
        ]
    }
    path.write_bytes(orjson.dumps(doc))
    load_profiles(str(path))  # fail early on a bad profile
    return str(path)


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "arguments": args}


def mcp_run(script: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    """A run of the ``mcp`` profile following ``script`` (as helpers.script_run)."""
    return {"agent": "mcp", "inputMessages": [{"role": "user", "content": "go"}],
            "runtimeHints": {"script": script}, **extra}  # fmt: skip


def results(events: list[RunEvent]) -> dict[str, tuple[bool, str]]:
    """Each called tool's (isError, content), by the tool's name."""
    names = {e.payload["toolCallId"]: e.payload["name"] for e in events if e.kind == "tool_call"}
    return {names[e.payload["toolCallId"]]: (e.payload["isError"], e.payload["content"])
            for e in events if e.kind == "tool_result"}  # fmt: skip
