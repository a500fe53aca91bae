"""Notifications out (issue 28, part 3), end to end: real daemons, and on loopback a webhook
receiver, an SMTP sink and a stand-in ``notify-send`` the tests start themselves."""

from __future__ import annotations

import base64
import email
import email.policy
import http.server
import json
import os
import socket
import stat
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fleet import api, append, ctl_json, peer_id, wait_converged, wait_until
from tests.helpers import PYTHON, run_ctl


class Receiver:
    """A webhook receiver on 127.0.0.1: records each POST (path, headers, JSON body); a path in
    ``fail_first`` answers 500 that many times first."""

    def __init__(self, fail_first: dict[str, int] | None = None) -> None:
        self.requests: list[dict[str, Any]] = []
        self.fail = dict(fail_first or {})
        receiver = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                failing = receiver.fail.get(self.path, 0) > 0
                if failing:
                    receiver.fail[self.path] -= 1
                receiver.requests.append({"path": self.path, "headers": dict(self.headers), "at": time.monotonic(),
                                          "json": json.loads(body), "raw": body, "failed": failing})
                self.send_response(500 if failing else 200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}{path}"

    def at(self, path: str) -> list[dict[str, Any]]:
        return [r for r in self.requests if r["path"] == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class SmtpSink:
    """Just enough of an SMTP server on 127.0.0.1 to take mail: EHLO, AUTH PLAIN, MAIL, RCPT, DATA."""

    def __init__(self) -> None:
        self.mails: list[dict[str, Any]] = []
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(8)
        self.listener.settimeout(0.2)
        self.port = self.listener.getsockname()[1]
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.listener.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                conn.settimeout(10)
                try:
                    self._session(conn)
                except OSError:
                    pass

    def _session(self, conn: socket.socket) -> None:
        reader = conn.makefile("rb")
        conn.sendall(b"220 sink ESMTP\r\n")
        mail: dict[str, Any] = {"rcpt": [], "auth": None}
        while line := reader.readline():
            command = line.decode("utf-8", "replace").strip()
            verb = command.split(" ", 1)[0].upper()
            if verb == "EHLO":
                conn.sendall(b"250-sink\r\n250-AUTH PLAIN\r\n250 8BITMIME\r\n")
            elif verb == "AUTH":
                mail["auth"] = base64.b64decode(command.split()[2]).split(b"\0")
                conn.sendall(b"235 ok\r\n")
            elif verb == "MAIL":
                mail["from"] = command
                conn.sendall(b"250 ok\r\n")
            elif verb == "RCPT":
                mail["rcpt"].append(command)
                conn.sendall(b"250 ok\r\n")
            elif verb == "DATA":
                conn.sendall(b"354 go on\r\n")
                data = b""
                while (chunk := reader.readline()) not in (b".\r\n", b""):
                    data += chunk
                mail["message"] = email.message_from_bytes(data, policy=email.policy.default)
                self.mails.append(dict(mail))
                conn.sendall(b"250 queued\r\n")
            elif verb == "QUIT":
                conn.sendall(b"221 bye\r\n")
                return
            else:
                conn.sendall(b"250 ok\r\n")

    def close(self) -> None:
        self._stop.set()
        self.thread.join(5)
        self.listener.close()


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


@pytest.fixture
def sink():
    s = SmtpSink()
    yield s
    s.close()


@pytest.fixture
def desktop(tmp_path, monkeypatch) -> Path:
    """A stand-in ``notify-send`` first on PATH (the daemons started after inherit it) that records
    its arguments, one JSON line per call; and a desktop session to find."""
    folder = tmp_path / "bin"
    folder.mkdir()
    record = tmp_path / "notify-send.jsonl"
    script = folder / "notify-send"
    script.write_text(f"#!{PYTHON}\nimport json, sys\n"
                      f"open({str(record)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/test-bus")
    return record


def configure(home: Path, text: str) -> Path:
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    (home / "config.toml").write_text(text)
    return home


def webhook(name: str, url: str, fmt: str = "generic") -> str:
    return f'[notify.channels.{name}]\nkind = "webhook"\nformat = "{fmt}"\nurl = "{url}"\n'


def notify_status(home: Path) -> dict[str, Any]:
    return api(home, "status")["notify"]


def test_every_channel_gets_one_grouped_message_without_the_redacted_thing(daemon_factory, short_tmp, receiver,
                                                                           sink, desktop):
    """Guards the payload shapes (generic, Slack, Discord, ntfy), the mail, the desktop command,
    grouping, the preview cut, and that a thing redacted before it went out is never sent."""
    home = configure(short_tmp / "solo", "\n".join([
        '[notify]\ngroup_window = "2s"\npreview_chars = 120\ntimeout = "5s"\n',
        '[notify.people.ana]\nchannels = ["generic", "slack", "discord", "ntfy", "mail", "desk"]\n',
        webhook("generic", receiver.url("/generic")), webhook("slack", receiver.url("/slack"), "slack"),
        webhook("discord", receiver.url("/discord"), "discord"),
        webhook("ntfy", receiver.url("/ntfy/palace-ana"), "ntfy"),
        f'[notify.channels.mail]\nkind = "email"\nhost = "127.0.0.1"\nport = {sink.port}\nstarttls = false\n'
        'username = "ana"\npassword_file = "smtp.pass"\nfrom = "palace@example.com"\nto = ["ana@example.com"]\n',
        '[notify.channels.desk]\nkind = "desktop"\n']))
    (home / "smtp.pass").write_text("s3cret-pw\n")
    (home / "smtp.pass").chmod(0o600)
    daemon = daemon_factory(home)
    secret = append(home, "the launch code is 0451", to_agent="human:ana", from_agent="agent-7")
    api(home, "redact", event_id=secret["id"], from_agent="agent-7")
    long = append(home, "please look at the build " + "L" * 600, to_agent="human:ana", from_agent="agent-7")
    api(home, "ask", to="human:ana", from_agent="agent-7", body="may I drop the orders table?",
                   choices=["yes", "no"], wait=False)
    wait_until(lambda: len(receiver.requests) >= 4 and sink.mails and desktop.exists(), "every channel to be used")
    # No second message can follow: the question, the last thing written, is in this one, and every
    # delivery of it is counted with nothing waiting or being retried.
    wait_until(lambda: (s := notify_status(home))["sent"] == 6 and s["pending"] == s["retrying"] == 0,
               "every delivery to be counted")

    paths = sorted(r["path"] for r in receiver.requests)
    assert paths == ["/discord", "/generic", "/ntfy/", "/slack"]  # one message each; ntfy JSON goes to the root
    assert all("0451" not in r["raw"].decode() for r in receiver.requests)
    (generic,) = receiver.at("/generic")
    body = generic["json"]
    assert body["person"] == "human:ana" and body["count"] == 2 and "2 things need you" in body["title"]
    by_kind = {t["kind"]: t for t in body["things"]}
    assert by_kind["message"]["event_id"] == long["id"]
    assert by_kind["question"]["preview"] == "may I drop the orders table?"
    assert len(by_kind["message"]["preview"]) == 120 and by_kind["message"]["preview"].endswith("…")
    assert by_kind["question"]["hint"].endswith(" yes|no")
    assert generic["headers"]["Content-Type"] == "application/json"
    assert set(receiver.at("/slack")[0]["json"]) == {"text", "unfurl_links", "unfurl_media"}
    discord = receiver.at("/discord")[0]["json"]
    assert discord["allowed_mentions"] == {"parse": []} and discord["flags"] == 4  # no pings, no embeds
    ntfy = receiver.at("/ntfy/")[0]["json"]
    assert ntfy["topic"] == "palace-ana" and ntfy["priority"] == 4 and "2 things need you" in ntfy["title"]
    assert ntfy["markdown"] is False

    (mail,) = sink.mails
    assert mail["auth"][1:] == [b"ana", b"s3cret-pw"]
    assert [r.lower() for r in mail["rcpt"]] == ["rcpt to:<ana@example.com>"]
    assert "2 things need you" in mail["message"]["Subject"]
    text = mail["message"].get_body().get_content()
    assert "may I drop the orders table?" in text and "0451" not in text

    (argv,) = [json.loads(line) for line in desktop.read_text().splitlines()]
    assert argv[:3] == ["--app-name=palace", "--urgency=critical", "--"]
    assert "2 things need you" in argv[3] and "0451" not in argv[4] and len(argv) == 5

    status = notify_status(home)
    assert status["sent"] == 6 and status["failed"] == 0 and status["withdrawn"] == 1 and status["pending"] == 0
    assert status["people"] == [{"person": "human:ana", "held": True,
                                 "channels": ["generic", "slack", "discord", "ntfy", "mail", "desk"]}]
    human = run_ctl(home, "status")
    assert "notify       6 channel(s), 6 sent, 0 failed, 0 dropped, 0 waiting" in human.stdout
    assert "s3cret-pw" not in daemon.log()


def test_a_failing_receiver_gets_the_message_again_after_a_back_off_and_the_rate_limit_holds(daemon_factory,
                                                                                               short_tmp):
    """Guards the retry (only the failed delivery, after the back-off) and the per-person rate: a
    second message for ana within the minute waits for its slot, which the pass that sends bob's
    message, written after it, shows (one pass takes what is due for everyone)."""
    receiver = Receiver(fail_first={"/flaky": 1})
    try:
        home = configure(short_tmp / "flaky", '[notify]\ngroup_window = 0\nrate_per_minute = 1\n'
                         '[notify.people.ana]\nchannels = ["flaky"]\n[notify.people.bob]\nchannels = ["steady"]\n'
                         + webhook("flaky", receiver.url("/flaky")) + webhook("steady", receiver.url("/steady")))
        daemon_factory(home)
        append(home, "first", to_agent="human:ana", from_agent="agent-7")
        wait_until(lambda: len(receiver.at("/flaky")) >= 2, "the retry")
        failed, succeeded = receiver.at("/flaky")
        assert failed["failed"] and not succeeded["failed"] and failed["json"] == succeeded["json"]
        assert succeeded["at"] - failed["at"] >= 0.9
        status = notify_status(home)
        assert status["retried"] == 1 and status["sent"] == 1 and status["failed"] == 0
        assert status["last_error"]["channel"] == "flaky" and "HTTP 500" in status["last_error"]["message"]
        append(home, "second", to_agent="human:ana", from_agent="agent-7")
        wait_until(lambda: notify_status(home)["pending"] == 1, "the second thing to wait")
        append(home, "for bob", to_agent="human:bob", from_agent="agent-7")
        wait_until(lambda: notify_status(home)["sent"] == 2, "bob's message")
        assert notify_status(home)["pending"] == 1  # one message per minute: ana's second waits for its slot
        assert len(receiver.at("/flaky")) == 2 and len(receiver.at("/steady")) == 1
    finally:
        receiver.close()


def test_notify_test_reports_each_channel(daemon_factory, short_tmp, receiver):
    """Guards `palacectl notify test`: one line per channel, exit 1 when one failed, --json, --person."""
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    dead = f"http://127.0.0.1:{closed.getsockname()[1]}/hook"
    closed.close()
    home = configure(short_tmp / "probe", '[notify.people.ana]\nchannels = ["good", "dead"]\n'
                     '[notify.people.bob]\nchannels = ["good"]\n'
                     + webhook("good", receiver.url("/good"), "slack") + webhook("dead", dead))
    daemon_factory(home)
    result = run_ctl(home, "notify", "test")
    assert result.returncode == 1, result
    lines = result.stdout.splitlines()
    assert lines[0] == "ok\thuman:ana\tgood (webhook: slack webhook to http://127.0.0.1)"
    assert lines[1].startswith("error\thuman:ana\tdead (webhook: generic webhook to http://127.0.0.1): cannot reach")
    assert lines[2].startswith("ok\thuman:bob\tgood") and len(lines) == 3
    assert "test notification" in receiver.at("/good")[0]["json"]["text"]
    only_bob = run_ctl(home, "notify", "test", "--person", "bob", "--json")
    assert only_bob.returncode == 0, only_bob
    document = only_bob.json()
    assert document["ok"] is True and document["count"] == 1 and document["results"][0]["person"] == "human:bob"
    nobody = run_ctl(home, "notify", "test", "--person", "human:carol")
    assert nobody.returncode == 1 and nobody.stderr.count("\n") == 1 and "human:carol has no [notify.people]" in nobody.stderr


def test_notify_test_without_notify_config_says_how_to_set_it_up(ctl):
    result = ctl("notify", "test")
    assert result.returncode == 1 and "no notifications are configured" in result.stderr
    assert result.stderr.count("\n") == 1 and result.stdout == ""
    assert ctl("status", "--json").json()["notify"] is None


def test_a_bad_notify_config_is_refused_in_one_line(short_tmp):
    home = configure(short_tmp / "bad", '[notify.channels.hook]\nkind = "webhook"\nurl = "https://x.example/h"\n'
                     'pasword = "hunter2"\n')
    result = subprocess.run([PYTHON, "-m", "palaced", "--home", str(home), "--no-mdns"], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == 1
    assert result.stderr == (f"palaced: {home / 'config.toml'}: unknown key notify.channels.hook.pasword "
                             "(known: format, kind, token_file, url)\n")


def told(receiver: Receiver, path: str, preview: str) -> list[dict[str, Any]]:
    """The messages received at ``path`` that tell of a thing previewed as ``preview``."""
    return [r["json"] for r in receiver.at(path) if any(t["preview"] == preview for t in r["json"]["things"])]


def counts_after_a_marker(receiver: Receiver, home: Path, person: str, path: str, sender: str) -> dict[str, Any]:
    """The notify counts of the daemon at ``home`` once a marker, a message to ``person`` (held
    there) written after all the test expects it to leave untold, has reached ``path``: its
    notifier follows the log in order, so by then it has offered whatever came before."""
    marker = f"marker from {sender}, message {len(receiver.requests)}"
    append(home, marker, to_agent=person, from_agent=sender)
    wait_until(lambda: told(receiver, path, marker), f"the marker to reach {path}")
    return notify_status(home)


def test_a_question_is_notified_once_by_the_daemon_holding_the_person(fleet, receiver):
    """Guards the one-per-palace rule: human:ana is held by beta, the question is written on alpha,
    both daemons configure ana: only beta tells her. A question to human:* is told by each daemon
    to the people it holds (bob on alpha, ana on beta), once each. What a daemon did not tell is
    shown by its counts after a later message that it did (``counts_after_a_marker``)."""
    config = ('[notify]\ngroup_window = 0\nrate_per_minute = 10\n[notify.people.ana]\nchannels = ["hook"]\n'
              '[notify.people.bob]\nchannels = ["hook"]\n')
    configure(fleet.home("alpha"), config + webhook("hook", receiver.url("/alpha")))
    configure(fleet.home("beta"), config + webhook("hook", receiver.url("/beta")))
    alpha = fleet.found("alpha")
    beta = fleet.join("beta")
    ctl_json(alpha.home, "agent", "register", "human:ana")
    ctl_json(alpha.home, "agent", "register", "human:bob")
    ctl_json(alpha.home, "agent", "transfer", "human:ana", "--to", peer_id(beta.home))
    wait_converged(alpha, beta)
    for home in (alpha.home, beta.home):
        wait_until(lambda: api(home, "agents", agent="human:ana")["agents"][0]["daemon"] == peer_id(beta.home),
                   "ana held by beta everywhere")

    api(alpha.home, "ask", to="human:ana", from_agent="agent-7", body="may I drop the orders table?",
        choices=["yes", "no"], wait=False)
    wait_until(lambda: receiver.at("/beta"), "beta to tell ana")
    wait_converged(alpha, beta)
    assert counts_after_a_marker(receiver, alpha.home, "human:bob", "/alpha", "agent-7")["offered"] == 1  # its marker
    assert counts_after_a_marker(receiver, beta.home, "human:ana", "/beta", "agent-8")["offered"] == 2
    assert told(receiver, "/alpha", "may I drop the orders table?") == [] and len(receiver.at("/alpha")) == 1
    (question, _) = [r["json"] for r in receiver.at("/beta")]
    assert question["person"] == "human:ana" and question["things"][0]["kind"] == "question"
    assert question["things"][0]["preview"] == "may I drop the orders table?"
    assert [p["held"] for p in notify_status(alpha.home)["people"]] == [False, True]
    assert [p["held"] for p in notify_status(beta.home)["people"]] == [True, False]

    api(beta.home, "ask", to="human:*", from_agent="agent-8", body="who is on call?", wait=False)
    wait_until(lambda: told(receiver, "/alpha", "who is on call?") and told(receiver, "/beta", "who is on call?"),
               "each daemon to tell its person")
    wait_converged(alpha, beta)
    assert counts_after_a_marker(receiver, alpha.home, "human:bob", "/alpha", "agent-7")["offered"] == 3
    assert counts_after_a_marker(receiver, beta.home, "human:ana", "/beta", "agent-8")["offered"] == 4
    assert [m["person"] for m in told(receiver, "/alpha", "who is on call?")] == ["human:bob"]
    assert [m["person"] for m in told(receiver, "/beta", "who is on call?")] == ["human:ana"]
    assert {r["json"]["person"] for r in receiver.at("/alpha")} == {"human:bob"}
    assert {r["json"]["person"] for r in receiver.at("/beta")} == {"human:ana"}


def test_a_patch_waiting_for_a_persons_review_is_notified_with_the_command_that_reviews_it(daemon_factory,
                                                                                           short_tmp, receiver):
    """Issue 46: a delivered patch on a task whose review is a person's is a "review" thing, with the
    hint that approves it; the same patch on a task that asks no review tells nobody."""
    home = configure(short_tmp / "solo", "\n".join([
        '[notify]\ngroup_window = "1s"\n', '[notify.people.ana]\nchannels = ["generic"]\non = ["review"]\n',
        webhook("generic", receiver.url("/generic"))]))
    daemon_factory(home)
    patch = b"diff --git a/t b/t\nnew file mode 100644\n--- /dev/null\n+++ b/t\n@@ -0,0 +1 @@\n+x\n"
    cids = []
    for review in ("human:ana", "none"):
        cids.append(ctl_json(home, "task", "create", "--project", "shop", "--from-agent", "boss", "--to-agent", "bob",
                             "--goal", f"review {review}", "--branch", "main", "--base-commit", "a" * 40, "--done",
                             "d", "--review-by", review)["task"]["correlation_id"])
        run_ctl(home, "patch", "submit", "--from-agent", "bob", "--correlation-id", cids[-1], input=patch)
    wait_until(lambda: receiver.requests, "the notification")
    wait_until(lambda: notify_status(home)["pending"] == 0, "nothing left to send")
    things = [t for r in receiver.at("/generic") for t in r["json"]["things"]]
    assert [(t["kind"], cids[0] in t["title"]) for t in things] == [("review", True)]
    assert things[0]["hint"] == f"palacectl review {cids[0]} --approve --as human:ana"


def test_an_approval_is_notified_with_who_asks_on_which_machine_for_which_task_and_why(daemon_factory, short_tmp,
                                                                                         receiver, tmp_path):
    """Issue 47 §3.2: the notification of a run's permission request says whose run asks, on which
    machine, on which task, and the run's own reason (the question's why line)."""
    from palacectl.features.approvals.approvals import Question, first_step
    from palacectl.features.approvals.permission_policy import PermissionPolicy

    home = configure(short_tmp / "solo", "\n".join([
        '[notify]\ngroup_window = "1s"\n', '[notify.people.ana]\nchannels = ["generic"]\n',
        webhook("generic", receiver.url("/generic"))]))
    daemon_factory(home)
    ctl_json(home, "init", "--palace-name", "shop", "--daemon-name", "box")
    ctl_json(home, "agent", "register", "human:ana")  # held here: this daemon tells her
    cid = ctl_json(home, "task", "create", "--project", "shop", "--from-agent", "boss", "--to-agent", "bot", "--goal",
                   "Test it", "--branch", "main", "--base-commit", "a" * 40, "--done", "d")["task"]["correlation_id"]
    ctl_json(home, "task", "claim", cid, "--agent", "bot")
    step = first_step(PermissionPolicy.from_config({"permissions": {"ask_to": "human:ana"}}, None),
                      [("Bash", {"command": "npm publish", "description": "Publish the release"})],
                      agent="bot", task=cid, worktree=tmp_path)
    assert isinstance(step, Question)
    api(home, "ask", **step.ask_args(), wait=False)
    wait_until(lambda: receiver.requests, "the notification")
    (thing,) = [t for r in receiver.at("/generic") for t in r["json"]["things"]]
    assert thing["kind"] == "question" and thing["title"] == f"Approval for bot on box (task {cid})", thing
    assert "why: Publish the release" in thing["preview"], thing
