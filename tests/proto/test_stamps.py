"""Event timestamps and durations: the one parser leases, tasks, config and launch share."""

from __future__ import annotations

import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from palace_proto.errors import ValidationError
from palace_proto.stamps import (
    STAMP_RE,
    add_seconds,
    check_duration,
    format_duration,
    format_stamp,
    format_stamp_seconds,
    parse_duration,
    seconds_between,
)


def test_timestamps_move_and_measure_with_or_without_microseconds():
    assert add_seconds("2026-12-01T23:59:59Z", 1) == "2026-12-02T00:00:00.000000Z"
    assert add_seconds("2026-12-01T10:00:00.250000Z", -0.25) == "2026-12-01T10:00:00.000000Z"
    assert seconds_between("2026-12-01T10:00:00.000000Z", "2026-12-01T10:01:30.500000Z") == 90.5
    assert seconds_between("2026-12-01T10:01:00Z", "2026-12-01T10:00:00Z") == -60
    assert STAMP_RE.match("2026-12-01T10:00:00Z") and not STAMP_RE.match("2026-12-01 10:00:00")


def test_every_duration_field_is_named_in_its_error():
    with pytest.raises(ValidationError, match=r"^--timeout 'soon' is not a duration"):
        parse_duration("soon", field="--timeout")
    with pytest.raises(ValidationError, match=r"^stall_after must be between 10s and 30d$"):
        check_duration(5, field="stall_after")
    with pytest.raises(ValidationError, match="between"):
        check_duration(True, field="ttl")
    assert parse_duration(" 2h ", field="ttl") == 7200 and format_duration(7200) == "2h"


def test_a_unix_time_is_written_as_the_log_writes_it_or_to_the_second():
    """Guards the one format palaced writes "now" in (store/clock.py's stamps, the API's times)."""
    assert format_stamp(1_780_000_000.123456) == "2026-05-28T20:26:40.123456Z"
    assert format_stamp(1_780_000_000) == "2026-05-28T20:26:40.000000Z"
    assert format_stamp(0) == "1970-01-01T00:00:00.000000Z"
    assert format_stamp_seconds(1_780_000_000.999999) == "2026-05-28T20:26:40Z"  # the fraction dropped
    assert format_stamp_seconds(1_780_000_041) == "2026-05-28T20:27:21Z"
    assert STAMP_RE.match(format_stamp(1_780_000_000.5)) and STAMP_RE.match(format_stamp_seconds(1_780_000_000.5))


# Unix times from 1970 to 2200, in microseconds (what a stamp can hold).
_MICROS = st.integers(min_value=0, max_value=7_258_118_400 * 1_000_000)


@given(_MICROS)
def test_a_written_time_reads_back_to_the_microsecond(micros):
    epoch = micros / 1_000_000
    assert seconds_between(format_stamp(0), format_stamp(epoch)) == pytest.approx(epoch, abs=1e-6)
    assert format_stamp(epoch)[:19] == format_stamp_seconds(micros // 1_000_000)[:19]


@given(st.floats(min_value=0, max_value=7_258_118_400, allow_nan=False))
def test_to_the_second_is_what_gmtime_gives(epoch):
    """The daemon wrote API times with time.strftime on time.gmtime: the same text, any instant."""
    assert format_stamp_seconds(epoch) == time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch))
