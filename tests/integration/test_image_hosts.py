"""An image URL in a run's input reaches the provider as given, and a provider that fetches images
would fetch it from inside the network: its host is judged by the outbound guard's rules when the
run is submitted, and a loopback, private or metadata host is refused with 422 naming the part."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from redis.asyncio import Redis

from tests.integration.api_support import A, api, body, settings
from tests.support.schema import K

pytestmark = pytest.mark.integration

PIXEL = "data:image/png;base64,iVBORw0KGgo="


def with_image(url: str) -> dict[str, Any]:
    parts = [{"type": "text", "text": "what is this?"}, {"type": "image_url", "image_url": {"url": url}}]
    return body(inputMessages=[{"role": "user", "content": "hello"}, {"role": "user", "content": parts}])


@pytest.mark.parametrize(
    "url",
    [
        "https://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "https://127.0.0.1:8080/admin.png",
        "https://[::ffff:0:a9fe:a9fe]/x.png",  # the metadata address, IPv4-translated
        "https://[::ffff:127.0.0.1]/x.png",
        "https://2130706433/x.png",  # 127.0.0.1 as a resolver reads a bare number
        "https://0x7f.1/x.png",
        "https://10.0.0.7/x.png",
        "https://metadata.google.internal/computeMetadata/v1/",
        "https://localhost/x.png",
        "https://redis/x.png",  # a single-label name: a cluster's service
    ],
)
async def test_an_image_url_to_a_private_host_is_refused_at_submission(
    redis_url: str, redis: Redis, url: str
) -> None:
    async with api(settings(redis_url)) as base, httpx.AsyncClient(base_url=base, headers=A) as c:
        r = await c.post("/v1/runs", json=with_image(url))
        assert r.status_code == 422, r.text
        error = r.json()["error"]
        assert error["code"] == "invalid_input"
        assert error["field"] == "inputMessages.1.content.1.image_url.url"
        assert "may not be reached" in error["message"]
        r = await c.post("/v1/runs/batch", json={"runs": [body(), with_image(url)]})
        [_, refused] = r.json()["results"]
        assert refused["error"]["field"] == "runs.1.inputMessages.1.content.1.image_url.url"
    assert await redis.zcard(K.queue) == 1  # the batch's other run


async def test_public_and_data_image_urls_are_accepted(redis_url: str) -> None:
    async with api(settings(redis_url)) as base, httpx.AsyncClient(base_url=base, headers=A) as c:
        for url in (PIXEL, "https://images.example.com/cat.png", "https://8.8.8.8/x.png"):
            r = await c.post("/v1/runs", json=with_image(url))
            assert r.status_code == 202, r.text
