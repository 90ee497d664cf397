"""Fuzzing the routes past runs and batches (schedules, fork and retry, usage, the caller and pool
views, and any /v1/agents or /v1/tools catalog the API documents) against a live API and worker on
a real Redis: schemathesis' generated requests from the OpenAPI document, sent both to made-up ids
and to ids that exist, and hypothesis bodies shaped like the real ones (cron expressions and time
zones, fork points, date ranges) so the generated values reach the code behind the validation.
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

from tests.support.live_api import live_api
from tests.support.procs import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
DERANDOMIZE = os.environ.get("CI") == "true"
PREFIXES = ("/v1/schedules", "/v1/agents", "/v1/tools", "/v1/usage", "/v1/me", "/v1/pool")
SUFFIXES = ("/fork", "/retry")
EXPECTED = {
    "POST /v1/schedules", "GET /v1/schedules", "GET /v1/schedules/{schedule_id}",
    "DELETE /v1/schedules/{schedule_id}", "POST /v1/schedules/{schedule_id}/pause",
    "POST /v1/schedules/{schedule_id}/resume", "POST /v1/runs/{run_id}/fork",
    "POST /v1/runs/{run_id}/retry", "POST /v1/batches/{batch_id}/retry", "GET /v1/usage", "GET /v1/me",
}  # fmt: skip
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
    batch with aborted runs, a schedule that will not fire during the test, and profiles' names."""
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
    agents = ["default", "scripted"]  # for a catalog's /v1/agents/{…} or /v1/tools/{…}, whichever it names
    return {"run_id": [done, stopped], "batch_id": [BATCH], "schedule_id": ["fuzz-yearly"],
            "agent": agents, "agent_name": agents, "name": agents}  # fmt: skip


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
    ops = [op for op in ops if op.path.startswith(PREFIXES) or op.path.endswith(SUFFIXES)]
    assert {f"{op.method.upper()} {op.path}" for op in ops} >= EXPECTED
    seen: Counter[str] = Counter()
    for op in ops:
        ids = st.fixed_dictionaries({k: st.sampled_from(v) for k, v in real.items()})
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


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_new_routes_survive_a_long_fuzz(api_url: str, real: dict[str, list[str]]) -> None:
    _fuzz(200, api_url, real)
    _shaped(api_url, real, 500)
