"""The route's answer when the node cannot be reached (shared/route.py): every command gets the
connection error as its reply, written early (``flush``) or not; nothing raises past the caller, no
reply is missing (the CLI once died with an IndexError here: a batch's chunk written early to an
unreachable Redis). Both kinds of script: a function of the library (its load is FUNCTION LOAD) and
one run by EVALSHA (SCRIPT LOAD)."""

from __future__ import annotations

import pytest
from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from shared.partitions import Partitions
from shared.scripts import Scripts


@pytest.mark.parametrize("functions", [True, False], ids=["fcall", "evalsha"])
async def test_an_unreachable_node_answers_every_command_with_its_error(functions: bool) -> None:
    r = Redis(port=1, socket_connect_timeout=0.2)  # nothing listens on port 1
    try:
        script = Scripts(r, functions=functions).scaling  # registered as the route's scripts are, both ways
        parts: Partitions[Redis] = Partitions.of_client(r)
        for early in (True, False):
            out = parts.sending(loaded=set())
            for i in range(3):
                out.add_script(parts.parts[0], script, ["k"], [str(i)])
            if early:
                await out.flush()
            replies = await out.replies()
            assert len(replies) == 3 and all(isinstance(x, RedisConnectionError) for x in replies), replies
    finally:
        await r.aclose()
