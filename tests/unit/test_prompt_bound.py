"""policy.prompt_bound, the prompt's share of a tenant's day-budget hold: an upper bound its text
cannot game. A byte-level BPE tokenizer (emulated here: a greedy longest match over a vocabulary of
byte strings that holds every single byte) writes each token from one byte or more, so whatever the
text, its tokens plus the chat format's few a message stay within the bound, where
``estimate_tokens``' four characters a token falls short of them."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from agentmill_client.models import Message, ToolCall
from worker.core import policy

CHAT_FORMAT_TOKENS = 4  # what OpenAI's chat format adds a message (role and separators)
ANY_CHAR = st.characters(exclude_categories=())  # every code point, lone surrogates included
# A tool call's arguments are text a model sent (pydantic refuses a lone surrogate in them)
ARGUMENT_CHAR = st.characters(exclude_categories=("Cs",))


def vocabulary(seed: int) -> set[bytes]:
    """Every byte, and merges of random neighbours, as BPE training leaves them."""
    rng = random.Random(seed)
    vocab = {bytes([b]) for b in range(256)}
    pieces = sorted(vocab)
    for _ in range(2_000):
        merged = rng.choice(pieces) + rng.choice(pieces)
        vocab.add(merged)
        pieces.append(merged)
    return vocab


VOCAB = vocabulary(7)
LONGEST = max(map(len, VOCAB))


def byte_level_tokens(text: str) -> int:
    data, i, n = text.encode("utf-8", "surrogatepass"), 0, 0
    while i < len(data):
        size = next(k for k in range(min(LONGEST, len(data) - i), 0, -1) if data[i : i + k] in VOCAB)
        i, n = i + size, n + 1
    return n


def counted(messages: list[Message]) -> int:
    total = 0
    for m in messages:
        total += CHAT_FORMAT_TOKENS + byte_level_tokens(m.text) + byte_level_tokens(m.tool_call_id or "")
        for c in m.tool_calls or []:
            total += CHAT_FORMAT_TOKENS + sum(byte_level_tokens(x) for x in (c.id, c.name, c.arguments))
    return total


@settings(max_examples=300, deadline=None)
@given(
    texts=st.lists(st.text(ANY_CHAR, max_size=300), min_size=1, max_size=6),
    args=st.text(ARGUMENT_CHAR, max_size=200),
)
def test_no_text_is_counted_past_the_bound(texts: list[str], args: str) -> None:
    messages = [Message(role="user", content=t) for t in texts]
    messages.append(
        Message(role="assistant", content="", tool_calls=[ToolCall(id="c1.0", name="echo", arguments=args)])
    )
    messages.append(Message(role="tool", tool_call_id="c1.0", content=texts[0]))
    assert counted(messages) <= policy.prompt_bound(messages)


def test_text_made_to_tokenize_badly_games_the_estimate_but_not_the_bound() -> None:
    rare = "".join(chr(0x1D400 + i % 1_000) for i in range(2_000))  # four UTF-8 bytes each
    messages = [Message(role="system", content="be brief"), Message(role="user", content=rare)]
    tokens = counted(messages)
    assert tokens > 4 * policy.estimate_tokens(messages)  # the old hold's attack: many times over
    assert tokens <= policy.prompt_bound(messages) == 2 * policy.MESSAGE_TOKENS + 8 + 8_000


def test_ascii_is_bounded_by_its_length_and_images_by_their_share() -> None:
    parts = [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {"url": "https://x/y.png"}}]
    m = Message.model_validate({"role": "user", "content": parts})
    assert policy.prompt_bound([m]) == policy.MESSAGE_TOKENS + len(m.text) + policy.IMAGE_TOKENS
    assert policy.prompt_bound([Message(role="user", content="x" * 100)]) == policy.MESSAGE_TOKENS + 100
