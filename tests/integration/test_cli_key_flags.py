"""``agentmill submit --concurrency/--rate/--debounce`` (straight on Redis): the flags give the
runs whose line names none the caller's keys, and the resume line repeats them."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click
import orjson
import pytest
from redis.asyncio import Redis

from app.cli.key_flags import concurrency_flag, debounce_flag, rate_flag
from shared.fields import RunField
from tests.integration.helpers import script_run
from tests.support.cli import cli
from tests.support.schema import K

pytestmark = pytest.mark.integration


def test_the_flags_parse_a_key_and_its_numbers() -> None:
    assert concurrency_flag("user:1") == {"key": "user:1"}
    assert concurrency_flag("a=b=2") == {"key": "a=b", "limit": 2}
    assert rate_flag("cust-9=10/60") == {"key": "cust-9", "limit": 10, "periodS": 60}
    assert debounce_flag("chat-42=2000") == {"key": "chat-42", "periodMs": 2000}
    for parse, bad in (
        (rate_flag, "cust-9=10"),
        (rate_flag, "=1/2"),
        (debounce_flag, "chat"),
        (debounce_flag, "c=²"),
    ):
        with pytest.raises(click.BadParameter):
            parse(bad)


async def _runs(redis: Redis) -> list[str]:
    return [k.decode().removeprefix(K.run("")) async for k in redis.scan_iter(K.run("*"))]


async def test_cli_submit_takes_concurrency_and_rate_keys(
    redis: Redis, redis_url: str, tmp_path: Path
) -> None:
    f = tmp_path / "runs.jsonl"
    f.write_bytes(b"\n".join(orjson.dumps(script_run([{"text": "x"}])) for _ in range(3)))
    env = {"AGENTMILL_CLI_STATE_DIR": str(tmp_path / "state")}
    args = ("submit", str(f), "--concurrency", "user-1=2", "--rate", "cust-9=1/60")
    done = await asyncio.to_thread(cli, redis_url, *args, env=env)
    assert done.returncode == 0, done.stderr
    assert "--concurrency user-1=2 --rate cust-9=1/60" in done.stderr.replace("\n", "")  # the resume line
    runs = await _runs(redis)
    assert len(runs) == 3
    for r in runs:
        h = await redis.hmget(K.run(r), [RunField.CONC_KEY, RunField.CONC_LIMIT])
        assert h == [b"user-1", b"2"]
    waiting = [await redis.hget(K.run(r), RunField.WAITING_FOR) for r in runs]
    assert sorted(w or b"" for w in waiting) == [b"", b"rate:cust-9", b"rate:cust-9"]  # one start a minute
    bad = await asyncio.to_thread(cli, redis_url, "submit", str(f), "--rate", "cust-9", env=env)
    assert bad.returncode == 2 and "--rate" in bad.stderr


async def test_cli_submit_takes_a_debounce_key(redis: Redis, redis_url: str, tmp_path: Path) -> None:
    f = tmp_path / "runs.jsonl"
    f.write_bytes(b"\n".join(orjson.dumps(script_run([{"text": f"{i}"}])) for i in range(3)))
    env = {"AGENTMILL_CLI_STATE_DIR": str(tmp_path / "state")}
    done = await asyncio.to_thread(cli, redis_url, "submit", str(f), "--debounce", "chat-42=60000", env=env)
    assert done.returncode == 0, done.stderr
    statuses = sorted(
        [(await redis.hget(K.run(r), RunField.STATUS) or b"").decode() for r in await _runs(redis)]
    )
    assert statuses == [
        "scheduled",
        "superseded",
        "superseded",
    ]  # the last line's run waits, the others replaced
