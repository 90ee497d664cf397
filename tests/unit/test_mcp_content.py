"""What the model reads of an MCP tool's answer, and the header values a profile may take from the
worker's environment (worker/tools/mcp.py, worker/tools/mcp_transport.py)."""

from __future__ import annotations

import base64

import pytest
from mcp_types import (
    AudioContent,
    BlobResourceContents,
    CallToolResult,
    EmbeddedResource,
    ImageContent,
    TextContent,
    TextResourceContents,
)

from shared.profiles import AgentProfile, McpServerConfig
from worker.tools.mcp_content import exposed_name, render
from worker.tools.mcp_transport import McpConfigError, expand_headers


def b64(n: int) -> str:
    return base64.b64encode(b"x" * n).decode()


def test_text_parts_are_joined_and_structured_content_is_json_when_no_text_says_it() -> None:
    both = CallToolResult(content=[TextContent(text="a"), TextContent(text="b")], structured_content={"r": 1})
    assert render(both) == "a\nb"
    only = CallToolResult(content=[], structured_content={"r": [1, 2]})
    assert render(only) == '{"r":[1,2]}'


def test_images_audio_and_blobs_become_placeholders_with_type_and_size() -> None:
    res = CallToolResult(content=[
        ImageContent(data=b64(1234), mime_type="image/png"),
        AudioContent(data=b64(10), mime_type="audio/wav"),
        EmbeddedResource(resource=TextResourceContents(uri="file:///a.txt", text="inside")),
        EmbeddedResource(resource=BlobResourceContents(uri="file:///b.bin", blob=b64(7), mime_type="application/x")),
    ])  # fmt: skip
    assert render(res).split("\n") == [
        "[image: image/png, 1234 bytes]",
        "[audio: audio/wav, 10 bytes]",
        "inside",
        "[resource: file:///b.bin, application/x, 7 bytes]",
    ]


def test_header_values_come_from_the_workers_environment() -> None:
    env = {"TOKEN": "abc", "KEY": "k"}
    got = expand_headers({"Authorization": "Bearer ${env:TOKEN}", "X-Key": "env:KEY", "X-Plain": "v"}, env)
    assert got == {"Authorization": "Bearer abc", "X-Key": "k", "X-Plain": "v"}
    with pytest.raises(McpConfigError, match="MISSING"):
        expand_headers({"Authorization": "Bearer ${env:MISSING}"}, env)


def test_exposed_names_fit_a_providers_function_names() -> None:
    assert exposed_name("srv", "get.weather/v2") == "srv__get_weather_v2"
    assert exposed_name("srv", "x" * 80) is None


def test_a_server_name_cannot_hold_the_separator_and_names_map_back_to_their_server() -> None:
    with pytest.raises(ValueError):
        McpServerConfig(name="a__b", url="http://x/mcp")
    p = AgentProfile(name="p", mcp_servers=[McpServerConfig(name="gh", url="http://x/mcp", timeout_s=5)])
    assert p.mcp_server_of("gh__search") is p.mcp_servers[0]
    assert p.mcp_server_of("other__search") is None and p.mcp_server_of("gh") is None
    assert p.settings_for("gh__search").timeout_s == 5  # the server's timeoutS, unless toolSettings say
