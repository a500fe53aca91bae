"""The approvals feature's MCP tool (``approvals``, which ``--tools all`` leaves out): ``approve``,
palace's answer to a permission request of the harness running a launched run.

Declared with ``mcp_tools.tool``; ``mcp_tools.build_registry`` puts it together with the others.
The policy is this machine's (``run_policy``, read at every request); the rest is ``approvals``'.
Must not import trio or typer.
"""

from __future__ import annotations

import os

from palace_proto.errors import ApiError

from ...client import DaemonUnreachable
from ...files import ConfigUnreadable, read_config
from ...mcp_tools import Palace, Result, tool
from . import approvals
from .permission_policy import RUNNER_ENV, TASK_ENV, PermissionPolicy, PolicyError

__all__ = ["approve", "run_policy"]


def run_policy(palace: Palace) -> PermissionPolicy:
    """``[permissions]`` of the server's home's ``config.toml`` for the runner named by the run's
    environment (``PALACE_RUNNER``), read at each request: an edit applies to the next one.

    Raises:
        PolicyError: the file or its ``[permissions]`` is not readable as a policy.
    """
    try:
        config = read_config(palace.home)
    except ConfigUnreadable as exc:
        raise PolicyError(str(exc)) from None
    return PermissionPolicy.from_config(config, os.environ.get(RUNNER_ENV) or None)


@tool("approvals", text_only=True, description=(
    "palace's answer to a permission request of the harness running you (Claude Code's "
    "--permission-prompt-tool): allowed or refused by this machine's policy, or asked of a person."))
async def approve(palace: Palace, /, tool_name: str, input: dict | None = None,  # noqa: A002 - the harness's name
                  tool_use_id: str | None = None) -> Result:
    """Returns Claude Code's permission result: ``{"behavior": "allow", "updatedInput"}`` — exactly
    the input judged, or shown whole to the person who allowed it — or ``{"behavior": "deny",
    "message"}``. Anything that goes wrong is a deny, never a yes (``approvals``, shared with
    Gemini CLI's hook). The run's worktree is this server's working directory: Claude Code
    starts it in the run's."""
    tool_input = input if isinstance(input, dict) else {}
    calls = [(tool_name, tool_input)]
    try:
        policy = run_policy(palace)
    except PolicyError as exc:
        verdict = approvals.policy_unreadable(exc)
    else:
        try:
            folder: str | None = os.getcwd()
        except OSError:
            folder = None  # the folder is gone: no worktree, every file tool is asked
        # palace's home (config.toml, the identity key) is never inside a worktree file tools roam.
        worktree = approvals.worktree_of(folder, home=palace.home)
        step = approvals.first_step(policy, calls, agent=palace.agent, task=os.environ.get(TASK_ENV) or None,
                                    worktree=worktree, asked=(tool_name, tool_input))
        if isinstance(step, approvals.Verdict):
            verdict = step
        else:
            try:
                state = await palace.daemon.call("ask", **step.ask_args())
            except (ApiError, DaemonUnreachable, OSError) as exc:
                verdict = approvals.ask_failed(exc)
            else:
                verdict = (approvals.answer_verdict(state, step) if isinstance(state, dict) else
                           approvals.ask_failed(ValueError("palaced's answer to ask is not a question's state")))
    if verdict.allowed:
        return {"behavior": "allow", "updatedInput": tool_input}
    return {"behavior": "deny", "message": verdict.reason}

