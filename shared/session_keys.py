"""A session's keys (shared/keys.py's ``Partition`` has them): its hash, the runs waiting for its
active run, all its runs, its finished run loops, and the tool results and calls its runs left.
A session's keys live at its home partition, with its runs."""

from __future__ import annotations

__all__ = ["SessionKeys"]


class SessionKeys:
    """The session keys of one partition (prefixes declared by ``_session_prefixes``)."""

    def _session_prefixes(self, b: str) -> None:
        self.session_prefix = b + "s:"  # hash: shared.fields.SessionField
        self.session_loops_prefix = b + "s.loops:"  # list of finished run loops (JSON), oldest first
        self.session_results_prefix = b + "s.results:"  # hash toolCallId -> result, for recall
        # list of every tool call its runs made, ended as they may (JSON worker.core.context.PastCall),
        # oldest first: what search_history walks
        self.session_calls_prefix = b + "s.calls:"
        self.session_pending_prefix = b + "s.pending:"  # list of runIds waiting for the active run
        self.session_runs_prefix = b + "s.runs:"  # list of every runId of the session

    def session(self, session_id: str) -> str:
        return self.session_prefix + session_id

    def session_loops(self, session_id: str) -> str:
        return self.session_loops_prefix + session_id

    def session_results(self, session_id: str) -> str:
        return self.session_results_prefix + session_id

    def session_calls(self, session_id: str) -> str:
        return self.session_calls_prefix + session_id

    def session_pending(self, session_id: str) -> str:
        return self.session_pending_prefix + session_id

    def session_runs(self, session_id: str) -> str:
        return self.session_runs_prefix + session_id

    def session_keys(self, session_id: str) -> list[str]:
        """hash, pending, runs, loops, results, calls: what the scripts that create or end runs touch."""
        s = session_id
        return [self.session(s), self.session_pending(s), self.session_runs(s), self.session_loops(s),
                self.session_results(s), self.session_calls(s)]  # fmt: skip
