"""Tests for palace_proto.control: request parsing, the hello handshake and reply shapes."""

from __future__ import annotations

import re

import pytest

from palace_proto.control import (
    CORE_OPS,
    PROTOCOL_VERSION,
    Request,
    api_error_from_wire,
    check_hello,
    error_reply,
    ok_reply,
    parse_request,
    request,
)
from palace_proto.errors import (
    API_ERROR_CODES,
    ApiError,
    NotFound,
    ProtocolError,
    RemoteProtocolError,
    ValidationError,
    VersionMismatch,
)
from palace_proto.features import OPS
from palace_proto.framing import FrameBuffer, encode_frame

# --- requests --------------------------------------------------------------------------------


def test_request_helper_builds_the_wire_shape():
    assert request(7, "list", rooms=["a"], limit=5) == {"id": 7, "op": "list", "args": {"rooms": ["a"], "limit": 5}}
    assert request(1, "ping") == {"id": 1, "op": "ping", "args": {}}


def test_parse_request_accepts_a_well_formed_request():
    req = parse_request({"id": 3, "op": "append", "args": {"type": "note"}})
    assert isinstance(req, Request)
    assert (req.id, req.op, req.args) == (3, "append", {"type": "note"})
    assert repr(req) == "<Request #3 append>"


def test_parse_request_round_trips_through_a_frame():
    buf = FrameBuffer()
    buf.feed(encode_frame(request(9, "status")))
    req = parse_request(buf.next_frame())
    assert (req.id, req.op, req.args) == (9, "status", {})


@pytest.mark.parametrize("args", [None, "missing"], ids=["null", "missing"])
def test_parse_request_treats_absent_args_as_empty(args):
    message = {"id": 1, "op": "ping"} if args == "missing" else {"id": 1, "op": "ping", "args": None}
    assert parse_request(message).args == {}


def test_parse_request_copies_args():
    args = {"a": 1}
    req = parse_request({"id": 1, "op": "ping", "args": args})
    req.args["b"] = 2
    assert args == {"a": 1}


def test_parse_request_does_not_check_the_op_name():
    """Unknown ops are the daemon's business (unknown_op), not a malformed request."""
    assert parse_request({"id": 1, "op": "no_such_op"}).op == "no_such_op"
    assert "no_such_op" not in OPS and CORE_OPS <= OPS


@pytest.mark.parametrize("message", [None, [1, "ping", {}], "ping", 5, b"x"])
def test_parse_request_refuses_non_maps(message):
    with pytest.raises(RemoteProtocolError, match="must be a map with 'id', 'op' and 'args'"):
        parse_request(message)


@pytest.mark.parametrize(
    "rid", [None, "1", 1.0, True, False, [1]], ids=["missing", "str", "float", "true", "false", "list"]
)
def test_parse_request_refuses_a_non_integer_id(rid):
    message = {"op": "ping"} if rid is None else {"id": rid, "op": "ping"}
    with pytest.raises(RemoteProtocolError, match="'id' must be an integer"):
        parse_request(message)


@pytest.mark.parametrize("op", [None, 1, b"ping", ["ping"]])
def test_parse_request_refuses_a_non_string_op(op):
    with pytest.raises(RemoteProtocolError, match="'op' must be a string"):
        parse_request({"id": 1, "op": op})


@pytest.mark.parametrize("args", [[], "x", 1, {1: "a"}, {b"k": 1}], ids=["list", "str", "int", "int-key", "bytes-key"])
def test_parse_request_refuses_args_that_are_not_string_keyed_maps(args):
    with pytest.raises(RemoteProtocolError, match="'args' must be a map with string keys"):
        parse_request({"id": 1, "op": "ping", "args": args})


def test_parse_request_errors_are_bad_request():
    with pytest.raises(ProtocolError) as info:
        parse_request([])
    assert info.value.code == "bad_request"


# --- hello -----------------------------------------------------------------------------------


def test_hello_with_our_version_passes():
    check_hello({"version": PROTOCOL_VERSION, "client": "palacectl"})


@pytest.mark.parametrize(
    "version", [None, 0, 2, "1", True, 1.0, [1]], ids=["missing", "zero", "two", "str", "true", "float", "list"]
)
def test_hello_with_another_version_raises_version_mismatch(version):
    args = {} if version is None else {"version": version}
    expected = f"client speaks protocol version {version!r}, this daemon speaks 1"
    with pytest.raises(VersionMismatch, match=re.escape(expected)) as info:
        check_hello(args)
    assert info.value.code == "version_mismatch"
    assert isinstance(info.value, RemoteProtocolError)


def test_hello_true_is_not_version_1():
    """Regression: True == 1 in Python, so a hello naming `true` passed as version 1."""
    with pytest.raises(VersionMismatch):
        check_hello({"version": True})


def test_version_mismatch_message_says_what_to_do():
    with pytest.raises(VersionMismatch, match="upgrade palacectl and palaced to the same release"):
        check_hello({"version": 2})


# --- replies ---------------------------------------------------------------------------------


def test_ok_reply_shape():
    assert ok_reply(4, {"seq": 1}) == {"id": 4, "ok": True, "result": {"seq": 1}}
    assert ok_reply(None, None) == {"id": None, "ok": True, "result": None}


def test_error_reply_shape_without_detail():
    reply = error_reply(5, NotFound("no event evt_x"))
    assert reply == {"id": 5, "ok": False, "error": {"code": "not_found", "message": "no event evt_x"}}


def test_error_reply_carries_validation_detail():
    reply = error_reply(6, ValidationError("room must be a non-empty string", field="room"))
    assert reply == {
        "id": 6,
        "ok": False,
        "error": {
            "code": "invalid_argument",
            "message": "room must be a non-empty string",
            "detail": {"field": "room"},
        },
    }


def test_error_reply_with_explicit_code_and_null_id():
    reply = error_reply(None, ApiError("frame too big", code="frame_too_large"))
    assert reply == {"id": None, "ok": False, "error": {"code": "frame_too_large", "message": "frame too big"}}


def test_replies_survive_a_frame():
    buf = FrameBuffer()
    reply = error_reply(6, ValidationError("bad", field="room"))
    buf.feed(encode_frame(reply))
    assert buf.next_frame() == reply


def test_every_error_class_code_is_a_known_api_code():
    for cls in (ApiError, NotFound, ValidationError, VersionMismatch, RemoteProtocolError):
        assert cls.code in API_ERROR_CODES, cls


# --- api_error_from_wire ---------------------------------------------------------------------


def test_api_error_from_wire_rebuilds_code_message_and_detail():
    err = api_error_from_wire({"code": "invalid_argument", "message": "bad room", "detail": {"field": "room"}})
    assert type(err) is ApiError
    assert (err.code, err.message, err.detail) == ("invalid_argument", "bad room", {"field": "room"})
    assert str(err) == "bad room"


def test_api_error_from_wire_round_trips_error_reply():
    original = ValidationError("limit must be a positive integer", field="limit")
    err = api_error_from_wire(error_reply(1, original)["error"])
    assert err.to_wire() == original.to_wire()


def test_api_error_from_wire_fills_missing_fields():
    err = api_error_from_wire({})
    assert (err.code, err.message, err.detail) == ("internal", "", None)


def test_api_error_from_wire_stringifies_odd_types():
    err = api_error_from_wire({"code": 5, "message": None})
    assert (err.code, err.message) == ("5", "None")


@pytest.mark.parametrize("error", [None, "boom", ["x"], 3])
def test_api_error_from_wire_refuses_a_malformed_error(error):
    err = api_error_from_wire(error)
    assert err.code == "internal"
    assert err.message == "daemon sent a malformed error reply"
