"""A verdict on a task's delivered patch, as every surface writes it: ``palacectl review``, the
Merge queue page, ``palacectl reviewer`` and the ``mempalace_task_review`` tool.

Owns: ``review_append`` — the ``append`` arguments of one reviewer's verdict (``task.review``, on
the task's thread, acknowledging the delivery, to its author) from the task's view — and
``NothingToReview``, its refusal when the task has no patch waiting. Who may review is the
authority table's (the task's ``review_by``; never the patch's author): the daemon judges the
append. Pure: no IO.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from palace_proto.event_fields import thread_of
from palace_proto.tasks import REVIEW

__all__ = ["VERDICTS", "NothingToReview", "review_append"]

#: what a review says: the patch may land, or it goes back to its author with what to change
VERDICTS: Final = ("approve", "changes_requested")


class NothingToReview(ValueError):
    """The task has no delivered patch waiting for review (its state says why)."""


def review_append(view: Mapping[str, Any], reviewer: str, verdict: str, said: str = "",
                  **metadata: Any) -> dict[str, Any]:
    """The ``append`` arguments of ``reviewer``'s ``verdict`` on the patch the task ``view``
    (``task_show``) says was delivered, with ``said`` (a message; a run's last words) and
    ``metadata`` (where it was written: ``via``, ``runner``).

    Raises:
        NothingToReview: no patch waits for review on the task.
    """
    assert verdict in VERDICTS, verdict
    delivery = view.get("delivery")
    if delivery is None or view.get("state") != "ready":
        raise NothingToReview(f"task {view.get('correlation_id')} has no patch waiting for review (it is "
                              f"{view.get('state')})")
    said = said.strip()
    body = f"{reviewer} reviewed {delivery['event_id']}: {verdict}." + (("\n" if "\n" in said else " ") + said
                                                                          if said else "")
    return {**thread_of(view["request"]), "type": REVIEW, "from_agent": reviewer, "to_agent": delivery["author"],
            "ack_of": delivery["event_id"], "metadata": {"verdict": verdict, **metadata}, "body": body}
