"""shared.actors: the one shape of who acted, and the abort field that carries it to a run's worker."""

from __future__ import annotations

from shared.actors import abort_field, abort_of, actor, actor_json, system


def test_an_actor_is_the_audit_logs_actor_with_its_kind() -> None:
    assert actor("k_1", "ops") == {"kind": "key", "id": "k_1", "name": "ops"}
    assert actor("token-file") == {"kind": "token-file", "id": "token-file", "name": ""}
    assert system("parent") == {"kind": "system", "id": "system", "name": "parent"}
    assert actor_json(None) == "" and actor_json(actor("cli")).startswith('{"kind":"cli"')


def test_the_abort_field_carries_the_reason_and_the_actor_and_reads_a_plain_reason() -> None:
    by = actor("k_1", "ops")
    assert abort_of(abort_field("stop it", by)) == ("stop it", by)
    assert abort_field("stop it", None) == "stop it"
    assert abort_of("stop it") == ("stop it", None)
    assert abort_of("{not json") == ("{not json", None)  # a reason that looks like JSON stays a reason
    assert abort_of('{"other": 1}') == ('{"other": 1}', None)
