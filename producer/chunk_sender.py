"""How a batch's chunks reach Redis: SUBMIT_MANY calls (each on one partition) written on one
connection per node as they are ready, their replies read at the end."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from producer.prepared import Prepared, meta_terms
from producer.routing import Parts, run_script
from shared import keys
from shared.scripts import Scripts
from shared.topology import is_retryable

__all__ = ["ChunkSender"]

_DOWN = (RedisConnectionError, RedisTimeoutError, OSError)


class ChunkSender:
    """Writes SUBMIT_MANY calls as they are ready, on one connection per node, and reads the replies
    at the end (a pipeline per node whose commands go out early). A chunk answered NOSCRIPT (the
    node lost its script cache) or a redirection, or left unanswered by a connection error, is sent
    again through ``Partitions.call``, which loads the script, follows the slot and retries: SUBMIT
    is idempotent per runId. ``loaded``: the nodes (ids of their clients) SUBMIT_MANY is known to be
    loaded on, kept by its owner (producer.submitter.Submitter) across batches and added to here."""

    def __init__(self, parts: Parts, scripts: Scripts, loaded: set[int], tenant: str, batch_id: str) -> None:
        self.parts, self.scripts, self.loaded = parts, scripts, loaded
        self.tenant, self.batch_id = tenant, batch_id
        # per chunk: its partition, KEYS, ARGV, and the node it was written to (None: not written)
        self.sent: list[tuple[keys.Partition, list[Any], list[Any], int | None]] = []
        self.conns: dict[int, tuple[Redis, Any]] = {}  # node (id of its client) -> (client, connection)
        self.broken: set[int] = set()

    async def __aenter__(self) -> ChunkSender:
        return self

    async def __aexit__(self, *exc: object) -> None:
        for node, (client, conn) in self.conns.items():
            if node in self.broken or exc[0] is not None:
                await conn.disconnect()
            await client.connection_pool.release(conn)

    def args(self, chunk: list[Prepared], batch_webhook: str, items: Sequence[int] = ()) -> list[Any]:
        """SUBMIT_MANY's arguments (after the partition's context) for one chunk; ``items``: the
        runs' item indexes in the batch (the order its results are exported in)."""
        spec = [
            [p.run_id, p.digest, p.session_id, p.run.webhook or "", "1" if p.run.auto_create_session else "",
             p.run.multitask_strategy or "enqueue", p.run.agent, meta_terms(p.run.metadata), p.client_id,
             p.client_session, str(items[n]) if items else "", *p.lane_args]
            for n, p in enumerate(chunk)
        ]  # fmt: skip
        return [self.tenant, self.batch_id, batch_webhook, orjson.dumps(spec), *(p.body for p in chunk)]

    async def send(
        self, part: keys.Partition, chunk: list[Prepared], batch_webhook: str, items: Sequence[int] = ()
    ) -> None:
        k, a = self.scripts.frame(part, [], self.args(chunk, batch_webhook, items))
        client = self.parts.client(part)
        node: int | None = id(client)
        if node in self.broken:
            node = None
        else:
            try:
                if node not in self.conns:
                    if node not in self.loaded:
                        await client.script_load(self.scripts.submit_many.script)
                        self.loaded.add(id(client))
                    self.conns[id(client)] = (client, await client.connection_pool.get_connection())
                conn = self.conns[id(client)][1]
                await conn.send_command("EVALSHA", self.scripts.submit_many.sha, len(k), *k, *a)
            except _DOWN:
                self.broken.add(id(client))
                node = None
        self.sent.append((part, k, a, node))

    async def replies(self) -> list[Any]:
        out: list[Any] = []
        for part, k, a, node in self.sent:
            if node is not None and node not in self.broken:
                try:
                    out.append(await self.conns[node][1].read_response(disconnect_on_error=True))
                    continue
                except NoScriptError:
                    pass  # sent again below, through the client that loads the script
                except ResponseError as exc:
                    if not is_retryable(exc):  # a redirection is sent again below
                        out.append(exc)
                        continue
                except _DOWN:
                    self.broken.add(node)
            try:
                out.append(await run_script(self.parts, self.scripts.submit_many, part, k, a))
            except RedisError as exc:
                out.append(exc)
        return out
