"""The facts Python declares are stated once: the Lua names run-hash (and batch, session) fields,
statuses, event kinds and index dimensions only by tokens (``F.STATUS``, ``S.QUEUED``) that
shared.scripts.render fills in from the enums, and the rendered scripts are the same in every process."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from collections import Counter

import pytest

from agentmill_client import limits
from shared import index_keys, keys
from shared.calls.budgets import SCALE_ONE
from shared.scripts import LUA_DIR, NAMES, SCRIPTS, render, source
from shared.session_calls import PastCallField
from worker.core.context import PastCall

# The quoted literals that spell such a name but mean something else, each counted: a new literal
# of a field or status name fails until it is a token (or, when it means something else, listed here).
OTHER_MEANINGS = {
    ("abort.lua", "aborted"): 1,  # the lastError code of an abort (its verdict is V.ABORTED)
    ("submit_one.lua", "aborted"): 2,  # the lastError code of the runs an interrupt aborts
    ("submit_one.lua", "superseded"): 1,  # the lastError code of a debounced run replaced
    ("prelude.lua", "epoch"): 2,  # a stream entry's field (xadd_text, trimmed or not), not the run hash's
    ("settle_approval.lua", "pending"): 2,  # an approval's decision, not a tool record's state
    ("rate_bucket.lua", "tokens"): 2,  # a token bucket's hash field, not a budget's limit
}
NAMED = {*(v for names in NAMES.values() for v in names), *index_keys.INDEX_DIMS}


def _literals() -> Counter[tuple[str, str]]:
    found: Counter[tuple[str, str]] = Counter()
    for path in sorted(LUA_DIR.glob("*.lua")):
        for line in path.read_text().splitlines():
            code = re.sub(r"--.*$", "", line)  # no Lua string here holds "--"
            found.update((path.name, lit) for lit in re.findall(r"'([^'\\]*)'", code) if lit in NAMED)
    return found


def test_no_field_or_status_is_spelled_in_the_lua_but_by_its_token() -> None:
    assert dict(_literals()) == OTHER_MEANINGS


def test_every_token_is_filled_in_with_its_python_value() -> None:
    for name in SCRIPTS:
        rendered = render(source(name))
        assert not re.search(rf"\b({'|'.join([*NAMES, 'DIM'])})\.[A-Z]", rendered), name
    assert render(
        "h[F.LAST_SEQ], S.AWAITING_HUMAN, BATCH.DONE, SESSION.ACTIVE_RUN, SCHED.NEXT_FIRE, EVENT.ERROR, DIM.META"
    ) == ("h['lastSeq'], 'awaiting_human', 'done', 'activeRun', 'nextFire', 'error', 'meta'")
    assert set(NAMES) == {
        "F",
        "S",
        "BATCH",
        "SESSION",
        "SCHED",
        "BUDGET",
        "EVENT",
        "USAGE",
        "EUSAGE",
        "CALL",
        "TS",
        "EB",
        "ES",
        "LIMIT",
        "REASON",
        "ACQ",
        "APPEND",
        "MULTI",
    }
    assert (
        render("{V.REFUSED, LIMIT.COST}, reason = REASON.JOB_LOST")
        == "{V.REFUSED, 'cost'}, reason = 'job_lost'"
    )
    assert render("{ACQ.NO_LEASE, w}, {APPEND.SEQ_CONFLICT}, m == MULTI.REJECT") == (
        "{'no_lease', w}, {'seq_conflict'}, m == 'reject'"
    )
    assert render("{state = TS.PENDING}, r.state == TS.CLIENT_PENDING") == (
        "{state = 'pending'}, r.state == 'client_pending'"
    )
    assert render("[CALL.IS_ERROR] = e, [CALL.CALLED_AT] = t") == "['isError'] = e, ['calledAtMs'] = t"
    assert render("BUDGET.HELD_TOKENS") == "'heldTokens'"
    assert render("f .. USAGE.RUNS, F.USAGE_IN") == "f .. 'runs', 'inputTokens'"
    assert render("[EUSAGE.COST] = BATCH.ECONOMY_COST") == "['e.cost'] = 'economyCostNanoUsd'"
    # a lowercase member (a Lua table's field, ctx().run) is no token
    assert render("local c = ctx(); return c.run, f.epoch") == "local c = ctx(); return c.run, f.epoch"


@pytest.mark.parametrize("token", ["F.STAUS", "S.DONE", "BATCH.STATUS", "DIM.TENANT"])
def test_a_token_naming_no_member_fails_at_render_time(token: str) -> None:
    with pytest.raises(ValueError, match=re.escape(token)):
        render(f"redis.call('HGET', KEYS[1], {token})")


# A tool record's state set or compared (``state = …``, ``.state == …``, ``.state ~= …``) with a
# quoted string rather than a TS token; an approval's ``decision`` (also 'pending') is no such state.
_STATE_LITERAL = re.compile(r"\bstate\s*(?:==|~=|=)\s*'")


def test_a_tool_records_state_is_spelled_in_the_lua_only_by_its_token() -> None:
    spelled = [
        (path.name, line.strip())
        for path in sorted(LUA_DIR.glob("*.lua"))
        for line in path.read_text().splitlines()
        if _STATE_LITERAL.search(re.sub(r"--.*$", "", line))
    ]
    assert spelled == []
    assert _STATE_LITERAL.search("if cjson.decode(prev).state == 'done' then")
    assert _STATE_LITERAL.search("new[id] = {state = 'pending', epoch = 1}")
    assert not _STATE_LITERAL.search("if entry.decision ~= 'pending' then")


_SHAS = (
    "import hashlib, json; from shared.scripts import SCRIPTS, render, source; "
    "print(json.dumps({n: hashlib.sha1(render(source(n)).encode()).hexdigest() for n in SCRIPTS}))"
)


def test_the_rendered_scripts_and_their_shas_are_the_same_in_every_process() -> None:
    here = {n: hashlib.sha1(render(source(n)).encode()).hexdigest() for n in SCRIPTS}
    out = subprocess.run(  # another process, with another order of its sets
        [sys.executable, "-c", _SHAS], env={**os.environ, "PYTHONHASHSEED": "7"},
        check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    assert json.loads(out) == here


def test_the_lua_writes_a_sessions_calls_as_past_call_reads_them() -> None:
    """prelude.lua's recorded_calls spells an entry of a session's calls list by PastCallField: the
    JSON of worker.core.context.PastCall, which the runs that search the session read."""
    assert set(PastCall(id="r/c1.0").model_dump(by_alias=True)) == set(PastCallField)


# The numbers Python declares that the Lua spells by a ``__TOKEN__`` (those of 1000 and more: WAKE_KEPT,
# 8, is also an index into many a reply): a file naming one by its token
# spells its value as a number nowhere (a second spelling would not follow a change of the first).
BOUNDS = {
    "__SESSION_RUNS_SHOWN__": limits.SESSION_RUNS_SHOWN,
    "__SESSION_LOOPS_KEPT__": limits.SESSION_LOOPS_KEPT,
    "__SESSION_CALLS_KEPT__": limits.SESSION_CALLS_KEPT,
    "__INBOX_KEPT__": keys.INBOX_KEPT,
    "__SCALE_ONE__": SCALE_ONE,
}


def _code(path: object) -> list[str]:
    return [re.sub(r"--.*$", "", line) for line in LUA_DIR.joinpath(str(path)).read_text().splitlines()]


def _spelled(lines: list[str], value: int) -> list[str]:
    return [c.strip() for c in lines if re.search(rf"(?<![\w.]){value}(?![\w.])", c)]


def test_a_bound_python_declares_is_spelled_in_the_lua_only_by_its_token() -> None:
    spelled = {
        (path.name, token): found
        for path in sorted(LUA_DIR.glob("*.lua"))
        for token, value in BOUNDS.items()
        if token in path.read_text() and (found := _spelled(_code(path.name), value))
    }
    assert spelled == {}
    assert render("LTRIM(k, -__SESSION_RUNS_SHOWN__, -1), __SCALE_ONE__") == (
        f"LTRIM(k, -{limits.SESSION_RUNS_SHOWN}, -1), {SCALE_ONE}"
    )
    assert _spelled(["redis.call('LTRIM', k, -1000, -1)", "x = '1000'"], 1000) == [
        "redis.call('LTRIM', k, -1000, -1)",
        "x = '1000'",
    ]
    assert _spelled(["t = 10000 + 1.1000"], 1000) == []


def test_no_list_is_trimmed_to_a_count_spelled_as_a_number() -> None:
    """Every list the Lua trims keeps a count Python declares (a session's runs, loops and calls, a
    worker's inbox, a wake list), named by its token."""
    trims = [
        (path.name, c.strip())
        for path in sorted(LUA_DIR.glob("*.lua"))
        for c in _code(path.name)
        if re.search(r"'LTRIM',[^,]+,\s*-?\d{2,}", c)
    ]
    assert trims == []
