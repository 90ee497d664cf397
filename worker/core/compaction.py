"""Compaction strategies (the design documents' truncation, model summary, key-information
extraction, and "smart" compression by importance), chosen per profile by ``compaction.strategy``:

- ``truncate`` (the default without ``useModel``): the middle of the transcript becomes one line
  per message, cut short (``context.truncation_summary``).
- ``summary`` (the default with ``useModel``): a model call of the profile summarises the middle.
- ``keyFacts``: a model call extracts the middle's key facts in the structure ``KEY_FACTS_PROMPT``
  documents (decisions, identifiers, numbers, open questions).
- ``importance``: no model call; the middle's important messages are kept as they were, newest
  first within ``compaction.importanceBudgetTokens``, and the rest truncated as ``truncate`` does.
  Important: a user message (a correction, a repair prompt, an earlier summary), a tool round with
  an error result or a rejection, a round calling a tool that needs approval, and the latest round
  of each tool (unless the recent tail holds a later one). A tool round (the assistant message and
  all its results) is kept or dropped whole, so the model input stays well-formed.

Both model strategies fall back to truncation when the summary call fails. Everything here is pure.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentmill_client.models import Message
from shared.profiles import CompactionConfig
from worker.core import context, policy

__all__ = ["KEY_FACTS_PROMPT", "SUMMARY_PROMPT", "by_importance", "summary_prompt", "without_model"]

SUMMARY_PROMPT = (
    "Summarise the conversation below for your own later use: keep the user's goal, decisions, facts, "
    "numbers and tool results that still matter; drop chatter. Plain text, at most 300 words."
)
KEY_FACTS_PROMPT = (
    "Extract the key facts of the conversation below for your own later use, in exactly this "
    "structure, one fact per '- ' line:\n"
    "DECISIONS:\n- what was decided or done, and why\n"
    "IDENTIFIERS:\n- ids, names, URLs, file paths and toolCallIds that may be needed again, verbatim\n"
    "NUMBERS:\n- every number that still matters, with its unit and what it measures\n"
    "OPEN QUESTIONS:\n- what is still unanswered or left to do\n"
    "Write '- none' under a heading with nothing. Plain text, at most 300 words."
)
_ERROR_PREFIXES = ("error", "rejected by a human")


def summary_prompt(cfg: CompactionConfig) -> str | None:
    """The model's instructions for the profile's strategy; None: no model call (truncate, importance)."""
    return {"summary": SUMMARY_PROMPT, "keyFacts": KEY_FACTS_PROMPT}.get(cfg.resolved_strategy())


def _units(middle: Sequence[Message]) -> list[list[Message]]:
    """The middle as units kept or dropped whole: a tool round (assistant + its results) or one message."""
    units: list[list[Message]] = []
    for m in middle:
        if m.role == "tool" and units and (units[-1][0].tool_calls or units[-1][0].role == "tool"):
            units[-1].append(m)
        else:
            units.append([m])
    return units


def _important(unit: list[Message], seen_tools: set[str], approval_tools: set[str]) -> bool:
    first = unit[0]
    if first.role == "user":
        return True
    results = [m for m in unit if m.role == "tool"]
    if any(m.text.lstrip().lower().startswith(_ERROR_PREFIXES) for m in results):
        return True
    if any(c.name in approval_tools for c in first.tool_calls or ()):
        return True
    return any((m.name or "") not in seen_tools for m in results)


def by_importance(
    transcript: Sequence[Message], keep_recent: int, budget_tokens: int, approval_tools: Sequence[str] = ()
) -> tuple[list[Message], int]:
    """The ``importance`` strategy: (the new transcript, how many messages were summarised)."""
    parts = context.split_for_compaction(transcript, keep_recent)
    if parts is None:
        return list(transcript), 0
    head, middle, tail = parts
    units = _units(middle)
    seen = {m.name or "" for m in tail if m.role == "tool"}
    approvals = set(approval_tools)
    keep: set[int] = set()
    used = 0
    for i in range(len(units) - 1, -1, -1):  # newest first: the latest result of a tool is seen first
        unit = units[i]
        important = _important(unit, seen, approvals)
        seen |= {m.name or "" for m in unit if m.role == "tool"}
        cost = policy.estimate_tokens(unit)
        if important and used + cost <= budget_tokens:
            keep.add(i)
            used += cost
    dropped = [m for i, u in enumerate(units) if i not in keep for m in u]
    if not dropped:
        return list(transcript), 0
    kept = [m for i, u in enumerate(units) if i in keep for m in u]
    summary = context.summary_message(len(dropped), context.truncation_summary(dropped))
    return [head, summary, *kept, *tail], len(dropped)


def without_model(
    transcript: Sequence[Message],
    keep_recent: int,
    cfg: CompactionConfig,
    approval_tools: Sequence[str],
    reason: str,
) -> tuple[list[Message], int]:
    """Compaction with no model call: ``importance``, or ``truncate``. When importance would drop
    nothing and the provider refused the input (``overflow``), everything in the middle goes."""
    if cfg.resolved_strategy() == "importance":
        new, removed = by_importance(transcript, keep_recent, cfg.importance_budget_tokens, approval_tools)
        if removed or reason != "overflow":
            return new, removed
    return context.compact(transcript, keep_recent)
