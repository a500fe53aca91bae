"""What ``append`` answers (palace_proto.appends): the reply shapes a client may ask for."""

from __future__ import annotations

import pytest

from palace_proto.appends import REPLY_SHAPES, SLIM_REPLY_FIELDS, reply_shape
from palace_proto.errors import ValidationError


def test_the_reply_is_the_whole_event_unless_slim_is_asked_for():
    assert reply_shape({}) == "event"
    assert reply_shape({"reply": None}) == "event"
    assert [reply_shape({"reply": shape}) for shape in REPLY_SHAPES] == ["event", "slim"]
    assert SLIM_REPLY_FIELDS == ("id", "seq", "origin_seq", "created_at")


@pytest.mark.parametrize("shape", ["", "SLIM", "full", 1, True, ["slim"], {"slim": 1}])
def test_any_other_reply_shape_is_refused_naming_the_field(shape):
    with pytest.raises(ValidationError) as refused:
        reply_shape({"reply": shape})
    assert refused.value.field == "reply" and "event, slim" in refused.value.message
