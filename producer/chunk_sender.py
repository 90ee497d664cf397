"""How a batch's chunks reach Redis: SUBMIT_MANY calls (each on one partition) written on one
connection per node as they are ready, their replies read at the end (shared/route.py)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from producer.prepared import Prepared
from shared import keys
from shared.calls.submission import SubmitMany
from shared.script_sending import Parts
from shared.scripts import Scripts

__all__ = ["ChunkSender"]


class ChunkSender:
    """Writes SUBMIT_MANY calls as they are ready (``Sending.flush``: on one connection per node)
    and reads the replies at the end: a chunk answered NOSCRIPT or a redirection, or left unanswered
    by a connection error, is sent again by the route (shared/route.py); SUBMIT is idempotent per
    runId. ``loaded``: the (node, script) pairs known to be loaded, kept by its owner
    (producer.submitter.Submitter) across batches and added to here."""

    def __init__(
        self, parts: Parts, scripts: Scripts, loaded: set[tuple[int, str]], tenant: str, batch_id: str
    ) -> None:
        self.parts, self.scripts = parts, scripts
        self.tenant, self.batch_id = tenant, batch_id
        self.out = parts.sending(loaded=loaded)

    async def __aenter__(self) -> ChunkSender:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.out.aclose()

    def call(self, chunk: list[Prepared], batch_webhook: str, items: Sequence[int] = ()) -> SubmitMany:
        """SUBMIT_MANY for one chunk; ``items``: the runs' item indexes in the batch (the order its
        results are exported in)."""
        runs = [
            p.submission(self.tenant, self.batch_id, items[n] if items else None) for n, p in enumerate(chunk)
        ]
        return SubmitMany.of(self.tenant, self.batch_id, batch_webhook, runs)

    async def send(
        self, part: keys.Partition, chunk: list[Prepared], batch_webhook: str, items: Sequence[int] = ()
    ) -> None:
        call = self.call(chunk, batch_webhook, items)
        k, a = self.scripts.framing.frame(part, call.keys(part), call.argv())
        self.out.add_script(part, self.scripts.submit_many, k, a)
        await self.out.flush()

    async def replies(self) -> list[Any]:
        return await self.out.replies()
