"""What a session keeps of each tool call its runs executed, declared once for both writers: the
worker, whose ending commit passes them (worker/core/sessions.py ``session_calls``, commit.lua), and the
scripts that end a run from outside its worker (prelude.lua's ``finalize``: an abort while queued or
parked, an approval timeout, a poison run), which take them from the run's tool records themselves.

Each done record of the run's tools hash (shared.tool_records) but the context tools' becomes an
entry of the session's calls list (keys.Partition.session_calls: JSON with the fields of
``PastCallField``, the JSON of worker.core.context.PastCall) and its result an entry of the session's
results (keys.Partition.session_results, ``<runId>/<toolCallId>`` -> the ToolResult's JSON, for
recall), in the order the model made the calls: by ``calledAt``, then by the call id's
``c<model call>.<position>``. The Lua spells these by tokens (``CALL.IS_ERROR``,
``__CONTEXT_TOOLS__``) that shared.scripts.render fills in from here.
"""

from __future__ import annotations

from enum import StrEnum

__all__ = ["CONTEXT_TOOLS", "LOAD_OLDER_HISTORY", "RECALL_TOOL", "SEARCH_HISTORY", "PastCallField"]

# The tools a run uses to read its session (worker/core/history_tools.py, worker/runner/tool_call.py):
# their calls are not the session's calls.
RECALL_TOOL = "recall_tool_call"
LOAD_OLDER_HISTORY = "load_older_history"
SEARCH_HISTORY = "search_history"
CONTEXT_TOOLS = frozenset({RECALL_TOOL, LOAD_OLDER_HISTORY, SEARCH_HISTORY})


class PastCallField(StrEnum):
    """An entry of a session's calls list (worker.core.context.PastCall's JSON)."""

    ID = "id"  # the session call id, <runId>/<toolCallId>
    NAME = "name"
    RUN_ID = "runId"
    IS_ERROR = "isError"
    CALLED_AT = "calledAtMs"  # unix ms, the run's clock (0: a record written before calls carried it)
