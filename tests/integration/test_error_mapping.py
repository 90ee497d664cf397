"""One mapping of errors to HTTP for the schedule routes and the catalog routes (producer/api/errors.py):
an unknown id is a 404 ``unknown_<kind>`` ``no <kind> <id>``, and a query or body the caller got
wrong is a 422 whose ``field`` names the parameter, the same way in both families; the OpenAPI
document describes their 404 alike."""

from __future__ import annotations

import httpx
import pytest

from app.api import create_app
from shared.settings import Settings
from tests.integration.api_support import A, api, body, settings

pytestmark = pytest.mark.integration


async def test_an_unknown_id_and_a_wrong_parameter_answer_alike_in_both_families(redis_url: str) -> None:
    async with (
        api(settings(redis_url, schedules=False)) as url,
        httpx.AsyncClient(base_url=url, headers=A) as c,
    ):
        answers = {
            "schedule": await c.get("/v1/schedules/nope"),
            "batch": await c.get("/v1/batches/nope"),
        }
        for kind, r in answers.items():
            assert r.status_code == 404, r.text
            assert r.json() == {"error": {"code": f"unknown_{kind}", "message": f"no {kind} nope"}}

        bad_schedule = await c.post("/v1/schedules", json={"cron": "61 * * * *", "input": body()})
        bad_listing = await c.get("/v1/runs", params={"status": "sleeping"})
        for r, field in ((bad_schedule, "cron"), (bad_listing, "status")):
            assert r.status_code == 422, r.text
            assert r.json()["error"]["field"] == field, r.text
        assert bad_listing.json()["error"]["code"] == "invalid_input"
        assert bad_listing.json()["error"]["message"].startswith("status: one of ")

        cursor = await c.get("/v1/runs", params={"cursor": "not-ours"})
        assert cursor.status_code == 400 and cursor.json()["error"]["code"] == "invalid_cursor", cursor.text


def test_the_openapi_document_describes_both_families_404_alike() -> None:
    paths = create_app(Settings(auth_disabled=True)).openapi()["paths"]
    described = {
        paths["/v1/schedules/{schedule_id}"]["get"]["responses"]["404"]["description"],
        paths["/v1/batches/{batch_id}"]["get"]["responses"]["404"]["description"],
    }
    assert described == {"no such id in the caller's tenant"}, described
