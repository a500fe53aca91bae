"""Workers: what a ``palacectl worker`` tells its daemon (and, through presence, the palace) it is doing.

Owns: the worker *activity* a subscription may carry (``subscribe``'s ``worker`` argument, then
``watch_update``): the runner it launches, how many tasks it runs at once, its project, and the
tasks it is running now; its check (``check_activity``, for a local client's value), its compact
text form as presence gossip carries it (``encode_activity``), and the lenient reading of a
peer's (``decode_activity``: a hostile or newer peer's text yields what is valid, never an
exception). Pure: stdlib only.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

from .errors import ValidationError
from .text import printable

__all__ = ["MAX_ACTIVITY_CHARS", "MAX_CONCURRENCY", "MAX_REPORTED_TASKS", "MAX_TASK_ID_CHARS", "check_activity",
           "decode_activity", "encode_activity", "fit_activity", "is_task_id"]

# Why 16: the most tasks one worker runs at once (each is a harness process with its own worktree;
# more belongs on another machine).
MAX_CONCURRENCY: Final = 16
# Why 16: a worker reports every task it runs (at most MAX_CONCURRENCY).
MAX_REPORTED_TASKS: Final = MAX_CONCURRENCY
# Why 2048: 16 correlation ids of ~60 characters plus the rest, with room; bounds every presence
# record a worker adds (MAX_WATCHERS_PER_PRESENCE of them at most).
MAX_ACTIVITY_CHARS: Final = 2048
_RUNNER_RE: Final = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# Why any visible text of at most 256 characters: a task is named by its correlation id, which is
# whatever its requester chose (the routing rule of palace_proto.validation); refusing one here
# made a worker that ran such a task fail to report itself, and exit (issue 25, finding 5).
MAX_TASK_ID_CHARS: Final = 256
# Why 512: whose tasks a worker runs, in one line (worker_policy.WorkerPolicy.describe).
MAX_ACCEPTS_CHARS: Final = 512
#: The one-line texts a worker reports beside its tasks, each at most MAX_ACCEPTS_CHARS, and what
#: each says (``who`` and the dashboard show them). ``held``: why it claims nothing now (a budget).
ACTIVITY_LINES: Final = {"accepts": "whose tasks it runs", "permissions": "what its runs may do without asking",
                         "held": "why it claims nothing now"}


def check_activity(value: Any) -> dict[str, Any]:
    """A worker activity from a local client, normalised: {runner, concurrency, project, tasks}.

    Raises:
        ValidationError: naming the field that is wrong.
    """
    if not isinstance(value, dict):
        raise ValidationError("worker must be an object {runner, concurrency, project, tasks}", field="worker")
    runner = value.get("runner")
    if not isinstance(runner, str) or not _RUNNER_RE.match(runner):
        raise ValidationError("worker.runner must be a runner name (letters, digits, . _ -; at most 64)",
                              field="worker.runner")
    concurrency = value.get("concurrency", 1)
    if isinstance(concurrency, bool) or not isinstance(concurrency, int) or not 1 <= concurrency <= MAX_CONCURRENCY:
        raise ValidationError(f"worker.concurrency must be an integer from 1 to {MAX_CONCURRENCY}",
                              field="worker.concurrency")
    project = value.get("project")
    if project is not None and (not isinstance(project, str) or not 0 < len(project) <= 200
                                or not project.isprintable()):
        raise ValidationError("worker.project must be a project name of at most 200 visible characters",
                              field="worker.project")
    tasks = value.get("tasks", [])
    if (not isinstance(tasks, list) or len(tasks) > MAX_REPORTED_TASKS
            or not all(isinstance(t, str) and is_task_id(t) for t in tasks)):
        raise ValidationError(f"worker.tasks must be a list of at most {MAX_REPORTED_TASKS} task correlation ids "
                              f"(visible text, at most {MAX_TASK_ID_CHARS} characters each)", field="worker.tasks")
    checked = {"runner": runner, "concurrency": concurrency, "project": project, "tasks": list(dict.fromkeys(tasks))}
    for line, meaning in ACTIVITY_LINES.items():
        text = value.get(line)
        if text is None:
            continue
        if not isinstance(text, str) or not 0 < len(text) <= MAX_ACCEPTS_CHARS or printable(text, MAX_ACCEPTS_CHARS * 10) != text:
            raise ValidationError(f"worker.{line} must be visible text of at most {MAX_ACCEPTS_CHARS} characters "
                                  f"({meaning})", field=f"worker.{line}")
        checked[line] = text
    if len(encode_activity(checked)) > MAX_ACTIVITY_CHARS:
        raise ValidationError(f"worker is over {MAX_ACTIVITY_CHARS} characters once encoded: report fewer tasks "
                              "(fit_activity)", field="worker.tasks")
    return checked


def is_task_id(text: str) -> bool:
    """Can ``text`` name a task in a worker's activity (visible text, 1 to MAX_TASK_ID_CHARS characters)?"""
    return 0 < len(text) <= MAX_TASK_ID_CHARS and printable(text, MAX_TASK_ID_CHARS * 10) == text


def fit_activity(activity: dict[str, Any]) -> dict[str, Any]:
    """``activity`` with only the tasks it can report: those that are task ids, as many as fit in
    MAX_ACTIVITY_CHARS once encoded (the worker's own view of what it runs is never refused)."""
    tasks = [t for t in activity.get("tasks", []) if isinstance(t, str) and is_task_id(t)][:MAX_REPORTED_TASKS]
    fitted = {**activity, "tasks": tasks}
    for line in ACTIVITY_LINES:
        text = fitted.get(line)
        if isinstance(text, str):
            fitted[line] = printable(text, MAX_ACCEPTS_CHARS - 1)  # (a cut line ends in one "…")
    while tasks and len(encode_activity(fitted)) > MAX_ACTIVITY_CHARS:
        tasks.pop()
    return fitted


def encode_activity(activity: dict[str, Any] | None) -> str:
    """The compact text presence gossip carries ('' for a watcher that is not a worker)."""
    if activity is None:
        return ""
    return json.dumps(activity, separators=(",", ":"), sort_keys=True)


def decode_activity(text: str) -> dict[str, Any] | None:
    """A peer's activity text read leniently: None when empty or unusable (never raises)."""
    if not text or len(text) > MAX_ACTIVITY_CHARS:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if not isinstance(value, dict):
        return None
    try:
        return check_activity(value)
    except ValidationError:
        return None
