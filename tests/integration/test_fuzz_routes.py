"""Fuzzing the routes past runs and batches (schedules, fork and retry, usage, the caller and pool
views, agents, API keys, the audit log, read tokens and deletions) against a live API and worker on
a real Redis: schemathesis' generated requests from the OpenAPI document, sent both to made-up ids
and to ids that exist, and hypothesis bodies shaped like the real ones (cron expressions and time
zones, fork points, date ranges, agent profiles, key scopes, audit cursors, deletion metadata) so the generated values reach the code behind the validation.
Every answer must come within 10 s and none may be a 5xx."""

from __future__ import annotations

import os
import zoneinfo
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error

from tests.support.fuzz_seed import DERANDOMIZE
from tests.support.live_api import live_api
from tests.support.procs import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
PREFIXES = ("/v1/schedules", "/v1/agents", "/v1/tools", "/v1/usage", "/v1/me", "/v1/pool", "/v1/keys",
            "/v1/audit", "/v1/deletions")  # fmt: skip
SUFFIXES = ("/fork", "/retry", "/token")
DELETES = {"/v1/runs/{run_id}", "/v1/sessions/{session_id}"}  # sent to runs and sessions made to go
EXPECTED = {
    "POST /v1/schedules", "GET /v1/schedules", "GET /v1/schedules/{schedule_id}",
    "DELETE /v1/schedules/{schedule_id}", "POST /v1/schedules/{schedule_id}/pause",
    "POST /v1/schedules/{schedule_id}/resume", "POST /v1/runs/{run_id}/fork",
    "POST /v1/runs/{run_id}/retry", "POST /v1/batches/{batch_id}/retry", "GET /v1/usage", "GET /v1/me",
    "POST /v1/agents", "GET /v1/agents", "GET /v1/agents/{name}", "GET /v1/agents/{name}/versions/{version}",
    "POST /v1/agents/{name}/current", "DELETE /v1/agents/{name}", "POST /v1/keys", "GET /v1/keys",
    "DELETE /v1/keys/{key_id}", "GET /v1/audit", "POST /v1/runs/{run_id}/token", "DELETE /v1/runs/{run_id}",
    "DELETE /v1/sessions/{session_id}", "POST /v1/deletions", "GET /v1/deletions/{deletion_id}",
}  # fmt: skip
AGENT = {"name": "support", "provider": {"connection": "scripted"}, "systemPrompt": "fuzz"}
RUN = {"inputMessages": [{"role": "user", "content": "what is 6 * 7?"}]}
SLOW = {"agent": "scripted", "inputMessages": [{"role": "user", "content": "wait"}],
        "runtimeHints": {"script": [{"toolCalls": [{"name": "sleep", "arguments": {"ms": 60_000}}]}]}}  # fmt: skip
BATCH = "fuzz-retry-batch"


@pytest.fixture(scope="module")
def api_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # The default tenant (auth off) is an operator: /v1/pool answers it, past its 403.
    with live_api(tmp_path_factory.mktemp("api"), AGENTMILL_OPERATOR_TENANTS="default") as url:
        yield url


@pytest.fixture(scope="module")
def real(api_url: str) -> dict[str, list[str]]:
    """Ids that exist, by path parameter: a completed run (to fork), an aborted one (to retry), a
    batch with aborted runs, a schedule that will not fire during the test, profiles' names (the
    operator's and the tenant's own, with its version), a key, a deletion, and runs and sessions
    kept apart for the DELETE routes (``doomed_…``)."""
    with httpx.Client(base_url=api_url, timeout=10) as c:
        done = c.post("/v1/runs", json=RUN).json()["runId"]
        stopped = c.post("/v1/runs", json=SLOW).json()["runId"]
        c.post(f"/v1/runs/{stopped}/abort")
        r = c.post("/v1/runs/batch", json={"runs": [SLOW, SLOW], "batchId": BATCH})
        assert r.status_code == 200, r.text
        c.post(f"/v1/batches/{BATCH}/abort")
        r = c.post("/v1/schedules", json={"scheduleId": "fuzz-yearly", "cron": "0 0 1 1 *", "input": RUN})
        assert r.status_code == 201, r.text
        assert wait_until(
            lambda: c.get(f"/v1/runs/{done}").json()["status"] in ("completed", "failed"), 30, 0.1
        )
        assert wait_until(lambda: c.get(f"/v1/runs/{stopped}").json()["status"] == "aborted", 30, 0.1)
        assert c.post("/v1/agents", json=AGENT).status_code == 201
        key_id = c.post("/v1/keys", json={"scopes": ["read"], "name": "fuzz"}).json()["keyId"]
        deletion = c.post("/v1/deletions", json={"metadata": {"fuzz": "none"}}).json()["deletionId"]
        doomed = [{**RUN, "sessionId": f"doomed-{i}", "autoCreateSession": True} for i in range(6)]
        doomed_runs = [c.post("/v1/runs", json=b).json()["runId"] for b in doomed]
    agents = ["default", "scripted", "support"]  # the operator's profiles and the tenant's agent
    return {"run_id": [done, stopped], "batch_id": [BATCH], "schedule_id": ["fuzz-yearly"],
            "agent": agents, "agent_name": agents, "name": agents, "version": ["1", "2"],
            "key_id": [key_id], "deletion_id": [deletion], "doomed_run_id": doomed_runs,
            "doomed_session_id": [b["sessionId"] for b in doomed]}  # fmt: skip


def _with_real_ids(case: schemathesis.Case, ids: dict[str, str]) -> schemathesis.Case:
    params = case.path_parameters or {}
    case.path_parameters = {k: ids.get(k, v) for k, v in params.items()}
    return case


def _send(api_url: str, case: schemathesis.Case, seen: Counter[str]) -> None:
    response = case.call(base_url=api_url, timeout=10)  # a hang is a ReadTimeout: the test fails
    case.validate_response(response, checks=[not_a_server_error])
    seen[f"{case.method.upper()} {case.operation.path} {response.status_code}"] += 1


def _fuzz(examples: int, api_url: str, real: dict[str, list[str]]) -> Counter[str]:
    """schemathesis' own requests for each new operation, half of them on ids that exist."""
    schema = schemathesis.openapi.from_url(f"{api_url}/openapi.json")
    ops = [r.ok() for r in schema.get_all_operations()]
    ops = [
        op
        for op in ops
        if op.path.startswith(PREFIXES)
        or op.path.endswith(SUFFIXES)
        or (op.method.upper() == "DELETE" and op.path in DELETES)
    ]
    assert {f"{op.method.upper()} {op.path}" for op in ops} >= EXPECTED
    seen: Counter[str] = Counter()
    for op in ops:
        doomed = op.method.upper() == "DELETE" and op.path in DELETES
        mine = {k.removeprefix("doomed_"): v for k, v in real.items() if k.startswith("doomed_") == doomed}
        ids = st.fixed_dictionaries({k: st.sampled_from(v) for k, v in mine.items()})
        strategy = st.one_of(
            op.as_strategy(), st.tuples(op.as_strategy(), ids).map(lambda p: _with_real_ids(*p))
        )
        _run(examples, strategy, lambda case: _send(api_url, case, seen))
    return seen


def _run(examples: int, strategy: st.SearchStrategy[Any], check: Callable[[Any], None]) -> None:
    @settings(max_examples=examples, deadline=None, suppress_health_check=list(HealthCheck),
              database=None, derandomize=DERANDOMIZE)  # fmt: skip
    @given(value=strategy)
    def test(value: Any) -> None:
        check(value)

    test()


# Cron fields: the forms croniter reads (steps, ranges, lists, L, W, #, H, R, names) and what it may not.
FIELD = st.one_of(
    st.sampled_from(["*", "?", "L", "5L", "15W", "LW", "5#3", "7#6", "H", "H/5", "R", "JAN", "mon-fri", "0"]),
    st.builds(lambda a, b: f"{a}-{b}", st.integers(-2, 70), st.integers(-2, 70)),
    st.builds(lambda a, b: f"{a}/{b}", st.sampled_from(["*", "0", "1-59", "59"]), st.integers(-1, 10**12)),
    st.lists(st.integers(0, 100), min_size=1, max_size=4).map(lambda xs: ",".join(map(str, xs))),
    st.text(max_size=6),
)
PLAIN = st.sampled_from(["*", "*/2", "*/15", "1", "1-5", "1,2", "2/3"])  # valid in every field
CRON = st.one_of(
    st.lists(PLAIN, min_size=5, max_size=6).map(" ".join),
    st.lists(FIELD, min_size=4, max_size=7).map(" ".join),
    st.text(max_size=40),
)
ZONES = st.one_of(
    st.sampled_from(sorted(zoneinfo.available_timezones())),  # what most bodies name
    st.sampled_from(
        [
            "",
            "UTC",
            "Factory",
            "posix/Europe/Paris",
            "../../etc/passwd",
            "/etc/localtime",
            "Europe/Nowhere",
            "\x00",
            "a" * 64,
            "EST5EDT",
            "UTC+1",
        ]
    ),
    st.text(max_size=64),
)
SCHEDULE = st.fixed_dictionaries(
    {
        "cron": CRON,
        "input": st.one_of(st.just(RUN), st.dictionaries(st.text(max_size=8), st.integers(), max_size=2)),
    },
    optional={
        "timezone": ZONES,
        "scheduleId": st.one_of(st.from_regex(r"\A[a-z0-9_-]{1,12}\Z"), st.text(max_size=12)),
        "overlap": st.sampled_from(["skip", "enqueue", "cancel_previous", "never"]),
        "catchup": st.one_of(st.integers(-1, 10**6), st.booleans()),
    },
)
SCHEDULES = st.one_of(
    SCHEDULE,
    st.fixed_dictionaries(  # one that is valid but for its times: these reach the cron and the zone
        {
            "cron": st.one_of(CRON, *[st.lists(PLAIN, min_size=5, max_size=6).map(" ".join)] * 2),
            "input": st.just(RUN),
        },
        optional={
            "timezone": st.one_of(ZONES, *[st.sampled_from(sorted(zoneinfo.available_timezones()))] * 2)
        },
    ),
)
MESSAGE = st.one_of(
    st.fixed_dictionaries(
        {
            "role": st.sampled_from(["user", "assistant", "system", "tool", "x"]),
            "content": st.text(max_size=20),
        }
    ),
    st.dictionaries(st.text(max_size=6), st.text(max_size=6), max_size=2),
)
USER = st.fixed_dictionaries({"role": st.just("user"), "content": st.text(min_size=1, max_size=20)})
FORK = st.one_of(
    st.fixed_dictionaries(  # within the runs' few events, with messages that are valid: the fork is made
        {"atSeq": st.integers(0, 6)}, optional={"inputMessages": st.lists(USER, min_size=1, max_size=3)}
    ),
    st.fixed_dictionaries(
        {"atSeq": st.one_of(st.integers(0, 30), st.integers(-(2**64), 2**64))},
        optional={"inputMessages": st.one_of(st.none(), st.lists(MESSAGE, max_size=3))},
    ),
)
DAY = st.one_of(
    st.dates().map(lambda d: d.isoformat()),
    st.sampled_from(["0001-01-01", "0001-01-29", "9999-12-31", "2024-02-30", "20240101", "2024-W01-1", ""]),
    st.text(max_size=12),
)

# Agent profiles: names that smuggle a version or a path, connections that smuggle a URL, tools and
# MCP servers on private addresses, limits past the operator's, fallback chains.
URLS = st.sampled_from(["http://169.254.169.254/latest", "http://127.0.0.1:6379/", "http://[::ffff:10.0.0.1]/",
                        "https://example.com/mcp", "file:///etc/passwd", "gopher://x", "", "http://0/"])  # fmt: skip
AGENT_NAME = st.one_of(
    st.from_regex(r"\A[a-z][a-z0-9_-]{0,10}\Z"),
    st.sampled_from(
        ["support", "support@-1", "support@999999999999", "scripted", "é", "a/b", "..", "a" * 65]
    ),
    st.text(max_size=12),
)
PROVIDER = st.fixed_dictionaries(
    {"connection": st.one_of(st.sampled_from(["scripted", "calculator", "nope", "http://169.254.169.254/"]), st.text(max_size=8))},
    optional={"model": st.text(max_size=8), "maxTokens": st.integers(-1, 2**70), "temperature": st.floats(allow_nan=False, allow_infinity=False),
              "baseUrl": URLS, "apiKey": st.text(max_size=8), "kind": st.sampled_from(["openai", "anthropic", "x"])},
)  # fmt: skip
PROFILE = st.fixed_dictionaries(
    {"name": AGENT_NAME, "provider": st.one_of(st.just({"connection": "scripted"}), PROVIDER)},
    optional={
        "systemPrompt": st.text(max_size=40),
        "tools": st.lists(st.sampled_from(["echo", "calculator", "sleep", "nope", ""]), max_size=4),
        "httpTools": st.lists(st.fixed_dictionaries({"name": st.text(max_size=6), "url": URLS}), max_size=2),
        "mcpServers": st.lists(st.fixed_dictionaries({"name": st.text(max_size=6), "url": URLS}), max_size=2),
        "loopLimits": st.dictionaries(st.sampled_from(["maxSteps", "maxDepth", "maxToolCalls"]),
                                      st.one_of(st.integers(-1, 2**70), st.floats(allow_nan=False, allow_infinity=False)), max_size=3),
        "storeContent": st.one_of(st.booleans(), st.text(max_size=4)),
        "providers": st.lists(PROVIDER, max_size=3),
    },
)  # fmt: skip
SCOPES = st.sampled_from(["read", "submit", "control", "admin", "operator", "READ", "", "read,admin"])
KEY = st.fixed_dictionaries(
    {"scopes": st.one_of(st.lists(SCOPES, min_size=1, max_size=4), st.lists(st.text(max_size=6), max_size=8))},
    optional={"name": st.text(max_size=120), "tenant": st.one_of(st.none(), st.text(max_size=8)),
              "expiresInS": st.one_of(st.integers(-(2**64), 2**64), st.floats(allow_nan=False, allow_infinity=False), st.none())},
)  # fmt: skip
STREAM_ID = st.one_of(
    st.builds(lambda a, b: f"{a}-{b}", st.integers(0, 10**20), st.integers(0, 10**20)),
    st.sampled_from(["18446744073709551615-18446744073709551615", "18446744073709551616-0", "-", "+", "0"]),
    st.text(max_size=12),
)
AUDIT = st.fixed_dictionaries(
    {},
    optional={"from": st.integers(-1, 10**16), "to": st.integers(-1, 10**16), "cursor": STREAM_ID,
              "action": st.one_of(st.sampled_from(["submit", "delete", "key_create", "key_revoke"]), st.text(max_size=8)),
              "target": st.text(max_size=20), "limit": st.integers(-1, 10**6), "tenant": st.text(max_size=8)},
)  # fmt: skip
META_VALUE = st.one_of(st.text(max_size=10), st.integers(-(2**70), 2**70), st.floats(allow_nan=False, allow_infinity=False), st.booleans(), st.none(),
                       st.lists(st.integers(), max_size=2))  # fmt: skip
DELETION = st.fixed_dictionaries({"metadata": st.dictionaries(st.text(max_size=12), META_VALUE, max_size=5)})
TOKEN = st.fixed_dictionaries(
    {},
    optional={
        "ttlS": st.one_of(
            st.integers(-(2**64), 2**64),
            st.floats(allow_nan=False, allow_infinity=False),
            st.text(max_size=4),
        )
    },
)


def _governed(api_url: str, real: dict[str, list[str]], examples: int) -> Counter[str]:
    """Agents, keys, the audit log, deletions and read tokens, with bodies and queries shaped like
    real ones: some are made, most are refused, none is a 5xx."""
    schema = schemathesis.openapi.from_url(f"{api_url}/openapi.json")
    seen: Counter[str] = Counter()
    ops = {k: schema[p][m] for k, (p, m) in {
        "agent": ("/v1/agents", "POST"), "key": ("/v1/keys", "POST"), "audit": ("/v1/audit", "GET"),
        "deletion": ("/v1/deletions", "POST"), "token": ("/v1/runs/{run_id}/token", "POST"),
        "version": ("/v1/agents/{name}/versions/{version}", "GET"),
    }.items()}  # fmt: skip
    _run(examples, PROFILE, lambda b: _send(api_url, ops["agent"].Case(body=b), seen))
    _run(examples, KEY, lambda b: _send(api_url, ops["key"].Case(body=b), seen))
    _run(examples, AUDIT, lambda q: _send(api_url, ops["audit"].Case(query=q), seen))
    _run(examples, DELETION, lambda b: _send(api_url, ops["deletion"].Case(body=b), seen))
    tokens = st.tuples(st.sampled_from(real["run_id"]), TOKEN)
    _run(
        examples,
        tokens,
        lambda p: _send(api_url, ops["token"].Case(path_parameters={"run_id": p[0]}, body=p[1]), seen),
    )
    versions = st.tuples(
        AGENT_NAME, st.one_of(st.integers(-(2**70), 2**70), st.sampled_from(["1", "١", "1.0", "0x1"]))
    )
    _run(examples, versions, lambda p: _send(api_url, ops["version"].Case(
        path_parameters={"name": p[0], "version": p[1]}), seen))  # fmt: skip
    return seen


def _shaped(api_url: str, real: dict[str, list[str]], examples: int) -> Counter[str]:
    """Bodies and queries shaped like real ones, to existing runs and schedules."""
    schema = schemathesis.openapi.from_url(f"{api_url}/openapi.json")
    seen: Counter[str] = Counter()
    create, fork = schema["/v1/schedules"]["POST"], schema["/v1/runs/{run_id}/fork"]["POST"]
    show, usage = schema["/v1/schedules/{schedule_id}"]["GET"], schema["/v1/usage"]["GET"]
    _run(examples, SCHEDULES, lambda body: _send(api_url, create.Case(body=body), seen))
    forks = st.tuples(st.sampled_from(real["run_id"]), FORK)
    _run(
        examples,
        forks,
        lambda p: _send(api_url, fork.Case(path_parameters={"run_id": p[0]}, body=p[1]), seen),
    )
    with httpx.Client(base_url=api_url, timeout=10) as c:  # what the fuzz created (and one that exists)
        c.post("/v1/schedules", json={"scheduleId": "fuzz-shown", "cron": "*/5 * * * * *", "input": RUN})
        listed = [s["scheduleId"] for s in c.get("/v1/schedules", params={"limit": 1000}).json()["schedules"]]
    nexts = st.tuples(st.sampled_from(listed), st.one_of(st.integers(0, 20), st.integers(-1, 10**6)))
    _run(examples, nexts, lambda p: _send(api_url, show.Case(path_parameters={"schedule_id": p[0]},
                                                             query={"next": p[1]}), seen))  # fmt: skip
    days = st.fixed_dictionaries({}, optional={"from": DAY, "to": DAY})
    _run(examples, days, lambda q: _send(api_url, usage.Case(query=q), seen))
    return seen


def test_the_new_routes_survive_generated_requests(api_url: str, real: dict[str, list[str]]) -> None:
    seen = _fuzz(int(os.environ.get("AGENTMILL_FUZZ_EXAMPLES", "8")), api_url, real)
    # Some requests got past the validation to a real schedule and a real run.
    assert any(k.startswith("GET /v1/schedules/{schedule_id} 200") for k in seen), seen


def test_shaped_bodies_reach_past_the_validation(api_url: str, real: dict[str, list[str]]) -> None:
    seen = _shaped(api_url, real, int(os.environ.get("AGENTMILL_FUZZ_EXAMPLES", "25")))
    assert seen["POST /v1/schedules 201"] and seen["POST /v1/runs/{run_id}/fork 202"], seen
    assert seen["GET /v1/usage 200"] and seen["GET /v1/usage 422"], seen


def test_governance_bodies_reach_past_the_validation(api_url: str, real: dict[str, list[str]]) -> None:
    seen = _governed(api_url, real, int(os.environ.get("AGENTMILL_FUZZ_EXAMPLES", "25")))
    for made in ("POST /v1/agents 201", "POST /v1/keys 201", "GET /v1/audit 200", "POST /v1/deletions 202",
                 "POST /v1/runs/{run_id}/token 200"):  # fmt: skip
        assert seen[made], (made, seen)
    assert seen["POST /v1/agents 422"] and seen["POST /v1/keys 422"] and seen["GET /v1/audit 400"], seen


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_new_routes_survive_a_long_fuzz(api_url: str, real: dict[str, list[str]]) -> None:
    _fuzz(200, api_url, real)
    _shaped(api_url, real, 500)
    _governed(api_url, real, 500)
