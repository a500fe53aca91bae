"""A question to a person, put to them in the harness they sit at (palacectl/features/questions/elicit.py).

Guards issue 47 §3.3: a ``palacectl mcp`` whose client declared MCP elicitation puts each open
question to a person this daemon holds to the client as a form, and the person's answer is written
by this daemon as that person (never by the model: the form is a request to the client, answered
from its UI); a decline leaves the question open and it is not put again; a form whose question is
answered elsewhere is withdrawn; a client without the capability is sent nothing.

The clients here are this test speaking MCP's JSON-RPC over a real ``palacectl mcp``'s stdio,
against a real palaced.
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
from typing import Any

from palacectl.features.questions.elicit import answerers, form, form_elicitation
from tests.fleet import ctl_json, wait_until
from tests.helpers import PYTHON, run_ctl

# Why 30 s: every message here comes in well under a second; the bound only ends a hang.
WAIT_S = 30.0


class Harness:
    """An MCP client over a ``palacectl mcp`` process: what it sends, and what it was sent."""

    def __init__(self, home: Any, *, elicitation: dict[str, Any] | None) -> None:
        self.proc = subprocess.Popen([PYTHON, "-m", "palacectl", "mcp", "--agent", "mac-claude", "--home", str(home)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.sent: queue.Queue[dict[str, Any]] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        capabilities = {} if elicitation is None else {"elicitation": elicitation}
        self.send({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-11-25", "capabilities": capabilities, "clientInfo": {"name": "t", "version": "1"}}})
        assert self.next()["result"]["serverInfo"]["name"] == "palace"
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})
        self.send({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
        assert self.next()["result"]["tools"]

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.sent.put(json.loads(line))

    def send(self, message: dict[str, Any]) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(message).encode() + b"\n")
        self.proc.stdin.flush()

    def next(self, timeout: float = WAIT_S) -> dict[str, Any]:
        try:
            return self.sent.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"palacectl mcp sent nothing in {timeout}s") from None

    def form(self) -> dict[str, Any]:
        """The next elicitation request (nothing else comes unasked)."""
        message = self.next()
        assert message.get("method") == "elicitation/create", message
        return message

    def close(self) -> str:
        """Stop the server; its stderr."""
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=WAIT_S)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
        assert self.proc.stderr is not None
        err = self.proc.stderr.read().decode()
        for pipe in (self.proc.stdout, self.proc.stderr):
            if pipe is not None:
                pipe.close()
        return err


def ask(home: Any, question: str, to: str, *choices: str) -> str:
    flags = ("--choices", ",".join(choices)) if choices else ()
    return ctl_json(home, "ask", question, "--agent", "bot", "--to", to, *flags, "--no-wait")["question_id"]


def state(home: Any, question_id: str) -> dict[str, Any]:
    return next(q for q in ctl_json(home, "questions", "--limit", "200")["questions"] if q["question_id"] == question_id)


def test_a_question_to_a_person_held_here_is_answered_in_the_harness_as_them_by_this_daemon(daemon):
    home = daemon.home
    ctl_json(home, "init", "--palace-name", "shop", "--daemon-name", "mac")
    # The founder's first answer as ana makes ana's id this daemon's (issue 47 §1.2).
    assert run_ctl(home, "answer", ask(home, "Hello?", "human:ana", "yes", "no"), "yes").returncode == 0
    harness = Harness(home, elicitation={})
    plain = Harness(home, elicitation=None)
    try:
        # A question asked now is put as a form: who asks, the question, its choices.
        first = ask(home, "May I drop the orders table?", "human:ana", "yes", "no")
        put = harness.form()
        assert put["params"]["message"].startswith(f"bot asks human:ana (palace question {first}):\n\nMay I drop the "
                                                   "orders table?")
        assert put["params"]["requestedSchema"] == {"type": "object", "required": ["answer"], "properties": {
            "answer": {"type": "string", "title": "Answer", "enum": ["yes", "no"]}}}
        harness.send({"jsonrpc": "2.0", "id": put["id"], "result": {"action": "accept", "content": {"answer": "no"}}})
        wait_until(lambda: state(home, first)["status"] == "answered", "the form's answer to count")
        answered = state(home, first)
        assert (answered["answer"]["by"], answered["answer"]["text"], answered["flagged"]) == ("human:ana", "no", [])
        # Written and signed by this daemon, as ana.
        [event] = [e for e in ctl_json(home, "list", "--type", "question.answer", "--limit", "50")["events"]
                   if e["id"] == answered["answer"]["event_id"]]
        assert event["from_agent"] == "human:ana" and event["origin"] == ctl_json(home, "status")["origin"]

        # A question to a person this daemon does not hold is not put; a declined one stays open and
        # is not put again: the next form is the next question's.
        ask(home, "Ship it?", "human:bob", "yes", "no")
        declined = ask(home, "Rename the repo?", "human:ana")
        put = harness.form()
        assert f"(palace question {declined})" in put["params"]["message"]
        assert put["params"]["requestedSchema"]["properties"]["answer"] == {"type": "string", "title": "Answer",
                                                                            "minLength": 1}
        harness.send({"jsonrpc": "2.0", "id": put["id"], "result": {"action": "decline"}})

        # A form whose question is answered elsewhere meanwhile is withdrawn.
        elsewhere = ask(home, "Tag the release?", "human:ana", "yes", "no")
        put = harness.form()
        assert f"(palace question {elsewhere})" in put["params"]["message"]
        assert run_ctl(home, "answer", elsewhere, "yes").returncode == 0
        withdrawn = harness.next()
        assert withdrawn == {"jsonrpc": "2.0", "method": "notifications/cancelled",
                             "params": {"requestId": put["id"], "reason": "no longer needed"}}
        assert state(home, declined)["status"] == "open"

        # A question to anyone: put as the one person held here.
        anyone = ask(home, "Anyone for lunch?", "human:*", "yes", "no")
        put = harness.form()
        assert f"(palace question {anyone})" in put["params"]["message"] and "bot asks anyone" in put["params"]["message"]
        harness.send({"jsonrpc": "2.0", "id": put["id"], "result": {"action": "accept", "content": {"answer": "yes"}}})
        wait_until(lambda: state(home, anyone)["status"] == "answered", "the answer to anyone")
        assert state(home, anyone)["answer"]["by"] == "human:ana"
    finally:
        harness_err = harness.close()
        plain_err = plain.close()
    assert "Traceback" not in harness_err, harness_err
    # The client without the capability was sent nothing it did not ask for.
    assert plain.sent.empty(), list(plain.sent.queue)
    assert plain_err == ""


def test_open_questions_are_put_when_the_session_starts_and_a_form_the_client_refuses_changes_nothing(daemon):
    """On a daemon in no palace, its user is every person: a question to any named person is
    theirs; one to anyone is not put (whom would it answer as?)."""
    home = daemon.home
    waiting = ask(home, "Deploy?", "human:ops", "yes", "no")
    ask(home, "Anyone?", "human:*", "yes", "no")
    harness = Harness(home, elicitation={"form": {}})
    try:
        put = harness.form()
        assert f"(palace question {waiting})" in put["params"]["message"]
        harness.send({"jsonrpc": "2.0", "id": put["id"], "error": {"code": -32601, "message": "Method not found"}})
        later = ask(home, "Roll back?", "human:ops", "yes", "no")
        put = harness.form()
        assert f"(palace question {later})" in put["params"]["message"]
        harness.send({"jsonrpc": "2.0", "id": put["id"], "result": {"action": "accept",
                                                                    "content": {"answer": "maybe"}}})
        # One form at a time: the next comes once the answer above was tried (and refused).
        third = ask(home, "Page someone?", "human:ops", "yes", "no")
        assert f"(palace question {third})" in harness.form()["params"]["message"]
    finally:
        err = harness.close()
    assert state(home, waiting)["status"] == "open" and state(home, later)["status"] == "open"
    assert "the client did not show question" in err and "not one of the choices" in err, err


def test_a_url_only_client_gets_no_form_and_the_forms_are_primitive_as_mcp_requires(tmp_path):
    from palacectl.mcp_adapter import PalaceMCP

    server = PalaceMCP(tmp_path, "mac-claude")
    server.client_capabilities = {"elicitation": {}}
    assert server.services() == ["palacectl.features.questions.elicit:serve_elicitation"]
    read_only = PalaceMCP(tmp_path, "mac-claude", read_only=True)  # an answer is a write
    read_only.client_capabilities = {"elicitation": {}}
    assert read_only.services() == [] and PalaceMCP(tmp_path, "mac-claude").services() == []
    assert form_elicitation({"elicitation": {}}) and form_elicitation({"elicitation": {"form": {}, "url": {}}})
    assert not form_elicitation({"elicitation": {"url": {}}}) and not form_elicitation({})
    assert answerers("human:ana", ["human:ana"], True) == ["human:ana"]
    assert answerers("human:bob", ["human:ana"], True) == []
    assert answerers("human:bob", [], False) == ["human:bob"]
    assert answerers("human:*", ["human:ana", "human:eve"], True) == ["human:ana", "human:eve"]
    assert answerers("human:*", [], False) == [] and answerers("linux-codex", [], False) == []
    several = form({"question_id": "evt_1", "asked_by": "bot", "to": "human:*", "question": "x" * 5000,
                    "choices": None, "expires_at": "2030-01-01T00:00:00Z"}, ["human:ana", "human:eve"])
    assert len(several["message"]) == 4000 and several["message"].endswith("…")
    schema = several["requestedSchema"]
    assert schema["required"] == ["answer", "as"]
    assert schema["properties"]["as"] == {"type": "string", "title": "Answer as", "enum": ["human:ana", "human:eve"]}
    # MCP's form schemas: a flat object of primitive properties.
    assert all(p["type"] in ("string", "number", "integer", "boolean") for p in schema["properties"].values())
