"""The outbound guard connects to what it checked; webhooks are bounded in size, time and share.

Only loopback is ever connected to: public addresses appear only in fake resolvers whose answers
reach a recording backend that refuses to connect.
"""

from __future__ import annotations

import asyncio
import ipaddress
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpcore
import httpx
import orjson
import pytest
import uvicorn
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from agentmill_client import limits
from agentmill_client.models import EventKind
from producer import webhooks
from shared import netguard
from shared.netguard import BlockedAddressError, guarded_client, guarded_request
from shared.netguard_pool import GuardedTransport
from shared.netguard_rules import forbidden
from shared.settings import Settings
from tests.integration.helpers import producer_for, running_worker, script_run, stream
from tests.support.redis_server import free_port
from tests.support.schema import K, stored

pytestmark = pytest.mark.integration


class Recording(httpcore.AsyncNetworkBackend):
    """Records where the guard asked to connect, and connects nowhere."""

    def __init__(self) -> None:
        self.targets: list[tuple[str, int]] = []

    async def connect_tcp(self, host: str, port: int, *args: Any, **kw: Any) -> httpcore.AsyncNetworkStream:
        self.targets.append((host, port))
        raise httpcore.ConnectError("the test backend connects nowhere")


def rebinding(*answers: list[str]) -> tuple[Callable[[str, int], Any], list[str]]:
    """A resolver answering each question with the next answer (the last one repeats)."""
    asked: list[str] = []

    async def resolve(host: str, port: int) -> list[str]:
        asked.append(host)
        return answers[min(len(asked), len(answers)) - 1]

    return resolve, asked


async def test_a_rebinding_resolver_is_asked_once_and_its_checked_answer_is_used() -> None:
    backend = Recording()
    resolve, asked = rebinding(["8.8.8.8"], ["127.0.0.1"])
    async with guarded_client(resolver=resolve, inner=backend) as client:
        with pytest.raises(httpx.ConnectError):
            await guarded_request(client, "POST", "http://rebind.example:8080/hook", content=b"{}")
    assert asked == ["rebind.example"]  # resolved once ...
    assert backend.targets == [("8.8.8.8", 8080)]  # ... and connected to the address it checked


@pytest.mark.parametrize(
    "answers",
    [[["127.0.0.1"], ["8.8.8.8"]], [["8.8.8.8", "127.0.0.1"]], [["100.100.100.200"]], [["100.64.1.2"]]],
)
async def test_a_host_resolving_to_any_non_global_address_is_refused(answers: list[list[str]]) -> None:
    backend = Recording()
    resolve, _ = rebinding(*answers)
    async with guarded_client(resolver=resolve, inner=backend) as client:
        with pytest.raises(BlockedAddressError, match="not a public address"):
            await guarded_request(client, "GET", "https://rebind.example/")
    assert backend.targets == []


@pytest.mark.parametrize(
    "ip", ["100.64.0.1", "100.100.100.200", "100.127.255.254", "169.254.169.254", "fd00:ec2::254", "192.0.0.192",
           "198.18.0.1", "::ffff:100.64.0.1", "2001:db8::1", "240.0.0.1"],
)  # fmt: skip
def test_shared_metadata_and_reserved_ranges_are_refused(ip: str) -> None:
    assert forbidden(ipaddress.ip_address(ip))


async def test_literal_addresses_are_checked_without_a_lookup() -> None:
    backend = Recording()
    resolve, asked = rebinding(["8.8.8.8"])
    async with guarded_client(resolver=resolve, inner=backend) as client:
        with pytest.raises(BlockedAddressError):
            await guarded_request(client, "GET", "http://100.100.100.200/latest/meta-data")
        with pytest.raises(httpx.ConnectError):
            await guarded_request(client, "GET", "https://[2606:4700:4700::1111]:8443/")
    assert asked == [] and backend.targets == [("2606:4700:4700::1111", 8443)]


async def test_an_international_host_name_is_checked_and_connected_as_its_ascii_form() -> None:
    backend = Recording()
    resolve, asked = rebinding(["8.8.8.8"])
    async with guarded_client(resolver=resolve, inner=backend) as client:
        with pytest.raises(httpx.ConnectError):
            await guarded_request(client, "GET", "http://Bücher.example:8080/")
    assert asked == ["xn--bcher-kva.example"] and backend.targets == [("8.8.8.8", 8080)]


async def test_a_clients_answers_are_reused_for_a_while_and_checked_for_every_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    backend = Recording()
    resolve, asked = rebinding(["127.0.0.1"], ["8.8.8.8"])
    async with guarded_client(resolver=resolve, inner=backend) as client:
        with pytest.raises(httpx.ConnectError):
            await guarded_request(client, "GET", "http://svc.example/", allow_hosts=["svc.example"])
        for _ in range(2):  # the answer is remembered, and refused for a request not allowing the host
            with pytest.raises(BlockedAddressError, match="not a public address"):
                await guarded_request(client, "GET", "http://svc.example/")
        assert asked == ["svc.example"] and backend.targets == [("127.0.0.1", 80)]
        monkeypatch.setattr(netguard, "ANSWER_TTL_S", 0.0)  # past its time, the host is resolved again
        with pytest.raises(httpx.ConnectError):
            await guarded_request(client, "GET", "http://svc.example/")
        assert asked == ["svc.example"] * 2 and backend.targets[-1] == ("8.8.8.8", 80)


async def test_a_plain_client_is_not_accepted() -> None:
    async with httpx.AsyncClient() as client:
        with pytest.raises(TypeError):
            await guarded_request(client, "GET", "http://127.0.0.1:1/")


# ---- webhooks against local receivers ----


@asynccontextmanager
async def receiver(app: Starlette) -> AsyncIterator[int]:
    port = free_port()
    srv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="error", lifespan="off"))
    task = asyncio.create_task(srv.serve())
    while not srv.started:
        await asyncio.sleep(0.01)
    try:
        yield port
    finally:
        srv.should_exit = True
        srv.force_exit = True
        await asyncio.wait_for(task, 10)


async def finished_run(redis: Redis, rid: str, url: str) -> None:
    await redis.hset(K.run(rid), mapping={"webhook": url, "result": b'{"status":"completed"}'})
    await redis.lpush(K.webhooks, rid)


def hook_settings(redis_url: str, **kw: Any) -> Settings:
    return Settings(redis_url=redis_url, webhook_allow_hosts="127.0.0.1,localhost", **kw)


async def test_a_200_mb_webhook_answer_is_cut_at_the_cap(redis_url: str, redis: Redis) -> None:
    sent = 0

    async def huge(request: Request) -> Response:
        async def body() -> AsyncIterator[bytes]:
            nonlocal sent
            chunk = b"x" * 1_000_000
            for _ in range(200):
                sent += len(chunk)
                yield chunk

        return StreamingResponse(body(), media_type="application/octet-stream")

    async with receiver(Starlette(routes=[Route("/hook", huge, methods=["POST"])])) as port:
        await finished_run(redis, "big", f"http://127.0.0.1:{port}/hook")
        async with guarded_client() as http:
            t0 = time.monotonic()
            assert await webhooks.deliver_once(redis, hook_settings(redis_url), http) == 1
            assert time.monotonic() - t0 < 5
    state = await redis.hgetall(K.webhook("big"))
    assert f"over {limits.MAX_WEBHOOK_RESPONSE_BYTES} bytes".encode() in state[b"lastError"]
    assert b"delivered" not in state
    assert sent > 0  # the receiver did answer (a closed socket swallows the rest of its 200 MB)


async def test_a_trickling_receiver_is_cut_at_the_deadline(redis_url: str, redis: Redis) -> None:
    async def trickle(request: Request) -> Response:
        async def body() -> AsyncIterator[bytes]:
            for _ in range(600):
                yield b"."
                await asyncio.sleep(0.05)  # each byte well inside any read timeout

        return StreamingResponse(body())

    async with receiver(Starlette(routes=[Route("/hook", trickle, methods=["POST"])])) as port:
        await finished_run(redis, "slow", f"http://127.0.0.1:{port}/hook")
        async with guarded_client() as http:
            d = webhooks.Deliverer(redis, hook_settings(redis_url), http, deadline_s=1.0)
            t0 = time.monotonic()
            (rid,) = await d.claim(10)
            await d.deliver(rid)
            assert time.monotonic() - t0 < 3
    state = await redis.hgetall(K.webhook("slow"))
    assert b"Timeout" in state[b"lastError"] and b"delivered" not in state


async def test_one_slow_receiver_does_not_hold_back_other_deliveries(redis_url: str, redis: Redis) -> None:
    arrived: dict[str, float] = {}
    headers: dict[str, dict[str, str]] = {}

    async def slow(request: Request) -> Response:
        await asyncio.sleep(8)
        return Response(status_code=200)

    async def fast(request: Request) -> Response:
        arrived[request.headers["x-agentmill-delivery"]] = time.monotonic()
        headers[request.headers["x-agentmill-delivery"]] = dict(request.headers)
        return Response(status_code=200)

    async with (
        receiver(Starlette(routes=[Route("/hook", slow, methods=["POST"])])) as slow_port,
        receiver(Starlette(routes=[Route("/hook", fast, methods=["POST"])])) as fast_port,
    ):
        for i in range(40):  # more than all delivery slots, to one slow host
            await finished_run(redis, f"slow-{i}", f"http://localhost:{slow_port}/hook")
        stop = asyncio.Event()
        task = asyncio.create_task(
            webhooks.deliver_forever(redis, hook_settings(redis_url), stop, interval_s=0.05)
        )
        try:
            await asyncio.sleep(0.5)  # the slow deliveries are under way
            t0 = time.monotonic()
            await finished_run(redis, "fast", f"http://127.0.0.1:{fast_port}/hook")
            while "fast" not in arrived and time.monotonic() - t0 < 5:
                await asyncio.sleep(0.02)
        finally:
            stop.set()
            await asyncio.wait_for(task, 10)
    assert "fast" in arrived and arrived["fast"] - t0 < 1.0
    # No AGENTMILL_WEBHOOK_SECRET: sent unsigned and marked so, never signed with an empty key.
    assert headers["fast"]["x-agentmill-unsigned"] == "true"
    assert "x-agentmill-signature" not in headers["fast"]


# ---- connection reuse: the guard holds per request, not per connection ----


async def test_a_pooled_connection_does_not_carry_another_tools_allow_list(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    """Tenant a's tool may call 127.0.0.1; tenant b's may call only ``localhost``, whose answer
    redirects to 127.0.0.1. Run on one worker right after a's run (its connection to 127.0.0.1
    still in the pool), b's redirect is refused all the same, as it is on its own."""
    internal: list[str] = []

    async def secret(request: Request) -> Response:
        internal.append(request.headers.get("idempotency-key", ""))
        return Response('{"secret": "internal answer"}', media_type="application/json")

    async def hop(request: Request) -> Response:
        return Response(
            status_code=307, headers={"location": f"http://127.0.0.1:{request.url.port}/internal"}
        )

    app = Starlette(
        routes=[Route("/internal", secret, methods=["POST"]), Route("/hop", hop, methods=["POST"])]
    )
    async with receiver(app) as port:
        profiles = [
            {"name": "inside", "provider": {"kind": "scripted", "mode": "script"},
             "httpTools": [{"name": "lookup", "url": f"http://127.0.0.1:{port}/internal", "allowHosts": ["127.0.0.1"]}]},
            {"name": "outside", "provider": {"kind": "scripted", "mode": "script"},
             "httpTools": [{"name": "lookup", "url": f"http://localhost:{port}/hop", "allowHosts": ["localhost"]}]},
        ]  # fmt: skip
        path = tmp_path / "profiles.json"
        path.write_bytes(orjson.dumps({"profiles": profiles}))
        p = producer_for(redis, redis_url, profiles=str(path))
        call = [{"toolCalls": [{"id": "c1", "name": "lookup", "arguments": {}}]}, {"content": "done"}]
        async with running_worker(redis_url, profiles=str(path)):
            a = await p.submit({**script_run(call), "agent": "inside", "runId": "run-a"}, tenant="a")
            assert await p.wait(a.run_id, timeout_s=15, tenant="a") is not None
            b = await p.submit({**script_run(call), "agent": "outside", "runId": "run-b"}, tenant="b")
            assert await p.wait(b.run_id, timeout_s=15, tenant="b") is not None
    keys_of = {a.run_id: stored(p.settings, "a", a.run_id), b.run_id: stored(p.settings, "b", b.run_id)}
    results = {
        rid: [e.payload for e in await stream(redis, keys_of[rid]) if e.kind == EventKind.TOOL_RESULT]
        for rid in (a.run_id, b.run_id)
    }
    assert "internal answer" in str(results[a.run_id])  # a's tool reached its allow-listed address
    assert len(internal) == 1 and internal[0].startswith(keys_of[a.run_id])  # b's request never arrived
    ((b_result,),) = [results[b.run_id]]
    assert "internal answer" not in str(b_result) and "refused" in str(b_result), b_result


class Counting(httpcore.AsyncNetworkBackend):
    """Connects for real, counting the connections opened."""

    def __init__(self) -> None:
        self.inner = httpcore.AnyIOBackend()
        self.opened: list[tuple[str, int]] = []

    async def connect_tcp(self, host: str, port: int, *args: Any, **kw: Any) -> httpcore.AsyncNetworkStream:
        self.opened.append((host, port))
        return await self.inner.connect_tcp(host, port, *args, **kw)

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


def local_app(gate: asyncio.Event | None = None) -> Starlette:
    async def ok(request: Request) -> Response:
        if gate is not None and "wait" in request.query_params:
            await gate.wait()
        return Response("ok")

    return Starlette(routes=[Route("/", ok)])


async def test_connections_are_reused_only_for_the_same_checked_destination_and_allow_list() -> None:
    backend = Counting()
    async with receiver(local_app()) as port, guarded_client(inner=backend) as client:
        for _ in range(3):  # one connection, kept alive and reused
            await guarded_request(client, "GET", f"http://127.0.0.1:{port}/", allow_hosts=["127.0.0.1"])
        assert len(backend.opened) == 1
        # The same address under another allow list: a pool (and a connection) of its own.
        await guarded_request(client, "GET", f"http://127.0.0.1:{port}/", allow_hosts=["127.0.0.1", "x"])
        assert len(backend.opened) == 2
        # No allow list: refused before any connection, pooled or new.
        with pytest.raises(BlockedAddressError, match="not a public address"):
            await guarded_request(client, "GET", f"http://127.0.0.1:{port}/")
        assert len(backend.opened) == 2
        with pytest.raises(BlockedAddressError, match="checked by guarded_request"):
            await client.get(f"http://127.0.0.1:{port}/")  # the client sends only checked requests


async def test_pools_are_bounded_and_an_evicted_pool_closes_after_its_last_response() -> None:
    gate = asyncio.Event()
    async with receiver(local_app(gate)) as port, guarded_client(max_pools=2) as client:
        transport = client._transport
        assert isinstance(transport, GuardedTransport)
        url = f"http://127.0.0.1:{port}/"
        slow = asyncio.create_task(
            guarded_request(client, "GET", url + "?wait", allow_hosts=["127.0.0.1", "slow"])
        )
        while not transport.pools:
            await asyncio.sleep(0.01)
        (first,) = transport.pools.values()  # the slow request is under way on this pool
        for n in range(3):  # three more destinations through a bound of two pools
            await guarded_request(client, "GET", url, allow_hosts=["127.0.0.1", f"h{n}"])
        assert len(transport.pools) == 2 and first.retired and not first.closed
        gate.set()
        assert (await slow).text == "ok"  # eviction did not cut the request under way ...
        assert first.closed and first not in transport.retired  # ... and closed its pool after it
        kept = list(transport.pools.values())
    assert all(p.closed for p in kept)  # closing the client closes every pool


async def test_requests_under_way_are_bounded_across_all_pools() -> None:
    gate = asyncio.Event()
    async with receiver(local_app(gate)) as port, guarded_client(max_connections=2) as client:
        transport = client._transport
        assert isinstance(transport, GuardedTransport)
        calls = [
            asyncio.create_task(
                guarded_request(
                    client, "GET", f"http://127.0.0.1:{port}/?wait", allow_hosts=["127.0.0.1", f"h{n}"]
                )
            )
            for n in range(3)  # three destinations, so three pools
        ]
        while sum(p.open for p in transport.pools.values()) < 2:
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.1)
        assert len(transport.pools) == 2  # the third waits for a slot before any pool or connection
        gate.set()
        assert [r.text for r in await asyncio.gather(*calls)] == ["ok"] * 3
        assert len(transport.pools) == 3 and all(p.open == 0 for p in transport.pools.values())
        assert not transport.slots.locked()
