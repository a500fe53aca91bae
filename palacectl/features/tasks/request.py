"""What a task's request is made of: ``task_create``'s arguments, once, and the git base a request names.

Owns ``ARGUMENTS``, the one table ``task create`` (its options), ``mempalace_task_create`` (its
parameters, extras and description) and the light verb ``TASK CREATE`` (its required fields, the
fields that mean it, its schema's fields) are built from; ``GIT_FIELDS``, the ones naming where
the work starts, which a request carries as event fields of the same names; and ``GitBase``, that
start read from a request (the worker's ``task launch``) and written into a patch's announcement.
The caller's identity (``from_agent``) is no row: each client takes it its own way (the command
line as ``--from-agent``, MCP as the agent it speaks as). Standard library only.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, NamedTuple

__all__ = ["ARGUMENTS", "Argument", "DESCRIPTION", "GIT_FIELDS", "GitBase"]


class Argument(NamedTuple):
    """One argument of ``task_create``."""

    name: str
    #: its Python type: ``str``, ``int`` or ``list[str]`` (a list: given one value at a time)
    type: Any
    required: bool
    #: what the command line's option says of it
    help: str = ""
    #: long text: the command line also reads it from a file (``--goal-file``), and then none is required of it
    from_file: bool = False
    #: it names where the work starts in git (the request's event field of that name)
    git: bool = False


#: ``task_create``'s arguments, in the order the tools take them and a light call's first missing
#: one is named (MemPalace's order).
ARGUMENTS: Final = (
    Argument("project", str, True),
    Argument("to_agent", str, True),
    Argument("goal", str, True, from_file=True),
    Argument("branch", str, True, git=True),
    Argument("base_commit", str, True, "A hex commit id (≥7 chars), not a branch.", git=True),
    Argument("done", str, True, "Definition of done.", from_file=True),
    Argument("blocked_by", list[str], False, "A task (correlation id) that must be applied first; repeatable."),
    Argument("priority", int, False, "0 (urgent) to 3 (low); default 2."),
    Argument("stall_after", str, False, "Stalled when its claimant says nothing this long (90s, 30m, 2h, 7d)."),
    Argument("review_by", str, False, "Who must approve the patch before it lands: an agent, human:NAME, or "
                                      "any-other-agent (never its author); none: no review. Default: [tasks] in "
                                      "config.toml."),
    Argument("integrator", str, False, "The agent that lands the patch (palacectl integrate --agent ID); none: "
                                       "nobody. Default: [tasks] in config.toml."),
)
#: The arguments naming where a task's work starts (a request's event fields of these names).
GIT_FIELDS: Final = tuple(a.name for a in ARGUMENTS if a.git)
#: ``mempalace_task_create``'s description.
DESCRIPTION: Final = (
    "Delegate work: a task.request with goal, branch, base_commit (a hex commit id, not a branch) and "
    "definition of done. Returns {success, task, handoff}; wait on task.correlation_id.")


class GitBase(NamedTuple):
    """Where a task's work starts: its branch, and the commit it is based on."""

    branch: str
    commit: str

    @classmethod
    def of(cls, request: Mapping[str, Any]) -> GitBase:
        """A task request's git base ("" for what it does not name)."""
        return cls(request.get("branch") or "", request.get("base_commit") or "")

    def fields(self) -> dict[str, str]:
        """As an event's fields (a patch's announcement: ``patch_submit``)."""
        return {"branch": self.branch, "base_commit": self.commit}
