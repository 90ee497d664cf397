"""The operator's provider connections (``AGENTMILL_PROVIDERS``): named model endpoints with their
base URL, the environment variable or file holding the key, the pool-wide limits and the prices. A
tenant's agent (shared/agent_rules.py) names one in ``provider.connection`` and never holds a URL or
a key of its own; the worker and the API read the same file.

File: ``{"providers": {"<name>": {<a profile's provider fields>}}}``. Built in: ``calculator`` (the
scripted calculator model) and, with ``AGENTMILL_DEV_PROFILES``, ``scripted`` (the scripted model
that follows a run's runtimeHints)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

import orjson
from pydantic import Field, ValidationError

from agentmill_client.models import Model
from shared.provider_config import ProviderConfig
from shared.settings_errors import SettingsError

__all__ = ["PROVIDERS_ENV", "ConnectionFile", "connections_from", "load_connections"]

PROVIDERS_ENV = "AGENTMILL_PROVIDERS"
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$"


class ConnectionFile(Model):
    providers: dict[str, ProviderConfig] = Field(default_factory=dict)


def load_connections(path: str | None, *, dev: bool) -> dict[str, ProviderConfig]:
    """The built-in connections, overridden and extended by the file at ``path`` when given;
    SettingsError naming AGENTMILL_PROVIDERS when it cannot be read or holds what it may not."""
    found = {"calculator": ProviderConfig(kind="scripted", mode="calculator")}
    if dev:
        found["scripted"] = ProviderConfig(kind="scripted", mode="script")
    if not path:
        return found
    where = f"{PROVIDERS_ENV}={path}"
    try:
        data = orjson.loads(Path(path).read_bytes())
        read = ConnectionFile.model_validate(data).providers
    except OSError as exc:
        raise SettingsError(f"{where}: cannot read it ({exc.strerror or exc})") from None
    except orjson.JSONDecodeError as exc:
        raise SettingsError(f"{where}: not JSON ({exc})") from None
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        loc = ".".join(str(x) for x in first["loc"])
        raise SettingsError(f"{where}: {loc}: {str(first['msg']).removeprefix('Value error, ')}") from None
    for name, cfg in read.items():
        if cfg.kind == "scripted" and cfg.mode == "script" and not dev:
            raise SettingsError(
                f"{where}: connection {name!r} is for tests only (its scripted model follows the caller's "
                "runtimeHints); set AGENTMILL_DEV_PROFILES=true to load it"
            )
        if cfg.kind == "openai" and cfg.base_url is None:
            raise SettingsError(f"{where}: connection {name!r}: an openai connection needs baseUrl")
    return {**found, **read}


def connections_from(path: str | None, *, dev: bool) -> dict[str, ProviderConfig]:
    """``load_connections``, cached per (path, dev)."""
    return _cached(path, dev)


@lru_cache(maxsize=8)
def _cached(path: str | None, dev: bool) -> dict[str, ProviderConfig]:
    return load_connections(path, dev=dev)
