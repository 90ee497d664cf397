"""Property-based fuzzing of the whole OpenAPI document with schemathesis, against a live API on a
real Redis: no 5xx, and every response matches the documented schema, status and content type."""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize
from schemathesis.checks import not_a_server_error
from schemathesis.generation.stateful.state_machine import StepInput
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from tests.support.fuzz_seed import DERANDOMIZE
from tests.support.live_api import live_api

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance, response_schema_conformance]
EXAMPLES = int(os.environ.get("AGENTMILL_FUZZ_EXAMPLES", "25"))


@pytest.fixture(scope="module")
def api_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # The API runs as its own process (`agentmill api`), as in production, with a worker, so runs
    # the stateful phase creates end and their streams and waits return.
    with live_api(tmp_path_factory.mktemp("api")) as url:
        yield url


LISTINGS = ("/v1/runs", "/v1/batches/{batch_id}/runs")
BATCH = "fuzz-batch"


@pytest.fixture(scope="module")
def cursors(api_url: str) -> list[str]:
    """Cursors the API returned: the next of the first pages of both listings, over a real batch."""
    runs = [{"inputMessages": [{"role": "user", "content": f"run {i}"}]} for i in range(8)]
    r = httpx.post(f"{api_url}/v1/runs/batch", json={"runs": runs, "batchId": BATCH}, timeout=10)
    assert r.status_code == 200, r.text
    out: list[str] = []
    for path in ("/v1/runs", f"/v1/batches/{BATCH}/runs"):
        nxt = None
        for _ in range(3):
            q = {"limit": 2, **({"cursor": nxt} if nxt else {})}
            nxt = httpx.get(f"{api_url}{path}", params=q, timeout=10).json()["next"]
            assert nxt, path
            out.append(nxt)
    return out


def _forged(cursor: str, score: str) -> str:
    """A real cursor with its time replaced: what a client could send that the API never wrote."""
    run_id = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode().partition(":")[2]
    return base64.urlsafe_b64encode(f"{score}:{run_id}".encode()).decode().rstrip("=")


# Times Python's int() takes and Redis does not, among others.
SCORES = st.one_of(st.text(max_size=8), st.from_regex(r"\A[ +\-_0-9٣１２]{1,8}\Z"))


def _past_the_first_page(case: schemathesis.Case, cursor: str) -> schemathesis.Case:
    """A generated listing request sent from a real cursor (of the real batch, on its route):
    the filters and limits are generated, the paging goes past the first page."""
    case.query = {**(case.query or {}), "cursor": cursor}
    if "batch_id" in (case.path_parameters or {}):
        case.path_parameters = {**case.path_parameters, "batch_id": BATCH}
    return case


def test_every_operation_survives_generated_input(api_url: str, cursors: list[str]) -> None:
    schema = schemathesis.openapi.from_url(f"{api_url}/openapi.json")
    operations = [r.ok() for r in schema.get_all_operations()]
    assert len(operations) >= 11
    paged: list[int] = []  # statuses of the listing requests sent from a real cursor
    for op in operations:
        strategy = op.as_strategy()
        if op.method.upper() == "GET" and op.path in LISTINGS:
            real = st.sampled_from(cursors)
            forged = st.tuples(real, SCORES).map(lambda p: _forged(*p))
            seeded = st.tuples(strategy, st.one_of(real, forged)).map(lambda p: _past_the_first_page(*p))
            strategy = st.one_of(strategy, seeded)

        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
            derandomize=DERANDOMIZE,
        )
        @given(case=strategy)
        def check(case: schemathesis.Case) -> None:
            response = case.call_and_validate(base_url=api_url, checks=CHECKS, timeout=10)
            if case.query and case.query.get("cursor") in cursors:
                paged.append(response.status_code)

        check()
    assert 200 in paged, paged  # the paths past the first page were reached


def test_sequences_that_follow_the_documented_links_survive(api_url: str) -> None:
    # The stateful phase: submit a run (or a batch), then follow the OpenAPI links of the answer to
    # the run's status, wait, events, abort and approvals, and to its session: still no 5xx.
    schema = schemathesis.openapi.from_url(f"{api_url}/openapi.json")
    links = schema.raw_schema["paths"]["/v1/runs"]["post"]["responses"]["202"]["links"]
    assert {"GetRun", "WaitRun", "RunEvents", "AbortRun", "DecideApprovals"} <= set(links)
    base = schema.as_state_machine()
    seen: set[tuple[str, int]] = set()

    submit = schema["/v1/runs"]["POST"]

    class Machine(base):  # type: ignore[misc, valid-type]
        @initialize()
        def submit_a_valid_run(self) -> None:
            # Generated RunInputs are rarely valid (and schemathesis takes POST /v1/runs, whose body
            # names ids, for a consumer of them): each scenario starts from one real run so its
            # links have something to follow; the generated steps follow from there.
            case = submit.Case(body={"inputMessages": [{"role": "user", "content": "what is 6 * 7?"}]})
            step = StepInput.initial(case)
            self.recorder.record_case(case=case)  # as schemathesis' own root steps do
            self.control.record_step(step, self.recorder)
            self._add_results_to_targets(("catch_all",), [self.step(step)])

        def after_call(self, response: Any, case: schemathesis.Case) -> None:
            seen.add((f"{case.method} {case.path}", response.status_code))

        def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, object]:
            return {"base_url": api_url, "timeout": 15}

        def validate_response(self, response: object, case: schemathesis.Case, **kwargs: object) -> None:
            case.validate_response(response, checks=CHECKS)

    Machine.run(
        settings=settings(
            max_examples=max(5, EXAMPLES // 2),
            stateful_step_count=6,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
            derandomize=DERANDOMIZE,
        )
    )
    # The links were followed: a run's own status was read (only a real run id answers 200).
    assert ("GET /v1/runs/{run_id}", 200) in seen or ("GET /v1/runs/{run_id}/wait", 200) in seen, seen
