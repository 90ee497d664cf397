"""Keys and read tokens, pure (shared/api_keys.py): the key's shape, the keyed hash, scopes,
durations, and read tokens that a wrong key, a changed payload or time refuse."""

from __future__ import annotations

import pytest

from shared import api_keys
from shared.api_keys import ReadToken, Scope
from shared.settings import Settings


def test_a_key_parses_back_to_its_id_and_secret_and_the_hash_is_keyed() -> None:
    key_id, part, key = api_keys.mint_key()
    assert api_keys.parse_key(key) == (key_id, part)
    assert api_keys.parse_key(key + "!") is None and api_keys.parse_key("tok-a") is None
    a, b = b"k1" * 16, b"k2" * 16
    assert api_keys.digest(a, part) != api_keys.digest(b, part)
    assert part not in api_keys.digest(a, part)


def test_the_secret_is_the_setting_else_derived_from_the_id_secret() -> None:
    assert api_keys.key_secret(Settings(key_secret="s3")) == b"s3"
    derived = api_keys.key_secret(Settings(id_secret="abc"))
    assert derived != b"abc" and derived != api_keys.key_secret(Settings(id_secret="abd"))


def test_scopes_and_durations() -> None:
    assert api_keys.parse_scopes("submit, read") == {Scope.SUBMIT, Scope.READ}
    with pytest.raises(ValueError, match="delete"):
        api_keys.parse_scopes("read,delete")
    with pytest.raises(ValueError):
        api_keys.parse_scopes(" , ")
    assert api_keys.parse_duration("30d") == 30 * 86400 and api_keys.parse_duration("90m") == 5400
    for bad in ("0d", "3w", "d", "-1h"):
        with pytest.raises(ValueError):
            api_keys.parse_duration(bad)


def test_a_read_token_holds_only_for_its_key_and_its_time() -> None:
    secret = b"x" * 32
    token = api_keys.sign_read_token(secret, ReadToken("run-1", "tenant-a", 10_000))
    assert api_keys.verify_read_token(secret, token, 9_999) == ReadToken("run-1", "tenant-a", 10_000)
    assert api_keys.verify_read_token(secret, token, 10_000) == "expired"
    assert api_keys.verify_read_token(b"y" * 32, token, 0) == "invalid"
    _, _, sig = token.partition(".")
    other = api_keys.sign_read_token(secret, ReadToken("run-2", "tenant-a", 10_000))
    assert api_keys.verify_read_token(secret, other.partition(".")[0] + "." + sig, 0) == "invalid"
    assert api_keys.verify_read_token(secret, "amk_" + token[4:], 0) == "invalid"
