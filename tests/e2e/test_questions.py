"""Questions to a person against real daemons: an agent asks and waits (pushed, not polled), a
person answers from any daemon that holds their id, the first valid answer counts on every
replica, silence is exit 2 and never a yes, and nobody answers as a person they are not."""

from __future__ import annotations

import json
import subprocess

from tests.fleet import ctl_json, peer_id, wait_converged, wait_until
from tests.helpers import PYTHON, run_ctl


def ask_in_background(home, *args):
    """``palacectl ask`` as a process of its own (it blocks until answered or timed out)."""
    return subprocess.Popen([PYTHON, "-m", "palacectl", "--home", str(home), "ask", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)


def open_questions(home, *flags):
    return ctl_json(home, "questions", "--status", "open", *flags)["questions"]


def test_an_agent_waits_for_a_persons_answer_and_gets_it_on_stdout(daemon):
    home = daemon.home
    asking = ask_in_background(home, "May I drop the orders table?", "--agent", "mac-claude", "--to", "human:ana",
                               "--choices", "yes,no", "--timeout", "2m")
    [question] = wait_until(lambda: open_questions(home, "--to", "human:ana"), "the question to show")
    assert question["question"] == "May I drop the orders table?" and question["choices"] == ["yes", "no"]
    assert question["asked_by"] == "mac-claude" and question["to"] == "human:ana"
    inbox = ctl_json(home, "inbox", "--agent", "human:ana")
    assert [e["id"] for e in inbox["events"]] == [question["question_id"]]
    answered = run_ctl(home, "answer", question["question_id"], "YES", "--as", "human:ana")
    assert answered.returncode == 0 and answered.stdout.strip() == f"answered {question['question_id']}: yes", answered
    out, err = asking.communicate(timeout=30)
    assert asking.returncode == 0 and out.decode().strip() == "yes", err
    settled = ctl_json(home, "questions", "--to", "human:ana")["questions"][0]
    assert settled["status"] == "answered" and settled["answer"]["by"] == "human:ana"
    again = run_ctl(home, "answer", question["question_id"], "no", "--as", "human:ana")
    assert again.returncode == 1 and "already answered by human:ana" in again.stderr


def test_the_founders_first_answer_just_works_and_a_question_to_anyone_says_how(daemon):
    """Issue 47 §1.2: on the daemon holding the palace CA, before any person's id exists, `answer ID
    yes` (as docs/questions.md prints it) answers as the person asked; a question to anyone asks
    for --as human:NAME, saying the first answer grants it here (not `agent transfer`)."""
    home = daemon.home
    ctl_json(home, "init", "--palace-name", "shop", "--daemon-name", "mac")
    anyone = ctl_json(home, "ask", "Anyone there?", "--agent", "bot", "--to", "human:*", "--choices", "yes,no",
                      "--no-wait")
    refused = run_ctl(home, "answer", anyone["question_id"], "yes")
    assert refused.returncode == 1 and refused.stderr.count("\n") == 1, refused
    assert "--as human:NAME (this daemon holds the palace CA" in refused.stderr and "transfer" not in refused.stderr
    asked = ctl_json(home, "ask", "May I?", "--agent", "bot", "--to", "human:ana", "--choices", "yes,no", "--no-wait")
    answered = run_ctl(home, "answer", asked["question_id"], "yes")
    assert answered.returncode == 0, answered
    state = ctl_json(home, "questions", "--to", "human:ana")["questions"][0]
    assert (state["status"], state["answer"]["by"]) == ("answered", "human:ana")
    # Now this daemon holds one person: the answer to anyone is theirs.
    assert run_ctl(home, "answer", anyone["question_id"], "no").returncode == 0


def test_silence_is_exit_2_and_never_a_yes(daemon):
    result = run_ctl(daemon.home, "ask", "Deploy to production?", "--agent", "bot", "--to", "human:ops",
                     "--choices", "yes,no", "--timeout", "1s")
    assert result.returncode == 2 and result.stdout == "", result
    assert "no answer from human:ops" in result.stderr and "treat it as a no" in result.stderr
    [expired] = ctl_json(daemon.home, "questions", "--status", "expired")["questions"]
    late = run_ctl(daemon.home, "answer", expired["question_id"], "yes", "--as", "human:ops")
    assert late.returncode == 1 and "expired" in late.stderr


def test_bad_questions_and_answers_are_refused_in_one_line(daemon):
    home = daemon.home
    for args, words in [
        (("--to", "linux-codex"), "a question goes to a person"),
        (("--to", "human:ana", "--choices", "yes"), "offer 2 to 12"),
        (("--to", "human:ana", "--timeout", "forever"), "--timeout"),
        (("--to", "human:ana", "--choices", "a,b", "--text"), "exclude each other"),
    ]:
        result = run_ctl(home, "ask", "?", "--agent", "bot", *args)
        assert result.returncode in (1, 64) and words in result.stderr and "Traceback" not in result.stderr, result
    posed = ctl_json(home, "ask", "Which colour?", "--agent", "bot", "--to", "human:ana", "--choices", "red,blue",
                     "--no-wait")
    wrong = run_ctl(home, "answer", posed["question_id"], "green", "--as", "human:ana")
    assert wrong.returncode == 1 and "not one of the choices: red, blue" in wrong.stderr
    someone_else = run_ctl(home, "answer", posed["question_id"], "red", "--as", "human:bob")
    assert someone_else.returncode == 1 and "for human:ana, not human:bob" in someone_else.stderr
    not_a_question = ctl_json(home, "append", "--type", "note", "--stream", "s", "--room", "r", "--from-agent", "bot",
                              "--body", "hi")
    refused = run_ctl(home, "answer", not_a_question["id"], "yes", "--as", "human:ana")
    assert refused.returncode == 1 and "not a question" in refused.stderr
    forged = run_ctl(home, "append", "--type", "question.answer", "--stream", "s", "--room", "r",
                     "--from-agent", "human:ana", "--body", "yes")
    assert forged.returncode == 1 and "reserved" in forged.stderr
    asked_by_a_person = run_ctl(home, "ask", "?", "--agent", "human:ana", "--to", "human:bob", "--no-wait")
    assert asked_by_a_person.returncode == 1 and "asked by an agent" in asked_by_a_person.stderr


def test_a_question_asked_on_one_daemon_is_answered_by_the_person_on_another(fleet):
    """The person's id is held by the palace owner's daemon (alpha); an agent on beta asks and
    waits; the answer written on alpha reaches beta and ends the wait; beta cannot answer as ana."""
    alpha = fleet.found("alpha")
    beta = fleet.join("beta")
    asking = ask_in_background(beta.home, "Merge the release branch?", "--agent", "beta-bot", "--to", "human:*",
                               "--choices", "merge,wait", "--timeout", "2m", "--correlation-id", "task-7")
    [question] = wait_until(lambda: open_questions(alpha.home, "--to", "human:ana"), "the question on alpha")
    assert question["correlation_id"] == "task-7"
    on_beta = run_ctl(beta.home, "answer", question["question_id"], "merge", "--as", "human:ana")
    assert on_beta.returncode == 1 and "not held by this daemon" in on_beta.stderr, on_beta
    answered = json.loads(run_ctl(alpha.home, "answer", question["question_id"], "wait", "--as", "human:ana",
                                  "--json").stdout)
    assert answered["won"] is True and answered["question"]["answer"]["text"] == "wait"
    out, err = asking.communicate(timeout=30)
    assert asking.returncode == 0 and out.decode().strip() == "wait", err
    wait_converged(alpha, beta)
    for daemon in (alpha, beta):
        [state] = ctl_json(daemon.home, "questions")["questions"]
        assert state["status"] == "answered" and state["answer"]["by"] == "human:ana" and state["flagged"] == []
    # The owner moves ana's id to beta: from then on ana answers there, and alpha cannot.
    assert run_ctl(alpha.home, "agent", "transfer", "human:ana", "--to", peer_id(beta.home)).returncode == 0
    wait_converged(alpha, beta)
    second = ctl_json(alpha.home, "ask", "Tag it?", "--agent", "alpha-bot", "--to", "human:ana", "--no-wait")
    wait_converged(alpha, beta)
    assert run_ctl(alpha.home, "answer", second["question_id"], "yes", "--as", "human:ana").returncode == 1
    on_beta = run_ctl(beta.home, "answer", second["question_id"], "yes")  # the one person beta holds
    assert on_beta.returncode == 0, on_beta


def test_a_question_to_anyone_is_in_every_persons_inbox(daemon):
    posed = ctl_json(daemon.home, "ask", "Who can review PR 12?", "--agent", "bot", "--to", "human:*", "--no-wait")
    for person in ("human:ana", "human:bob"):
        assert [e["id"] for e in ctl_json(daemon.home, "inbox", "--agent", person)["events"]] == [posed["question_id"]]
    assert ctl_json(daemon.home, "inbox", "--agent", "linux-codex")["events"] == []
