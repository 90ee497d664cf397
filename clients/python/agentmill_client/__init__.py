"""agentmill's Python client: submit agent runs and batches to the HTTP API, follow their events,
control them. ``Client`` blocks; ``AsyncClient`` has the same calls as coroutines. Every error
answer raises ``ApiError`` with the API's stable ``code``.

The models are the API's wire contract (camelCase JSON): the server imports them from here too,
which is why the clients (httpx, asyncio) load only when first named: the server's pure modules
import the models without them.
"""

from typing import TYPE_CHECKING, Any

from agentmill_client._version import __version__
from agentmill_client.agents import AgentsPage, AgentVersionView, AgentView
from agentmill_client.api import (
    AbortAnswer,
    Accepted,
    ApprovalsAnswer,
    BatchAbortAnswer,
    BatchAnswer,
    BatchItem,
    BatchResultLine,
    BatchRetryAnswer,
    BatchView,
    EventsPage,
    RunsPage,
    RunSummary,
    RunView,
    ToolResultsAnswer,
)
from agentmill_client.errors import ApiError
from agentmill_client.inputs import ClientToolResult, ConcurrencyKey, Debounce, RateKey, RunInput
from agentmill_client.messages import Message
from agentmill_client.outputs import RunEvent, RunResult
from agentmill_client.schedules import Overlap, ScheduleAnswer, ScheduleInput, SchedulesPage, ScheduleView

if TYPE_CHECKING:
    from agentmill_client.client import AsyncClient, Client

__all__ = [
    "AbortAnswer",
    "Accepted",
    "AgentVersionView",
    "AgentView",
    "AgentsPage",
    "ApiError",
    "ApprovalsAnswer",
    "AsyncClient",
    "BatchAbortAnswer",
    "BatchAnswer",
    "BatchItem",
    "BatchResultLine",
    "BatchRetryAnswer",
    "BatchView",
    "Client",
    "ClientToolResult",
    "ConcurrencyKey",
    "Debounce",
    "EventsPage",
    "Message",
    "Overlap",
    "RateKey",
    "RunEvent",
    "RunInput",
    "RunResult",
    "RunSummary",
    "RunView",
    "RunsPage",
    "ScheduleAnswer",
    "ScheduleInput",
    "ScheduleView",
    "SchedulesPage",
    "ToolResultsAnswer",
    "__version__",
]


def __getattr__(name: str) -> Any:
    if name in ("AsyncClient", "Client"):
        from agentmill_client import client

        return getattr(client, name)
    raise AttributeError(f"module 'agentmill_client' has no attribute {name!r}")
