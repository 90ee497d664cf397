"""The CLI's manners: one-line errors on stderr with a non-zero exit code,
never a traceback; errors name the file's line; data on stdout, progress on stderr; run ids never
cut. Real API and redis-server, the CLI as a subprocess (test_client_cli's setup)."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import orjson
import pytest

from tests.integration.test_cli_submit import api_at
from tests.support.cli import cli
from tests.support.redis_server import free_port

pytestmark = pytest.mark.integration

RUN = {"inputMessages": [{"role": "user", "content": "hi"}]}


async def one_line_error(redis_url: str, args: tuple[str, ...], *words: str) -> None:
    """The command fails with exit code 2 and says why in one ``error:`` line naming ``words``
    (submit says first which batch it starts, and after, how to resume it)."""
    out = await asyncio.to_thread(cli, redis_url, *args)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    said = [line for line in out.stderr.splitlines() if line.startswith("error: ")]
    assert len(said) == 1 and all(w in said[0] for w in words), out.stderr


async def test_an_unreachable_api_or_redis_is_one_line(redis_url: str, tmp_path: Path) -> None:
    nobody = f"http://127.0.0.1:{free_port()}"
    jsonl = tmp_path / "runs.jsonl"
    jsonl.write_bytes(orjson.dumps(RUN) + b"\n")
    for args in (("runs", "ls", "--api", nobody), ("batch", "status", "b1", "--api", nobody),
                 ("submit", str(jsonl), "--api", nobody), ("tail", "r1", "--api", nobody)):  # fmt: skip
        await one_line_error(redis_url, args, "cannot reach the API", nobody)
    no_redis = f"redis://127.0.0.1:{free_port()}/0"
    for args in (("runs", "ls"), ("status", "r1"), ("submit", str(jsonl))):
        await one_line_error(no_redis, args, "cannot reach Redis", no_redis)


async def test_a_url_without_scheme_and_a_bad_token_are_one_line(redis_url: str, tmp_path: Path) -> None:
    await one_line_error(redis_url, ("runs", "ls", "--api", "127.0.0.1:8000"), "http://", "127.0.0.1:8000")
    jsonl = tmp_path / "runs.jsonl"
    jsonl.write_bytes(orjson.dumps(RUN) + b"\n")
    async with api_at(redis_url, auth_disabled=False, api_tokens="good=t1") as url:
        for args in (("runs", "ls", "--api", url), ("submit", str(jsonl), "--api", url)):
            await one_line_error(redis_url, (*args, "--token", "bad"), "401", "token")
        good = await asyncio.to_thread(cli, redis_url, "runs", "ls", "--api", url, "--token", "good")
        assert good.returncode == 0, good.stderr


async def test_bad_lines_are_named_by_line_and_the_rest_is_submitted(redis_url: str, tmp_path: Path) -> None:
    jsonl = tmp_path / "runs.jsonl"
    lines = [
        orjson.dumps(RUN).decode(),
        "",
        "[1, 2]",
        '{"inputMessages": []}',
        "{oops",
        orjson.dumps(RUN).decode(),
    ]
    jsonl.write_text("\n".join(lines) + "\n")
    async with api_at(redis_url) as url:
        for through in (("--api", url), ()):
            out = await asyncio.to_thread(cli, redis_url, "submit", str(jsonl), *through)
            assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
            said = out.stderr.splitlines()
            assert any(s.startswith("line 3: not a JSON object") for s in said), said
            assert any(s.startswith("line 4: invalid_input: inputMessages") for s in said), said
            assert any(s.startswith("line 5: not JSON") for s in said), said
            assert "accepted 2, rejected 3" in out.stderr
            batch_id, *run_ids = out.stdout.split()  # data only: the batch and its two runs
            assert len(run_ids) == 2 and all(r.startswith("run_") for r in run_ids), out.stdout
            assert batch_id in out.stderr.splitlines()[0]


async def test_runs_ls_never_cuts_a_run_id(redis_url: str) -> None:
    long_id = "r-" + "x" * 100
    async with api_at(redis_url) as url:
        import httpx

        async with httpx.AsyncClient(base_url=url) as c:
            assert (await c.post("/v1/runs", json={**RUN, "runId": long_id})).status_code == 202
        for through, terminal in ((("--api", url), {}), ((), {}), ((), {"FORCE_COLOR": "1"})):
            env = {"COLUMNS": "40", **terminal}  # a narrow terminal, or a pipe
            out = await asyncio.to_thread(cli, redis_url, "runs", "ls", *through, env=env)
            words = re.sub(r"\x1b\[[0-9;]*m", " ", out.stdout).split()
            assert out.returncode == 0 and long_id in words, out.stdout


async def test_an_error_line_is_one_line_whatever_its_length(redis_url: str) -> None:
    """Through a pipe (stderr no TTY, 80 columns), a 300-character message is still one line, and
    markup-like text in it is shown as it is."""
    long_id = "r[b]" + "x" * 296
    out = await asyncio.to_thread(cli, redis_url, "status", long_id, env={"COLUMNS": "80"})
    assert out.returncode == 2 and not out.stdout
    assert out.stderr.splitlines() == [f"error: no run {long_id} for tenant default"], out.stderr


async def test_version_and_the_abort_help_say_what_happens(redis_url: str) -> None:
    from agentmill_client._version import __version__

    version = await asyncio.to_thread(cli, redis_url, "--version")
    assert version.returncode == 0 and version.stdout == f"agentmill {__version__}\n"
    helped = await asyncio.to_thread(cli, redis_url, "abort", "--help")
    assert "unknown run is an error (exit code 2)" in " ".join(helped.stdout.split())
    missing = await asyncio.to_thread(cli, redis_url, "abort", "no-such-run")
    assert missing.returncode == 2 and missing.stderr.startswith("error: no run no-such-run")
