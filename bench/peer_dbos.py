"""Peer: DBOS Transact over PostgreSQL (bench/postgres.py's private cluster) running the peers'
agent job as a workflow of one step, from a DBOS queue.

Worker: ``python -m bench.peer_dbos`` (AGENTMILL_PEER_DB_URL, AGENTMILL_MAX_JOBS as the queue's
worker concurrency, AGENTMILL_POLL_DELAY_S as its polling interval, as arq's poll delay). Client
side: DBOSClient's enqueue, a done check and the per-workflow records DBOS keeps (created, started,
completed, ms)."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from bench.peer_job import model_reply

WORKER_ARGV = ["-m", "bench.peer_dbos"]
QUEUE_NAME = "peers"
WORKFLOW = "agent_job"


def worker_main() -> None:
    from dbos import DBOS

    DBOS(
        config={
            "name": "agentmill-bench",
            "system_database_url": os.environ["AGENTMILL_PEER_DB_URL"],
            "log_level": "WARNING",
        }
    )

    @DBOS.step(name="model_reply")
    async def model(messages: list[dict[str, Any]]) -> str:
        return await model_reply(messages)

    @DBOS.workflow(name=WORKFLOW)
    async def agent_job(inp: dict[str, Any]) -> dict[str, Any]:
        return {"i": inp["i"], "text": await model(inp["messages"])}

    DBOS.launch()
    DBOS.register_queue(  # persisted in the system database, so after launch
        QUEUE_NAME,
        worker_concurrency=int(os.environ.get("AGENTMILL_MAX_JOBS", "100")),
        polling_interval_sec=float(os.environ.get("AGENTMILL_POLL_DELAY_S", "0.05")),
    )

    async def forever() -> None:
        await asyncio.Event().wait()

    try:
        asyncio.run(forever())
    except KeyboardInterrupt:
        pass
    finally:
        DBOS.destroy()


class DbosPeer:
    name = "DBOS Transact"
    worker_argv = WORKER_ARGV

    def __init__(self) -> None:
        self.client: Any = None
        self.engine: Any = None

    async def connect(self, redis_url: str, db_url: str) -> None:
        import sqlalchemy as sa
        from dbos import DBOSClient

        self.engine = sa.create_engine(db_url)
        # The client never creates DBOS's tables; its own CLI does, as a deploy would.
        dbos_cli = Path(sys.executable).with_name("dbos")
        p = await asyncio.to_thread(
            subprocess.run,
            [str(dbos_cli), "migrate", "-s", db_url],
            capture_output=True,
            text=True,
            check=False,
        )
        if p.returncode:
            raise RuntimeError(f"dbos migrate failed: {(p.stderr or p.stdout).strip()[-300:]}")
        self.client = await asyncio.to_thread(DBOSClient, system_database_url=db_url)

    async def close(self) -> None:
        if self.client is not None:
            await asyncio.to_thread(self.client.destroy)
        if self.engine is not None:
            self.engine.dispose()

    async def reset(self) -> None:
        pass  # a fresh database per durability level; keys are unique within it

    async def enqueue(self, key: str, inp: dict[str, Any]) -> None:
        await self.client.enqueue_async(
            {"queue_name": QUEUE_NAME, "workflow_name": WORKFLOW, "workflow_id": key}, inp
        )

    def _query(self, sql: str, params: dict[str, Any]) -> list[Any]:
        import sqlalchemy as sa

        with self.engine.connect() as c:
            return list(c.execute(sa.text(sql), params))

    async def done(self) -> bool:
        rows = await asyncio.to_thread(
            self._query,
            "SELECT count(*) FROM dbos.workflow_status WHERE status IN ('ENQUEUED', 'PENDING')",
            {},
        )
        return int(rows[0][0]) == 0

    async def records(self, keys: list[str]) -> list[tuple[float, float, float]]:
        """(submitted, started, finished) ms per workflow, from DBOS's workflow_status rows."""
        rows = await asyncio.to_thread(
            self._query,
            "SELECT created_at, started_at_epoch_ms, coalesce(completed_at, updated_at)"
            " FROM dbos.workflow_status WHERE status = 'SUCCESS' AND workflow_uuid = ANY(:keys)",
            {"keys": keys},
        )
        return [(float(a), float(b if b is not None else a), float(c)) for a, b, c in rows]


if __name__ == "__main__":
    worker_main()
    sys.exit(0)
