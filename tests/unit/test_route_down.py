"""The route's answer when the node cannot be reached (shared/route.py): every command gets the
connection error as its reply, written early (``flush``) or not; nothing raises past the caller, no
reply is missing (the CLI once died with an IndexError here: a batch's chunk written early to an
unreachable Redis)."""

from __future__ import annotations

from redis.asyncio import Redis
from redis.exceptions import ConnectionError as RedisConnectionError

from shared.partitions import Partitions


async def test_an_unreachable_node_answers_every_command_with_its_error() -> None:
    r = Redis(port=1, socket_connect_timeout=0.2)  # nothing listens on port 1
    try:
        script = r.register_script("return ARGV[1]")
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
