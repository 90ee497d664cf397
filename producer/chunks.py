"""How a batch's chunks reach Redis: SUBMIT_MANY calls written on one connection as they are ready,
their replies read at the end."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import NoScriptError, RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from producer.submission import Prepared

if TYPE_CHECKING:
    from producer.submitter import Submitter

__all__ = ["ChunkSender"]


class ChunkSender:
    """Writes SUBMIT_MANY calls on one connection as they are ready and reads the replies at the end
    (a pipeline whose commands go out early). A chunk answered NOSCRIPT (Redis lost its script
    cache) or left unanswered by a connection error is sent again through the ordinary client, which
    loads the script and retries: SUBMIT is idempotent per runId."""

    def __init__(self, producer: Submitter, tenant: str, batch_id: str, batch_webhook: str) -> None:
        self.p, self.tenant, self.batch_id, self.batch_webhook = producer, tenant, batch_id, batch_webhook
        self.sent: list[list[Any]] = []
        self.conn: Any = None
        self.broken = False

    async def __aenter__(self) -> ChunkSender:
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.conn is not None:
            if self.broken or exc[0] is not None:
                await self.conn.disconnect()
            await self.p.redis.connection_pool.release(self.conn)

    async def send(self, chunk: list[Prepared]) -> None:
        args = self.p._submit_many_args(chunk, self.tenant, self.batch_id, self.batch_webhook)
        self.sent.append(args)
        if self.broken:
            return
        try:
            if self.conn is None:
                if not self.p._many_loaded:
                    await self.p.redis.script_load(self.p.scripts.submit_many.script)
                    self.p._many_loaded = True
                self.conn = await self.p.redis.connection_pool.get_connection()
            await self.conn.send_command("EVALSHA", self.p.scripts.submit_many.sha, 0, *args)
        except (RedisConnectionError, RedisTimeoutError, OSError):
            self.broken = True

    async def replies(self) -> list[Any]:
        out: list[Any] = []
        for args in self.sent:
            if not self.broken:
                try:
                    out.append(await self.conn.read_response(disconnect_on_error=True))
                    continue
                except NoScriptError:
                    pass  # sent again below, through the client that loads the script
                except ResponseError as exc:
                    out.append(exc)
                    continue
                except (RedisConnectionError, RedisTimeoutError, OSError):
                    self.broken = True
            try:
                out.append(await self.p.scripts.submit_many(args=args))
            except RedisError as exc:
                out.append(exc)
        return out
