"""A run prepared for its submit script, pure: validated against the agent profiles, named (its ids
and the ids its keys use), and its input serialized once (the size check, the stored input and the
input hash all come from the same bytes); and the metadata terms it is listed under."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pydantic import ValidationError

from agentmill_client import limits
from agentmill_client.models import ImagePart, Message, RunInput
from producer.scope import Scope
from producer.submission import SubmissionError, reserved_id_error, validation_error
from shared import keys, payload_crypto
from shared.agent_rules import NAME_PATTERN, parse_ref
from shared.calls.submission import Submit
from shared.meta_terms import meta_term, meta_terms
from shared.netguard_rules import host_refusal
from shared.profiles import AgentProfile
from shared.provider_config import unpriced_message
from shared.quotas import Quota
from shared.schema_compiling import run_schemas
from shared.schema_validator import SchemaBoundError, compiled
from shared.stored_input import stored_input

__all__ = [
    "Prepared",
    "check_agent",
    "check_priced",
    "checked_messages",
    "concurrency_limit",
    "meta_term",
    "meta_terms",
    "parsed",
    "prepare",
    "unknown_agent",
    "validated",
]


@dataclass(frozen=True, slots=True)
class Prepared:
    """One valid run, encoded once for its submit script: ``run`` as its client knows it, ``run_id``
    and ``session_id`` the ids its keys use, ``client_id`` and ``client_session`` the ids its client
    knows them by when those differ ('' otherwise)."""

    run: RunInput
    run_id: str
    session_id: str
    body: bytes
    digest: str
    client_id: str = ""
    client_session: str = ""
    priority: int = limits.DEFAULT_PRIORITY  # its lane: RunInput.priority capped by the tenant's quota
    trace: str = ""  # the submitter's trace context (RunField.TRACE), '' = none
    conc_limit: int = 0  # its concurrency key's limit (concurrency_limit), 0 without a key
    rate_at: int = 0  # when its rate key lets it start (ms; producer.rate_keys), 0 = now

    @property
    def home(self) -> str:
        """The id whose home partition it lives at (producer.placement): its session's key, else its
        concurrency key's, else its debounce key's, else '' (its own id's)."""
        if self.session_id:
            return self.session_id
        if self.run.concurrency is not None:
            return keys.conc_home(self.run.concurrency.key)
        return keys.debounce_home(self.run.debounce.key) if self.run.debounce is not None else ""

    def submission(self, tenant: str, batch_id: str = "", item: int | None = None) -> Submit:
        """The run's record for the submit scripts (shared.calls.submission.Submit), its input sealed
        as stored (shared/payload_crypto.py); ``item``: its item index in the batch ``batch_id``."""
        run, c, d, r = self.run, self.run.concurrency, self.run.debounce, self.run.rate
        at = self.rate_at or run.run_at
        return Submit(
            run_id=self.run_id,
            input=payload_crypto.active().seal_json(self.body),
            input_hash=self.digest,
            tenant=tenant,
            session_id=self.session_id,
            webhook=run.webhook or "",
            auto_create_session="1" if run.auto_create_session else "",
            multitask=run.multitask_strategy or "enqueue",
            batch_id=batch_id,
            agent=run.agent,
            client_id=self.client_id,
            client_session=self.client_session,
            item="" if item is None else str(item),
            priority=str(self.priority),
            run_at="" if at is None else str(at),
            trace=self.trace,
            conc_key="" if c is None else c.key,
            conc_limit="" if c is None else str(self.conc_limit),
            debounce_key="" if d is None else d.key,
            debounce_ms="" if d is None else str(d.period_ms),
            waiting_for=f"rate:{r.key}" if r is not None and self.rate_at else "",
            agent_version="" if run.agent_version is None else str(run.agent_version),
            no_content="1" if run.store_content is False else "0",
            meta=tuple(meta_terms(run.metadata)),
        )


def parsed(raw: RunInput | dict[str, Any]) -> RunInput:
    """The input as a RunInput; else SubmissionError naming the field."""
    if isinstance(raw, RunInput):
        return raw
    try:
        return RunInput.model_validate(raw)
    except ValidationError as exc:
        raise validation_error(exc) from None


def validated(raw: RunInput | dict[str, Any], profiles: dict[str, AgentProfile] | None) -> RunInput:
    """The input as a RunInput of a known agent (``profiles``; None: any); else SubmissionError
    naming the field."""
    run = parsed(raw)
    _check_schemas(run)
    check_agent(run, profiles)
    return run


def unknown_agent(agent: str, profiles: dict[str, AgentProfile] | None = None) -> SubmissionError:
    """An agent the tenant cannot use: 404 ``unknown_agent`` whether no tenant has it or another tenant
    does (the message says neither); a name no agent could have is 422 ``invalid_input``."""
    if not re.match(NAME_PATTERN, parse_ref(agent)[0]):
        return SubmissionError(
            "invalid_input",
            "agent: a name of 1-64 letters, digits, '.', '_' or '-', then @<version> or nothing",
            field="agent",
        )
    known = f" (the operator's profiles: {', '.join(sorted(profiles))})" if profiles else ""
    return SubmissionError(
        "unknown_agent", f"agent: this tenant has no agent {agent!r}{known}", status=404, field="agent"
    )


def check_agent(run: RunInput, profiles: dict[str, AgentProfile] | None) -> None:
    """The run's agent among ``profiles`` (None: any), its client tools allowed there; else
    SubmissionError naming the field."""
    if profiles is not None and run.agent not in profiles:
        raise unknown_agent(run.agent, profiles)
    if profiles is not None and run.lane == "economy" and not profiles[run.agent].economy.enabled:
        raise SubmissionError(
            "economy_not_enabled",
            f"lane: profile {run.agent!r} does not offer the economy lane (its economy.enabled is false)",
            field="lane",
        )
    if profiles is not None and run.client_tools:
        problem = profiles[run.agent].client_tool_problem(run.client_tools)
        if problem is not None:
            raise SubmissionError("client_tool_not_allowed", problem, field=problem.split(":", 1)[0])


def concurrency_limit(run: RunInput, quota: Quota | None) -> int:
    """The limit of the run's concurrency key: its own, lowered to its tenant's concurrencyLimit,
    else that one; 0 without a key. 422 naming the field when neither gives one."""
    if run.concurrency is None:
        return 0
    cap = quota.concurrency_limit if quota is not None else 0
    asked = run.concurrency.limit
    if asked is None:
        if cap == 0:
            raise SubmissionError(
                "invalid_input",
                "concurrency.limit: required (the tenant's quota gives no concurrencyLimit)",
                field="concurrency.limit",
            )
        return cap
    return min(asked, cap) if cap else asked


def check_priced(run: RunInput, profile: AgentProfile, quota: Quota | None) -> None:
    """A cost budget (the run's maxCostUsd, its tenant's costUsdPerDay) on a model with no price
    cannot be kept: 422 ``unpriced_model`` naming it, never a budget that counts the model as free."""
    asks = run.budget is not None and run.budget.max_cost_usd is not None
    day = quota is not None and quota.cost_usd_per_day > 0
    if (asks or day) and (free := profile.unpriced()) is not None:
        field = "budget.maxCostUsd" if asks else "costUsdPerDay (the tenant's quota)"
        raise SubmissionError(
            "unpriced_model", unpriced_message(field, free), field="budget" if asks else "agent"
        )


def _check_schemas(run: RunInput) -> None:
    """The run's JSON Schemas within their bounds (shared/schema_bounds.py), compiled now or found in
    the cache (producer/schemas_ready.py compiles them off the loop first; the worker finds them compiled when
    it runs here too): else 422 ``schema_too_complex`` naming the bound, or ``invalid_input`` for a
    schema that is not a JSON Schema (2020-12)."""
    for field, schema in run_schemas(run):
        try:
            compiled(schema)
        except SchemaBoundError as exc:
            if exc.bound == "schema":  # not a JSON Schema at all: invalid, not too complex
                raise SubmissionError("invalid_input", f"{field}: {exc.message}", field=field) from None
            raise SubmissionError(
                "schema_too_complex", f"{field}: {exc.message} (bound: {exc.bound})", field=field
            ) from None


def prepare(
    run: RunInput,
    scope: Scope,
    default_id: Callable[[RunInput], str],
    max_priority: int = limits.MAX_PRIORITY,
    trace: str = "",
    conc_limit: int = 0,
) -> Prepared:
    """Name a valid input and serialize it once: its runId (else ``default_id(run)``), its session
    (``ses_<runId>`` when it creates one unnamed) and the ids its keys use (``scope``); its stored
    input and input hash as shared.stored_input makes them for every run (the version of a tenant's
    agent it is pinned to stored, not hashed).
    Its priority is capped at ``max_priority`` (the tenant's quota). ``trace``: the submitter's trace
    context, stored beside the input (not part of its hash). Raises SubmissionError naming the field."""
    if (reserved := reserved_id_error(run)) is not None:
        raise reserved
    checked_messages(run.input_messages)
    rid = run.run_id or default_id(run)
    sid = run.session_id or (f"ses_{rid}" if run.session_id is None and run.auto_create_session else "")
    key_rid, key_sid = scope.key(rid), scope.key(sid)
    stored = stored_input(run, key_rid, key_sid)
    _check_size(stored.size)
    return Prepared(
        run.model_copy(update={"run_id": rid, "session_id": sid or None}), key_rid, key_sid, stored.body,
        stored.digest, rid if rid != key_rid else "", sid if sid != key_sid else "",
        min(limits.DEFAULT_PRIORITY if run.priority is None else run.priority, max_priority),
        trace, conc_limit,
    )  # fmt: skip


def checked_messages(messages: list[Message]) -> None:
    """inputMessages a run starts with (a submission's, or those a fork appends) within the bounds of
    their images: 413 too_large or 422 naming the part."""
    _check_images(messages)
    _check_image_hosts(messages)


def _check_images(messages: list[Message]) -> None:
    """Images in inputMessages within their bounds (limits.py): 413 too_large beyond, naming the part."""
    images = [(i, img) for i, m in enumerate(messages) for img in m.images()]
    if len(images) > limits.MAX_IMAGE_PARTS:
        raise SubmissionError(
            "too_large",
            f"inputMessages hold {len(images)} images; at most {limits.MAX_IMAGE_PARTS}",
            status=413,
        )
    total = 0
    for i, img in images:
        if img.url.startswith("data:"):
            total += len(img.url)
            if len(img.url) > limits.MAX_IMAGE_DATA_BYTES:
                raise SubmissionError("too_large", f"inputMessages.{i}: an image data: URL is {len(img.url)} bytes; "
                                      f"at most {limits.MAX_IMAGE_DATA_BYTES}", status=413)  # fmt: skip
    if total > limits.MAX_RUN_IMAGE_BYTES:
        raise SubmissionError(
            "too_large",
            f"the run's images are {total} bytes; at most {limits.MAX_RUN_IMAGE_BYTES}",
            status=413,
        )


def _check_image_hosts(messages: list[Message]) -> None:
    """An image URL's host judged by the outbound guard's rules (shared/netguard_rules.py), as the
    provider that fetches it would reach it: 422 naming the part when it is not public."""
    for i, m in enumerate(messages):
        for j, part in enumerate(m.content if isinstance(m.content, list) else []):
            if not isinstance(part, ImagePart) or part.image_url.url.startswith("data:"):
                continue
            if why := host_refusal(urlsplit(part.image_url.url).hostname or ""):
                field = f"inputMessages.{i}.content.{j}.image_url.url"
                raise SubmissionError("invalid_input", f"{field}: the image URL's host may not be reached: {why}",
                                      field=field)  # fmt: skip


def _check_size(size: int) -> None:
    if size > limits.MAX_RUN_INPUT_BYTES:
        raise SubmissionError(
            "too_large", f"the run input is {size} bytes; at most {limits.MAX_RUN_INPUT_BYTES}", status=413
        )
