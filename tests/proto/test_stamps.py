"""Event timestamps and durations: the one parser leases, tasks, config and launch share."""

from __future__ import annotations

import pytest

from palace_proto.errors import ValidationError
from palace_proto.stamps import STAMP_RE, add_seconds, check_duration, format_duration, parse_duration, seconds_between


def test_timestamps_move_and_measure_with_or_without_microseconds():
    assert add_seconds("2026-12-01T23:59:59Z", 1) == "2026-12-02T00:00:00.000000Z"
    assert add_seconds("2026-12-01T10:00:00.250000Z", -0.25) == "2026-12-01T10:00:00.000000Z"
    assert seconds_between("2026-12-01T10:00:00.000000Z", "2026-12-01T10:01:30.500000Z") == 90.5
    assert seconds_between("2026-12-01T10:01:00Z", "2026-12-01T10:00:00Z") == -60
    assert STAMP_RE.match("2026-12-01T10:00:00Z") and not STAMP_RE.match("2026-12-01 10:00:00")


def test_every_duration_field_is_named_in_its_error():
    with pytest.raises(ValidationError, match="^--timeout 'soon' is not a duration"):
        parse_duration("soon", field="--timeout")
    with pytest.raises(ValidationError, match="^stall_after must be between 10s and 30d$"):
        check_duration(5, field="stall_after")
    with pytest.raises(ValidationError, match="between"):
        check_duration(True, field="ttl")
    assert parse_duration(" 2h ", field="ttl") == 7200 and format_duration(7200) == "2h"
