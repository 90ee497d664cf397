"""One tenant's worst input, sent from its own process (so the bench's measuring loop is not the
one that is busy): ``python -m bench.attack URL TOKEN SECONDS``.

Three attacks at once: calculator bombs through the `default` profile,
32 parallel worst-case listings (the cursor of page 1 with a filter that matches nothing), and
20,000 requests with made-up HTTP methods and no token. Prints what it sent as JSON.
"""

from __future__ import annotations

import asyncio
import json
import random
import string
import sys
import time

import httpx

BOMB = "(((99**64)**64)**64)**64"
TOTAL_METHODS = 20_000  # the attack ends when they are all sent (or at its time limit)


async def bombs(c: httpx.AsyncClient, until: float, sent: dict[str, int]) -> None:
    while time.monotonic() < until and sent["methods"] < TOTAL_METHODS:
        body = {"inputMessages": [{"role": "user", "content": BOMB}]}
        await c.post("/v1/runs", json=body)
        sent["bombs"] += 1
        await asyncio.sleep(0.5)


async def listings(c: httpx.AsyncClient, until: float, sent: dict[str, int]) -> None:
    first = (await c.get("/v1/runs", params={"limit": 1})).json()
    cursor = first.get("next")
    while time.monotonic() < until and sent["methods"] < TOTAL_METHODS:
        params = {"createdBefore": 1, "limit": 1, **({"cursor": cursor} if cursor else {})}
        await c.get("/v1/runs", params=params)
        sent["listings"] += 1


async def methods(base: str, until: float, total: int, sent: dict[str, int]) -> None:
    async with httpx.AsyncClient(base_url=base, timeout=10) as c:  # no token
        while time.monotonic() < until and sent["methods"] < total:
            name = "".join(random.choices(string.ascii_uppercase, k=random.choice((7, 40, 3000))))
            await c.request(name, "/v1/runs")
            sent["methods"] += 1


async def main(base: str, token: str, seconds: float) -> None:
    sent = {"bombs": 0, "listings": 0, "methods": 0}
    until = time.monotonic() + seconds
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=30) as c:
        tasks = [bombs(c, until, sent)]
        tasks += [listings(c, until, sent) for _ in range(32)]
        tasks += [methods(base, until, TOTAL_METHODS, sent) for _ in range(8)]
        results = await asyncio.gather(*tasks, return_exceptions=True)
    errors = [repr(r) for r in results if isinstance(r, BaseException)]
    print(json.dumps({**sent, "errors": errors[:3]}))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], float(sys.argv[3])))
