"""The codec of encryption at rest (shared/payload_crypto.py): what it seals, what it keeps readable by
the Lua scripts, rotation and a removed key."""

from __future__ import annotations

import base64
import os

import orjson
import pytest

from shared.data_keys import parse_keys
from shared.payload_crypto import Codec, DataKeyError
from shared.settings import Settings
from shared.tool_records import ToolRecord, ToolState

MARK = "qv-secret-7731"


def key() -> str:
    return base64.b64encode(os.urandom(32)).decode()


K1, K2 = key(), key()


def test_the_leaves_are_sealed_and_what_the_scripts_read_stays_plain() -> None:
    c = Codec.from_spec(f"k1:{K1}")
    rec = ToolRecord(ToolState.CLIENT_PENDING, client=True, name="echo", arguments=f'{{"text":"{MARK}"}}',
                     deadline_ms=5, called_at_ms=7).to_json()  # fmt: skip
    sealed = c.seal_json(rec)
    assert MARK.encode() not in sealed
    d = orjson.loads(sealed)
    assert (d["state"], d["name"], d["deadlineMs"], d["calledAt"]) == ("client_pending", "echo", 5, 7)
    assert d["arguments"].startswith("enc1:k1:")
    assert ToolRecord.from_json(c.open_json(sealed)) == ToolRecord.from_json(rec)
    inp = orjson.dumps({"inputMessages": [{"role": "user", "content": [{"type": "text", "text": MARK}]}],
                        "storeContent": False, "metadata": {"endUser": "u-1"}, "runId": "r1"})  # fmt: skip
    s = c.seal_json(inp)
    assert MARK.encode() not in s and b'"storeContent":false' in s  # prelude.lua's stores_no_content
    assert orjson.loads(s)["metadata"] == {"endUser": "u-1"} and orjson.loads(s)["runId"] == "r1"
    assert orjson.loads(c.open_json(s)) == orjson.loads(inp)
    assert c.seal_json(s) == s  # sealed leaves are not sealed twice


def test_a_transcript_fragment_is_sealed_message_by_message() -> None:
    c = Codec.from_spec(f"k1:{K1}")
    frag = b',{"role":"user","content":"%s"},{"role":"assistant","content":"ok"}' % MARK.encode()
    sealed = c.seal_fragment(frag)
    assert sealed.startswith(b",") and MARK.encode() not in sealed
    assert orjson.loads(b"[" + c.open_fragment(sealed)[1:] + b"]") == orjson.loads(b"[" + frag[1:] + b"]")


def test_rotation_reads_old_data_and_a_removed_key_is_a_clear_error() -> None:
    old = Codec.from_spec(f"k1:{K1}").seal_json(orjson.dumps({"text": MARK}))
    rotated = Codec.from_spec(f"k2:{K2},k1:{K1}")
    assert rotated.current == "k2" and rotated.loads(old) == {"text": MARK}
    assert b"enc1:k2:" in rotated.seal_json(orjson.dumps({"text": MARK}))
    with pytest.raises(DataKeyError, match="'k1'"):
        Codec.from_spec(f"k2:{K2}").loads(old)
    wrong = Codec.from_spec(f"k1:{K2}")
    with pytest.raises(DataKeyError, match="does not open"):
        wrong.loads(old)


def test_without_keys_nothing_is_sealed_and_plain_data_reads_as_it_is() -> None:
    c = Codec()
    raw = orjson.dumps({"text": MARK})
    assert c.seal_json(raw) is raw and c.open_json(raw) is raw and c.loads(raw) == {"text": MARK}


def test_data_keys_are_checked_at_start() -> None:
    assert parse_keys(f"k2:{K2},k1:{K1}")[0] == "k2"
    for bad, why in ((f"k1:{base64.b64encode(b'short').decode()}", "32 bytes"), ("k 1:abc", "key id"),
                     (f"k1:{K1},k1:{K2}", "twice"), ("k1:%%%", "base64"), ("", "no data key")):  # fmt: skip
        with pytest.raises(ValueError, match=why):
            parse_keys(bad)
    with pytest.raises(ValueError, match="data key"):
        Settings(data_keys="k1:nope")


def test_what_is_not_json_is_sealed_whole_and_a_compared_value_seals_the_same() -> None:
    c = Codec.from_spec(f"k1:{K1}")
    sealed = c.seal_json(b"ckpt-" + MARK.encode())
    assert sealed.startswith(b"enc1:k1:") and MARK.encode() not in sealed
    assert c.open_json(sealed) == b"ckpt-" + MARK.encode()
    assert c.seal_str(MARK, same=True) == c.seal_str(MARK, same=True) != c.seal_str(MARK)
    assert c.open_str(c.seal_str(MARK, same=True)) == MARK
