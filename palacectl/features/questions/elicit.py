"""A question to a person, put to them in the harness they sit at: MCP elicitation.

Owns: ``serve_elicitation``, the questions feature's service for an MCP session whose client
declared form elicitation (``Feature.mcp_services``; MCP 2025-06-18 and 2025-11-25,
``client/elicitation``). It follows the questions asked on this daemon (the daemon's pushes: no
polling) and puts each open one addressed to a person this daemon holds to the client as a form
(``elicitation/create``: who asks, the question, its choices as an enum); the person's ``accept``
is answered through the daemon's ``answer`` as that person, so the daemon writes and signs it as it
does `palacectl answer`'s. The form goes to the client's UI and its answer comes back from there:
the model sees neither, and no tool of the session writes an answer.

Rules:

* Each question is put once per session. ``decline`` or ``cancel`` leave it open for every other
  surface (the CLI, the dashboard, another harness); it is not put again in this session.
* One form at a time; the questions wait their turn in a bounded queue (``MAX_QUEUED``: past it,
  a question is not put here, and stderr says so).
* A form whose question is answered elsewhere, or expires, meanwhile is withdrawn
  (``notifications/cancelled``).
* Whom this daemon holds is asked of it for each question (``agents``: a person's id held here).
  A daemon in no palace has no registry: its user is the only person there is, so a question to
  any named person is theirs. A question to anyone (``human:*``) is put when the daemon holds a
  person, the form asking which one when it holds several.
* The daemon restarting: the service reconnects and resumes from its cursor. What the daemon
  sends that is not a message ends the service (the tools go on), as it ends a watch.

Imports trio: it runs only in the asynchronous server. Must not import typer.
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Mapping
from typing import Any, Final, Protocol

import trio

from palace_proto.errors import ApiError
from palace_proto.identity import is_human
from palace_proto.questions import ANYONE, ASK

from ...client import DaemonUnreachable
from ...mcp_server import McpError

__all__ = ["MAX_QUEUED", "answerers", "form", "form_elicitation", "serve_elicitation"]

LOGGER: Final = logging.getLogger("palacectl.mcp.elicit")
# Why 32: questions to one person pile up only when nobody answers; past this many waiting their
# turn here, the rest are answered elsewhere (each one dropped says so once).
MAX_QUEUED: Final = 32
# Why 4096: the question ids this session has put (each is put once), kept newest last; older
# ones are forgotten (the subscription never brings a question twice).
MAX_REMEMBERED: Final = 4096
# Why 200: the open questions read when the session starts (the daemon's own bound on a listing).
_OPEN_AT_START: Final = 200
# Why 100: the questions one push of the subscription carries at most.
_PAGE: Final = 100
# Why 1 s, doubling to 10 s: how soon the service tries again while the daemon is away (a restart
# takes about a second; a daemon that is down costs a connect attempt every 10 s).
RETRY_S: Final = 1.0
MAX_RETRY_S: Final = 10.0
# Why 4000 characters: the most of a question a form shows; the rest is in `palacectl questions`.
MAX_MESSAGE_CHARS: Final = 4000


class Server(Protocol):
    """What the service needs of the MCP server: its daemon, the client's capabilities, and a
    request to the client (``mcp_server.StdioServer.request_client``)."""

    daemon: Any
    client_capabilities: dict[str, Any]

    async def request_client(self, method: str, params: dict[str, Any]) -> dict[str, Any]: ...


def form_elicitation(capabilities: Mapping[str, Any]) -> bool:
    """Whether the client takes form elicitation: it declared ``elicitation`` with ``form``, or
    empty (2025-11-25: an empty object means form; 2025-06-18 had only forms)."""
    declared = capabilities.get("elicitation")
    return isinstance(declared, dict) and (not declared or "form" in declared)


def answerers(to: Any, held: list[str], in_palace: bool) -> list[str]:
    """The people who may answer here a question to ``to``: the person asked if this daemon holds
    them (or belongs to no palace: its user is every person), the people it holds for a question
    to anyone; none otherwise."""
    if to == ANYONE:
        return list(held)
    if not isinstance(to, str) or not is_human(to):
        return []
    return [to] if to in held or not in_palace else []


def form(state: Mapping[str, Any], people: list[str]) -> dict[str, Any]:
    """The ``elicitation/create`` parameters putting question ``state`` (the daemon's view of it)
    to one of ``people``: its text and asker, its choices as an enum (a free-text answer else),
    and which person answers when several may."""
    to = state.get("to")
    head = f"{state.get('asked_by')} asks {'anyone' if to == ANYONE else to} (palace question {state.get('question_id')})"
    expires = state.get("expires_at")
    message = f"{head}:\n\n{state.get('question') or ''}" + (f"\n\nOpen until {expires}." if expires else "")
    if len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS - 1] + "…"
    answer: dict[str, Any] = {"type": "string", "title": "Answer"}
    choices = state.get("choices")
    if isinstance(choices, list) and choices:
        answer["enum"] = [str(c) for c in choices]
    else:
        answer["minLength"] = 1
    properties: dict[str, Any] = {"answer": answer}
    if len(people) > 1:
        properties["as"] = {"type": "string", "title": "Answer as", "enum": list(people)}
    return {"message": message, "requestedSchema": {"type": "object", "properties": properties,
                                                    "required": list(properties)}}


async def serve_elicitation(server: Server) -> None:
    """Put the questions of this daemon's people to the person at the client, for the session
    (the module docstring's rules); returns at once for a client without form elicitation."""
    if not form_elicitation(server.client_capabilities):
        return
    elicitor = _Elicitor(server)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(elicitor.follow)
        await elicitor.put_each()


class _Elicitor:
    def __init__(self, server: Server) -> None:
        self.server = server
        self.daemon = server.daemon
        self._send, self._receive = trio.open_memory_channel[str](MAX_QUEUED)
        self._seen: collections.OrderedDict[str, None] = collections.OrderedDict()

    def __repr__(self) -> str:
        return f"<elicitation seen={len(self._seen)} queued={self._send.statistics().current_buffer_used}>"

    # -- which questions, and whose ---------------------------------------------------------------

    async def people(self) -> tuple[list[str], bool]:
        """(the people this daemon holds, whether it belongs to a palace), asked of it now."""
        status = await self.daemon.call("status")
        listing = await self.daemon.call("agents")
        held = sorted(a["agent"] for a in listing.get("agents", ())
                      if a.get("kind") == "human" and a.get("here") and not a.get("retired"))
        return held, status.get("palace") is not None

    async def offer(self, questions: list[Mapping[str, Any]]) -> None:
        """Queue each question (an event, or the daemon's view of one: its id and addressee) this
        daemon's people may answer and this session has not put yet."""
        fresh = [q for q in questions if (q.get("id") or q.get("question_id")) not in self._seen]
        if not fresh:
            return
        held, in_palace = await self.people()
        for question in fresh:
            question_id = str(question.get("id") or question.get("question_id"))
            if not answerers(question.get("to_agent", question.get("to")), held, in_palace):
                continue
            self._seen[question_id] = None
            if len(self._seen) > MAX_REMEMBERED:
                self._seen.popitem(last=False)
            try:
                self._send.send_nowait(question_id)
            except trio.WouldBlock:
                LOGGER.warning("question %s is not put here: %d questions wait their turn already (answer it with "
                               "`palacectl answer`)", question_id, MAX_QUEUED)

    async def follow(self) -> None:
        """Offer the open questions, then each new one as the daemon pushes it; reconnect (and
        resume from the cursor) when the daemon goes away."""
        cursor: str | None = None
        listed = False
        delay = RETRY_S
        while True:
            try:
                args: dict[str, Any] = {"types": [ASK], "limit": _PAGE}
                args.update({"start": "cursor", "since_event_id": cursor} if cursor else {"start": "tip"})
                async with self.daemon.subscribe(**args) as subscription:
                    cursor = subscription.started.get("cursor") or cursor
                    delay = RETRY_S
                    if not listed:  # after subscribing: a question asked in between comes twice, put once
                        opened = await self.daemon.call("questions", status="open", limit=_OPEN_AT_START)
                        await self.offer(list(reversed(opened.get("questions", ()))))
                        listed = True
                    while True:
                        push = await subscription.next_push()
                        cursor = push.get("cursor") or cursor
                        if push.get("push") == "batch":
                            await self.offer([e for e in push.get("events", ()) if e.get("type") == ASK])
            except DaemonUnreachable:
                pass
            except ApiError as exc:
                if exc.code != "not_found":
                    raise
                cursor, listed = None, False  # the cursor is not in this log (a restore): start over
            await trio.sleep(delay)
            delay = min(delay * 2, MAX_RETRY_S)

    # -- putting one ---------------------------------------------------------------------------

    async def put_each(self) -> None:
        async for question_id in self._receive:
            try:
                await self.put(question_id)
            except (ApiError, DaemonUnreachable) as exc:
                LOGGER.warning("question %s: %s", question_id, exc)

    async def put(self, question_id: str) -> None:
        """Put one question to the person at the client, if it is still open and theirs, and
        answer it as them when they accept."""
        state = await self.daemon.call("ask", question_id=question_id, wait=False)
        if state.get("status") != "open":
            return
        held, in_palace = await self.people()
        people = answerers(state.get("to"), held, in_palace)
        if not people:
            return
        reply = await self._ask_person(question_id, form(state, people))
        if reply is None or reply.get("action") != "accept":
            return  # declined, dismissed, or settled elsewhere: open for every other surface
        content = reply.get("content")
        content = content if isinstance(content, dict) else {}
        text = content.get("answer")
        person = content.get("as") if len(people) > 1 else people[0]
        if not isinstance(text, str) or not text.strip() or person not in people:
            LOGGER.warning("the answer to question %s from the form is not one (%r as %r): not written",
                           question_id, text, person)
            return
        result = await self.daemon.call("answer", event_id=question_id, text=text, **{"as": person})
        if not result.get("won"):
            LOGGER.warning("question %s: another answer counted first", question_id)

    async def _ask_person(self, question_id: str, params: dict[str, Any]) -> dict[str, Any] | None:
        """The client's answer to the form, or None when the question was settled elsewhere first
        (the form is then withdrawn) or the client refused the request."""
        reply: dict[str, Any] | None = None

        async def person(scope: trio.CancelScope) -> None:
            nonlocal reply
            try:
                reply = await self.server.request_client("elicitation/create", params)
            except McpError as exc:
                LOGGER.warning("the client did not show question %s: %s", question_id, exc.message)
            scope.cancel(reason="the person answered the form")

        async def settled(scope: trio.CancelScope) -> None:
            delay = RETRY_S
            while True:
                try:
                    state = await self.daemon.call("ask", question_id=question_id)  # returns once settled
                except (ApiError, DaemonUnreachable):
                    await trio.sleep(delay)  # the form stays up: the answer says what became of it
                    delay = min(delay * 2, MAX_RETRY_S)
                    continue
                if state.get("status") != "open":
                    scope.cancel(reason=f"the question is {state.get('status')}")
                    return

        async with trio.open_nursery() as nursery:
            nursery.start_soon(person, nursery.cancel_scope)
            nursery.start_soon(settled, nursery.cancel_scope)
        return reply
