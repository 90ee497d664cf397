"""agentmill submit's decisions, without I/O (app.cli.plan): the parts, what a resume sends,
bad lines by line number, and when a refused part is sent again."""

from __future__ import annotations

from app.cli.plan import RETRY, Part, parse_jsonl, parts, retry_delay_ms, to_send


def test_parts_are_fixed_by_offset_and_the_last_closes_the_batch() -> None:
    assert parts(2_500, 1_000) == [
        Part(1, 0, 1_000, False),
        Part(2, 1_000, 1_000, False),
        Part(3, 2_000, 500, True),
    ]
    assert parts(1_000, 1_000) == [Part(1, 0, 1_000, True)]
    assert parts(0, 1_000) == []


def test_a_resume_sends_what_is_missing_and_the_closing_part_last() -> None:
    plan = parts(2_500, 1_000)
    assert to_send(plan, set()) == plan
    assert [p.offset for p in to_send(plan, {0})] == [1_000, 2_000]
    assert to_send(plan, {0, 1_000, 2_000}) == []  # all acknowledged: nothing to send
    # A part missing before an acknowledged closing part: the closing part goes again, last (a
    # part sent after it would reopen the batch).
    assert [p.offset for p in to_send(plan, {0, 2_000})] == [1_000, 2_000]


def test_bad_lines_keep_their_line_numbers_and_the_rest_is_kept() -> None:
    parsed = parse_jsonl(b'{"a": 1}\n\n[1]\n{oops\n"text"\n{"b": 2}\n')
    assert parsed.items == [{"a": 1}, {"b": 2}] and parsed.lines == [1, 6]
    assert [n for n, _ in parsed.bad] == [3, 4, 5]
    assert "not a JSON object" in parsed.bad[0][1] and "not JSON" in parsed.bad[1][1]


def test_a_refused_part_is_sent_again_for_passing_reasons_only_and_a_bounded_number_of_times() -> None:
    assert retry_delay_ms(1, 429, 2.0, 0.5) == 2_000  # the API's Retry-After when longer
    assert retry_delay_ms(1, 503, None, 0.5) == RETRY.base_delay_ms
    assert retry_delay_ms(3, None, None, 0.5) == 4 * RETRY.base_delay_ms  # no answer: backoff
    assert retry_delay_ms(1, 429, 3_600.0, 0.5) == RETRY.retry_after_cap_ms
    for status in (400, 401, 403, 404, 409, 413, 422):
        assert retry_delay_ms(1, status, None, 0.5) is None
    assert retry_delay_ms(RETRY.max_retries + 1, 429, 1.0, 0.5) is None
