"""palacectl's questions to a person: ``ask`` (waits for the answer), ``answer``, ``questions``.

Owns: the command lines over the daemon's ``ask``, ``answer`` and ``questions`` operations
(proto/PROTOCOL.md, "Questions"), and their exit codes: ``ask`` exits 0 with the answer on stdout,
2 when nobody answered in time (never a yes by silence); ``answer`` exits 0 when its answer is the
one that counts and 1 when another got there first. The root registers what ``COMMANDS`` and ``GROUPS`` name.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Optional

import typer

from palace_proto.errors import ValidationError
from palace_proto.identity import is_human
from palace_proto.questions import ANYONE, check_timeout
from palace_proto.stamps import duration_seconds

from ...cli.common import JsonOpt, UsageProblem, call_daemon, decode_utf8, read_input
from ...output import EXIT_FAILED, EXIT_IDLE, emit, note, write_stdout

__all__ = ["COMMANDS", "GROUPS", "addressees", "answer", "ask", "questions"]


def _timeout_s(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return check_timeout(duration_seconds(text, field="--timeout"))
    except ValidationError as exc:
        raise UsageProblem(f"--timeout {text!r}: {exc.message}") from None


def _choices(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [c.strip() for c in text.split(",")]


def ask(
    question: Annotated[str, typer.Argument(help="The question, or - to read it from stdin.")],
    agent: Annotated[str, typer.Option("--agent", help="Your agent id (who asks).")],
    to: Annotated[str, typer.Option("--to", help="human:NAME, or human:* for anyone.")],
    choices: Annotated[Optional[str], typer.Option(
        "--choices", help="Comma-separated choices, e.g. yes,no (default: a free-text answer).")] = None,
    text: Annotated[bool, typer.Option("--text", help="A free-text answer (the default without --choices).")] = False,
    timeout: Annotated[Optional[str], typer.Option("--timeout", help="How long to wait: 90s, 30m, 2h, 1d (default 30m).")] = None,
    correlation_id: Annotated[Optional[str], typer.Option("--correlation-id", help="The task (or thread) it is about.")] = None,
    stream: Annotated[Optional[str], typer.Option("--stream", help="Default: questions.")] = None,
    room: Annotated[Optional[str], typer.Option("--room", help="Default: general.")] = None,
    no_wait: Annotated[bool, typer.Option("--no-wait", help="Ask and return at once with the question's id.")] = False,
    json_: JsonOpt = False,
) -> None:
    """Ask a person and wait for the answer: exit 0 with the answer on stdout, 2 if nobody answered in time.

    Silence is never a yes: on exit 2, do not do what you asked about."""
    if text and choices is not None:
        raise UsageProblem("--text and --choices exclude each other (a free-text answer, or one of the choices)")
    body = decode_utf8(read_input("-", "the question"), "the question") if question == "-" else question
    result = call_daemon("ask", from_agent=agent, to=to, body=body, choices=_choices(choices),
                         timeout_s=_timeout_s(timeout), correlation_id=correlation_id, stream=stream, room=room,
                         wait=False if no_wait else None)
    if no_wait:
        emit(result, json_, result["question_id"])
        return
    if result["status"] == "answered":
        emit(result, json_, result["answer"]["text"])
        return
    if not emit(result, json_):
        note(f"no answer from {result['to']} by {result['expires_at']} (question {result['question_id']}): "
             "treat it as a no")
    raise typer.Exit(EXIT_IDLE)


def answer(
    event_id: Annotated[str, typer.Argument(help="The question's event id.")],
    text: Annotated[str, typer.Argument(help="Your answer: one of its choices, or any text.")],
    as_: Annotated[Optional[str], typer.Option(
        "--as", help="Who answers, human:NAME (default: the one person this daemon holds).")] = None,
    grant: Annotated[Optional[str], typer.Option(
        "--grant", help="With allow, on an approval: how far it reaches — call (default), task, agent or project: "
                        "later requests of exactly its shape run without asking.")] = None,
    for_: Annotated[Optional[str], typer.Option(
        "--for", help="How long a grant lasts (30m, 8h, 2d; default 8h, at most 7d).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Answer a question as a person; exit 1 if another answer counted first."""
    for_s = None
    if for_ is not None:
        try:
            for_s = duration_seconds(for_, field="--for")
        except ValidationError as exc:
            raise UsageProblem(f"--for {for_!r}: {exc.message}") from None
    result = call_daemon("answer", event_id=event_id, text=text, grant=grant, for_s=for_s, **{"as": as_})
    state = result["question"]
    won = result["won"]
    line = (f"answered {event_id}: {state['answer']['text']}" if won else
            f"another answer counted first: {state['answer']['by']} said {state['answer']['text']!r}"
            if state.get("answer") else "your answer was written but does not count: " +
            "; ".join(f["why"] for f in state["flagged"] if f["event_id"] == result["answer"]["id"]))
    if won and grant not in (None, "call"):
        line += f" — for this {grant}, for {for_ or '8h'}, every request of the same shape (`palacectl grant list`)"
    emit(result, json_, line)
    if not won:
        raise typer.Exit(EXIT_FAILED)


def _question_line(q: dict[str, Any]) -> str:
    answer = q.get("answer")
    tail = f"{answer['by']}: {answer['text']}" if answer else (
        "choices " + "/".join(q["choices"]) if q.get("choices") else "free text")
    text = " ".join(str(q.get("question") or "").split())
    where = f" on {q['machine']}" if q.get("machine") else ""
    return f"{q['question_id']}\t{q['status']}\t{q['asked_by']}{where} → {q['to']}\t{text[:120]}\t{tail}"


def questions(
    to: Annotated[Optional[str], typer.Option(
        "--to", help="Questions to this person (human:NAME; includes those to human:*).")] = None,
    status: Annotated[Optional[str], typer.Option("--status", help="open, answered or expired (default: all).")] = None,
    limit: Annotated[Optional[int], typer.Option("--limit", help="At most this many (1-200; default 50).")] = None,
    json_: JsonOpt = False,
) -> None:
    """Questions to people, newest first, with their answers."""
    result = call_daemon("questions", to=to, status=status, limit=limit)
    if emit(result, json_):
        return
    for q in result["questions"]:
        write_stdout(_question_line(q) + "\n")


def addressees(agent: str) -> list[str]:
    """Who else a watch of ``agent`` wakes for (``Feature.watch_also``): a person is woken by a
    question to anyone (``human:*``) too."""
    return [ANYONE] if is_human(agent) else []


grant_app = typer.Typer(help="A person's grants: allows that reach past one call (answer allow --grant).",
                        no_args_is_help=True)


def grant_line(g: dict[str, Any]) -> str:
    """One grant in one line: what it covers, how wide, who gave it, until when."""
    scope = {"task": f"task {g['task']}", "agent": f"agent {g['agent']}",
             "project": f"project {g['project']}"}.get(g["scope"], g["scope"])
    shape = " ".join(str(g["shape"]).split())
    return f"{g['answer_id']}\t{shape[:120]}\tfor {scope}\tby {g['by']}\tuntil {g['until']}"


@grant_app.command("list")
def grant_list(json_: JsonOpt = False) -> None:
    """The grants in force: each lets requests of exactly its shape run without asking."""
    result = call_daemon("grants")
    if emit(result, json_):
        return
    if not result["grants"]:
        note("no grants in force")
    for g in result["grants"]:
        write_stdout(grant_line(g) + "\n")


@grant_app.command("revoke")
def grant_revoke(
    answer_id: Annotated[str, typer.Argument(help="The grant's id: the answer that gave it (`grant list`).")],
    as_: Annotated[Optional[str], typer.Option(
        "--as", help="Who revokes, human:NAME (default: the one person this daemon holds).")] = None,
    json_: JsonOpt = False,
) -> None:
    """End a grant now, on every machine: its requests are asked again."""
    result = call_daemon("revoke_grant", answer_id=answer_id, **{"as": as_})
    emit(result, json_, f"revoked: {grant_line(result['revoked'])}")


COMMANDS: Final = {"ask": ask, "answer": answer, "questions": questions}
GROUPS: Final[dict[str, typer.Typer]] = {"grant": grant_app}
