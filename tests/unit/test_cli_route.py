"""Which way a CLI command goes (app.cli.common.route): an explicit --api wins; --redis or
--tenant mean Redis; else AGENTMILL_API_URL when set; else Redis. --api with --redis or --tenant is
refused: through the API the token names the tenant."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.cli.common import CliError, route
from shared.settings import get_settings

URL = "http://api.example:8000"


@pytest.fixture
def api_url_set(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AGENTMILL_API_URL", URL)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.fixture
def api_url_unset(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("AGENTMILL_API_URL", raising=False)
    get_settings.cache_clear()
    yield
    get_settings.cache_clear()


@pytest.mark.usefixtures("api_url_unset")
def test_without_the_setting_redis_is_the_default() -> None:
    assert route(None, None, False) == (None, "default")
    assert route(None, "acme", False) == (None, "acme")
    assert route("http://other:1", None, False) == ("http://other:1", "default")


@pytest.mark.usefixtures("api_url_set")
def test_the_setting_is_the_default_and_an_explicit_choice_wins() -> None:
    assert route(None, None, False) == (URL, "default")
    assert route("http://other:1", None, False) == ("http://other:1", "default")
    assert route(None, None, True) == (None, "default")
    assert route(None, "acme", False) == (None, "acme")
    assert route(None, "acme", True) == (None, "acme")


@pytest.mark.parametrize(("tenant", "redis", "flag"), [("acme", False, "--tenant"), (None, True, "--redis")])
def test_api_with_a_redis_flag_is_refused(tenant: str | None, redis: bool, flag: str) -> None:
    with pytest.raises(CliError, match=flag):
        route(URL, tenant, redis)
