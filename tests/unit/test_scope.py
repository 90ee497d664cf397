"""The ids a tenant's runs and sessions are kept under (producer.submission.Scope), pure."""

from __future__ import annotations

import hashlib

from agentmill_client.models import RunInput
from producer.scope import DEV_ID_SECRET, SCOPED_PREFIX, Scope
from producer.submission import reserved_id_error
from shared.quotas import DEFAULT_TENANT
from shared.settings import Settings


def test_a_named_tenants_key_needs_the_secret_and_differs_per_tenant() -> None:
    a, b = Scope.of(Settings(id_secret="s1"), "t1"), Scope.of(Settings(id_secret="s2"), "t1")
    assert a.key("x").startswith(SCOPED_PREFIX) and a.key("x") == a.key("x")
    assert a.key("x") != b.key("x") != Scope.of(Settings(id_secret="s2"), "t2").key("x")
    legacy = SCOPED_PREFIX + hashlib.sha256(b"t1\0x").hexdigest()[:40]
    assert a.key("x") != legacy  # the form anyone could compute is no key any more
    assert a.lookups("x") == [a.key("x"), "x", legacy]  # … only read, for the runs stored then
    assert a.key("") == ""
    assert Scope.of(Settings(), "t1") == Scope("t1", DEV_ID_SECRET.encode())


def test_the_default_tenant_keeps_its_ids() -> None:
    d = Scope.of(Settings(id_secret="s1"), DEFAULT_TENANT)
    assert d.key("x") == "x" and d.lookups("x") == ["x"]


def test_a_batch_delivery_id_names_no_tenant_and_no_batch() -> None:
    s = Scope.of(Settings(id_secret="s1"), "acme")
    d = s.batch_delivery("nightly-8")
    assert d.startswith("bat_") and "acme" not in d and "nightly" not in d
    assert (
        d
        == s.batch_delivery("nightly-8")
        != Scope.of(Settings(id_secret="s1"), "acme2").batch_delivery("nightly-8")
    )


def test_ids_in_the_scoped_form_are_reserved() -> None:
    assert (
        reserved_id_error(
            RunInput.model_validate({"inputMessages": [{"role": "user", "content": "hi"}], "runId": "ok-1"})
        )
        is None
    )
    for field in ("runId", "sessionId"):
        err = reserved_id_error(
            RunInput.model_validate({"inputMessages": [{"role": "user", "content": "hi"}], field: "tsc_1"})
        )
        assert err is not None and err.code == "reserved_id" and err.field == field and err.status == 422


def test_a_child_aborted_with_its_parent_names_no_scoped_key() -> None:
    from shared.children import orphan_reason

    scoped = Scope("tenant-a", b"s").key("mine")
    assert orphan_reason(scoped, "aborted") == "its parent run ended aborted"
    assert orphan_reason("mine", "failed") == "its parent run mine ended failed"
