"""The questions feature's MCP tools (``people``): ask a person and wait, the questions and their state.

Each is declared with ``mcp_tools.tool`` in the group this package's declaration lists it in;
``mcp_tools.build_registry`` puts them together with the core's. Must not import trio or typer.
"""

from __future__ import annotations

from typing import Final

from palace_proto.errors import ApiError

from ...mcp_tools import Palace, Result, drop_none, tool

__all__ = ["QUESTION_STATE", "mempalace_ask_human", "mempalace_questions"]

#: a question's state, as the daemon's ``ask`` answers it (``palace_proto.questions.QuestionState``)
QUESTION_STATE: Final = {
    "question_id": "string", "asked_by": "string", "to": "string", "question": "string|null", "asked_at": "string",
    "correlation_id": "string|null", "choices": "array<string>|null", "expires_at": "string|null", "status": "string",
    "answer": "object|null", "approval": "object|null", "flagged": "array<object>", "timed_out": "boolean",
    "?approval_refused": "string"}


@tool("people", mutating=True, returns=QUESTION_STATE, extras=("correlation_id", "question_id"), description=(
    "Ask a person (to: human:NAME or human:*) and wait: before irreversible or outward-facing acts. "
    "choices e.g. [\"yes\",\"no\"]. Returns {status, answer}; open after wait_s: call again with question_id; "
    "expired: nobody answered, so do NOT do it."))
async def mempalace_ask_human(palace: Palace, /, question: str | None = None, to: str = "human:*",
                              choices: list[str] | None = None, timeout_s: int = 1800, wait_s: int = 300,
                              correlation_id: str | None = None, question_id: str | None = None) -> Result:
    if question_id is not None:
        return await palace.daemon.call("ask", question_id=question_id, wait_s=max(0, int(wait_s)))
    if not question:
        raise ApiError("question is required (or question_id, to keep waiting for one asked before)",
                       code="invalid_argument")
    return await palace.daemon.call("ask", **drop_none(
        from_agent=palace.speaks_as("from_agent", None), to=to, body=question, choices=choices,
        timeout_s=timeout_s, wait_s=max(0, int(wait_s)), correlation_id=correlation_id))


@tool("people", returns={"questions": "array<object>", "count": "integer"}, description=(
    "Questions to people with their state (open, answered, expired), newest first; to: human:NAME "
    "(includes those to human:*)."))
async def mempalace_questions(palace: Palace, /, to: str | None = None, status: str | None = None,
                              limit: int = 20) -> Result:
    return await palace.daemon.call("questions", **drop_none(to=to, status=status, limit=limit))
