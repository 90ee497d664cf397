"""What one submission costs: Redis round trips (writes on a connection) and encodings of its input.

One submit is one SUBMIT; with quotas, one ADMIT_SUBMIT with one partition, and with more one round
trip before it (the tenant's counts; a chosen id's pointer is claimed alongside); its input is serialized once (size check, stored input and input
hash all come from the same bytes). A private redis-server runs the scripts for real."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import orjson
import pytest
from redis.asyncio import Redis
from redis.asyncio.connection import AbstractConnection

from agentmill_client.models import RunInput
from producer import agents
from producer.service import Producer
from shared.partitions import Partitions
from shared.quotas import Quota
from shared.settings import Settings

_HANDSHAKE = re.compile(rb"^\*\d+\r\n\$\d+\r\n(HELLO|CLIENT|SELECT|AUTH)\r\n", re.IGNORECASE)
BODY = {"inputMessages": [{"role": "user", "content": "hi"}]}  # no metadata: validation dumps it
QUOTA = Quota(max_active=100, submits_per_second=1000)


@pytest.fixture
async def client(redis_url: str) -> AsyncIterator[Redis]:
    c = Redis.from_url(redis_url)
    try:
        yield c
    finally:
        await c.aclose()


class Counts:
    def __init__(self) -> None:
        self.writes = 0  # commands or pipelines written: one round trip each
        self.dumps = 0  # orjson.dumps calls
        self.model_dumps = 0  # RunInput.model_dump calls

    def reset(self) -> None:
        self.writes = self.dumps = self.model_dumps = 0


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counts]:
    c = Counts()

    def counting(attr: str, f: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*a: Any, **kw: Any) -> Any:
            setattr(c, attr, getattr(c, attr) + 1)
            return f(*a, **kw)

        return wrapped

    send = AbstractConnection.send_packed_command

    async def sending(conn: AbstractConnection, command: Any, *a: Any, **kw: Any) -> None:
        # A round trip of the submission's own; a new connection's handshake (HELLO, CLIENT
        # SETINFO, SELECT: opened when calls overlap, so how many depends on timing) is not one.
        first = command if isinstance(command, bytes | bytearray) else b"".join(command[:1])
        if not _HANDSHAKE.search(bytes(first[:64])):
            c.writes += 1
        await send(conn, command, *a, **kw)

    monkeypatch.setattr(AbstractConnection, "send_packed_command", sending)
    # The agent's pointers (one HGET) are read again once they are POINTERS_FRESH_S old: a cost per
    # interval, not per submission, which a loaded machine's pauses between two submits brought
    # into the count. Kept fresh here, as they are at the rates where the count matters.
    monkeypatch.setattr(agents, "POINTERS_FRESH_S", 3600.0)
    monkeypatch.setattr(orjson, "dumps", counting("dumps", orjson.dumps))
    monkeypatch.setattr(RunInput, "model_dump", counting("model_dumps", RunInput.model_dump))
    yield c


async def submitted(p: Producer, counts: Counts, quota: Quota | None = None, **kw: Any) -> Counts:
    await p.submit({**BODY, "runId": "warm"}, quota=quota)  # scripts loaded, connections made
    counts.reset()
    await p.submit(BODY | kw, quota=quota)
    return counts


@pytest.mark.parametrize("n_parts", [1, 4])
async def test_one_submit_is_one_script_call(client: Redis, counts: Counts, n_parts: int) -> None:
    p = Producer(Partitions.of_client(client, n_parts), settings=Settings())
    c = await submitted(p, counts)
    assert c.writes == 1  # no quota: nothing to admit


async def test_a_chosen_id_is_claimed_beside_the_admission(client: Redis, counts: Counts) -> None:
    p = Producer(Partitions.of_client(client, 4), settings=Settings())
    c = await submitted(p, counts, runId="mine")
    assert c.writes == 2  # the pointer's claim, then SUBMIT


@pytest.mark.parametrize("kw", [{}, {"runId": "r1"}, {"sessionId": "s1", "autoCreateSession": True}])
async def test_the_input_is_encoded_once(client: Redis, counts: Counts, kw: dict[str, Any]) -> None:
    p = Producer(client, settings=Settings())
    c = await submitted(p, counts, **kw)
    assert (c.model_dumps, c.dumps) == (1, 1)


@pytest.mark.parametrize("n_parts", [1, 4])
async def test_a_quota_is_checked_by_the_script_that_creates_the_run(
    client: Redis, counts: Counts, n_parts: int
) -> None:
    p = Producer(Partitions.of_client(client, n_parts), settings=Settings())
    await p.submit({**BODY, "runId": "warm"}, quota=QUOTA)
    seen = set()
    for _ in range(40):
        counts.reset()
        sub = await p.submit(BODY, quota=QUOTA)
        away = p.parts.home(sub.run_id) is not p.parts.home("default")
        seen.add(away)
        # one partition: ADMIT_SUBMIT alone (the rate, the count and the run in one script); more:
        # the tenant's runs counted on each partition (and its bucket's token, when its home is
        # not the run's partition) beside each other, then ADMIT_SUBMIT
        assert counts.writes == (1 if n_parts == 1 else 3 if away else 2), (n_parts, away)
    assert len(seen) == (1 if n_parts == 1 else 2)  # both cases met (40 draws of 4 partitions)


@pytest.mark.parametrize("n_parts", [1, 4])
async def test_a_batch_is_one_admission_and_a_call_per_partition(
    client: Redis, counts: Counts, n_parts: int
) -> None:
    p = Producer(Partitions.of_client(client, n_parts), settings=Settings())
    await p.submit_many([BODY | {"runId": f"w{i}"} for i in range(8)], quota=QUOTA)
    counts.reset()
    await p.submit_many([BODY | {"runId": f"b{i}"} for i in range(8)], quota=QUOTA)
    # the rate and the counts (and with partitions the pointers' claim), the count, a SUBMIT_MANY per
    # partition that has some of the runs
    assert counts.writes == {1: 3, 4: 8}[n_parts]
    assert counts.model_dumps == 8
