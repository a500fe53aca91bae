"""The task board's words (palacectl/features/tasks/page.py and the dashboard's scripts): one word per
state, the one ``palacectl task`` prints (issue 47 §1.6: the CLI said ``ready`` where the dashboard
said ``delivered`` for the same task)."""

from __future__ import annotations

import re
from pathlib import Path

from palacectl.features.tasks.page import BOARD_COLUMNS, task_card

PALACECTL = Path(__file__).resolve().parents[2] / "palacectl"


def test_each_board_column_is_named_by_the_state_it_shows():
    assert [name for name, _ in BOARD_COLUMNS] == [states[0] for _, states in BOARD_COLUMNS]
    assert task_card({"correlation_id": "task_x", "state": "ready"})["column"] == "ready"


def test_no_dashboard_script_shows_a_task_state_under_another_word():
    scripts = [PALACECTL / "ui" / "static" / "app.js", *sorted((PALACECTL / "features").glob("*/page.js"))]
    renamed = [str(path.relative_to(PALACECTL)) for path in scripts
               if re.search(r"\bready\s*:\s*[\"']delivered[\"']|\bSTATES\s*\[", path.read_text(encoding="utf-8"))]
    assert renamed == []
