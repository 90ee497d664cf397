"""What the batcher needs of a provider's batch endpoint (OpenAI's in openai_batches.py,
Anthropic's in anthropic_batches.py).

Two shapes of creation: OpenAI's takes an uploaded input file (``upload``, then ``create`` from
its id); Anthropic's takes the requests in the create call itself (``uploads`` False: ``upload``
does nothing and ``create`` gets the request lines)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

__all__ = ["BatchProvider", "BatchReply", "BatchStatus", "LostCreate"]


@dataclass(frozen=True, slots=True)
class BatchReply:
    """One request's answer: the provider's response body (a chat completion), or why there is none
    (``error``: ``expired``, ``cancelled``, ``failed: …``, ``http 500: …``)."""

    body: dict[str, Any] | None = None
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"body": self.body} if self.body is not None else {"error": self.error}


@dataclass(frozen=True, slots=True)
class LostCreate:
    """What is known of a batch whose create may have been sent without its answer kept: for a
    provider whose batches carry no tag to find it by (Anthropic's)."""

    since_ms: int  # the batch was closed then: it cannot have been created before
    requests: int  # how many requests it was created with
    known: frozenset[str]  # the provider ids of the endpoint's other batches (not it)


@dataclass(frozen=True, slots=True)
class BatchStatus:
    state: str  # the provider's word
    done: bool  # no more answers will come: fetch the results
    counts: dict[str, int]


class BatchProvider(Protocol):
    uploads: bool  # whether the input is uploaded before the create (else create carries it)

    async def upload(self, lines: list[bytes], tag: str) -> str:
        """The batch's input (request lines) handed over; the provider's id for it."""
        ...

    async def create(self, upload_id: str, tag: str, lines: list[bytes]) -> str:
        """The batch created at the provider from its input (``lines`` when it takes no upload),
        labelled ``tag``; its provider id."""
        ...

    async def find(self, tag: str, lost: LostCreate) -> str | None:
        """The provider id of a batch created with ``tag``, if one was (a create whose answer was lost)."""
        ...

    async def status(self, provider_id: str) -> BatchStatus: ...

    async def results(self, provider_id: str, ids: list[str]) -> dict[str, BatchReply]:
        """Every answered or failed request of a finished batch, by agentmill's custom_id (``ids``:
        the batch's; ``"*"``: an answer for each of them)."""
        ...

    async def cancel(self, provider_id: str) -> None:
        """Ask the provider to stop the batch (its unanswered requests then end as cancelled)."""
        ...

    async def aclose(self) -> None: ...
