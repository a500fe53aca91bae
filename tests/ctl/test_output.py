"""Progress on stderr: a bar on a terminal, plain lines for long runs elsewhere, nothing when
silenced or when the run is short."""

from __future__ import annotations

from palacectl import output
from palacectl.output import STAMP_UTC, ProgressBar, emit, render_bar, utc_now


def test_render_bar_shows_fraction_and_counts():
    assert render_bar("x", 5, 10, width=10) == "x [#####.....]  50%  5/10"
    assert render_bar("x", 0, 0, width=4) == "x [####] 100%  0/0"
    assert render_bar("x", 12, 10, width=4).startswith("x [####] 100%")


def test_without_a_terminal_long_runs_print_plain_lines_and_short_ones_nothing(capsys, monkeypatch):
    quick = ProgressBar("importing")
    quick.update(1, 10)
    quick.close()
    assert capsys.readouterr().err == ""  # under LINE_EVERY_S: no noise for scripts
    monkeypatch.setattr(ProgressBar, "LINE_EVERY_S", 0.0)
    slow = ProgressBar("importing")
    slow.update(2_500, 10_000)
    slow.close()
    err = capsys.readouterr().err
    assert err == "importing: 2,500/10,000 (25%)\n" and "\r" not in err


def test_silenced_and_forced_terminal_modes(capsys, monkeypatch):
    monkeypatch.setattr(ProgressBar, "LINE_EVERY_S", 0.0)
    silent = ProgressBar("x", enabled=False)
    silent.update(1, 2, force=True)
    silent.close()
    assert capsys.readouterr().err == "" and not silent.active
    bar = ProgressBar("x", enabled=True)
    bar.update(1, 2, force=True)
    bar.close()
    err = capsys.readouterr().err
    assert err.startswith("\r\x1b[K") and err.endswith("\n") and "50%" in err


def test_emit_is_the_json_document_or_the_human_line(capsys):
    """The tail of nearly every command (issue 27 §3): one JSON document with --json, else a line."""
    assert emit({"a": "é"}, True, "not this") is True
    assert capsys.readouterr() == ('{\n  "a": "é"\n}\n', "")
    assert emit({"a": 1}, False, "Released: task_a is open again") is False
    assert capsys.readouterr() == ("Released: task_a is open again\n", "")
    assert emit({"a": 1}, False) is False  # the command renders the rest itself
    assert capsys.readouterr() == ("", "")


def test_now_is_written_as_the_api_writes_times_and_to_the_second_for_file_names(monkeypatch):
    """utc_now takes its form from palace_proto.stamps (the daemon's one writer of times)."""
    monkeypatch.setattr(output.time, "time", lambda: 1_700_000_000.999)
    assert utc_now() == "2023-11-14T22:13:20Z"  # the fraction dropped, never rounded up
    assert utc_now(STAMP_UTC) == "20231114T221320Z"
