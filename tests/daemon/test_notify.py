"""Notifications out: triggers, payloads, the dispatcher's state machine, settings, and the
notifier's timers in-process (its group window, rate slot and retry back-off on trio's mock clock,
a stand-in channel taking the deliveries).

The IO (a real daemon, a webhook receiver, an SMTP sink, a stand-in notify-send) is
tests/e2e/test_notify.py."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import trio

from palaced.bus import EventBus
from palaced.config import ConfigError, load_config
from palaced.features import features
from palaced.notify import notifier as notifier_module
from palaced.notify import triggers
from palaced.notify.channels import DeliveryError
from palaced.notify.dispatch import BACKOFF_S, MAX_SEEN, RATE_WINDOW_S, Dispatcher
from palaced.notify.notifier import Notifier
from palaced.notify.payloads import (
    desktop_argv,
    discord_escape,
    email_message,
    ntfy_target,
    probe_message,
    render,
    webhook_body,
)
from palaced.notify.settings import NotifyConfigError, parse_notify
from palaced.notify.triggers import Thing, fork_thing, preview, wants

#: the daemon's features: what a person may be told of is theirs (their triggers and kinds)
DAEMON = features()
KINDS = DAEMON.notify_kinds
ADDRESSED_ONLY = frozenset(t.kind for t in DAEMON.triggers if t.addressed_only)


def thing_for(event, **options):
    return triggers.thing_for(event, DAEMON.triggers, **options)


def event(**fields):
    base = {"id": "evt_1", "seq": 1, "type": "note", "stream": "s", "room": "r", "from_agent": "agent-7",
            "to_agent": None, "correlation_id": None, "status": None, "body": "hello", "metadata": {},
            "created_at": "2026-01-01T00:00:00.000000Z"}
    return {**base, **fields}


def thing(key="evt_1", kind="message", to="human:ana", **fields):
    return Thing(kind=kind, title=f"t {key}", preview="p", key=key, event_id=key, to_agent=to,
                 addressed_only=kind in ADDRESSED_ONLY, **fields)


# -- triggers -----------------------------------------------------------------------------------

@pytest.mark.parametrize(("fields", "kind"), [
    ({"type": "question.ask", "to_agent": "human:ana", "metadata": {"choices": ["yes", "no"]}}, "question"),
    ({"type": "note", "to_agent": "human:ana"}, "message"),
    ({"type": "event.ack", "status": "failed", "correlation_id": "task_x"}, "task_failed"),
    ({"type": "task.reply", "status": "blocked", "correlation_id": "task_x"}, "task_blocked"),
    ({"type": "task.stalled", "correlation_id": "task_x", "from_agent": "palaced"}, "stall"),
    ({"type": "task.conflict", "correlation_id": "task_x", "to_agent": "agent-2"}, "lost_claim"),
    ({"type": "lease.conflict", "to_agent": "agent-2"}, "lost_lease"),
    ({"type": "palace.revoke", "metadata": {"peer_id": "ABCDEFG-123"}}, "revocation"),
    ({"type": "usage.budget", "body": "agent-7 reached 100% of 5 USD today"}, "budget"),
])
def test_each_trigger_names_its_kind(fields, kind):
    found = thing_for(event(**fields))
    assert found is not None and found.kind == kind and found.key == "evt_1"


def test_what_needs_nobody_is_no_thing_and_a_redacted_event_never_is():
    assert thing_for(event()) is None
    assert thing_for(event(status="failed", correlation_id="not-a-task")) is None
    assert thing_for(event(to_agent="human:ana", body="", body_redacted=True)) is None
    assert thing_for(event(type="question.ask", to_agent="human:*", body_redacted=True)) is None


def test_a_question_names_its_asker_and_how_to_answer():
    found = thing_for(event(type="question.ask", to_agent="human:*", metadata={"choices": ["yes", "no"]}))
    assert found.title == "Question to anyone from agent-7"
    assert found.hint == "palacectl answer evt_1 yes|no --as human:NAME"  # to anyone: who answers (issue 47)
    assert thing_for(event(type="question.ask", to_agent="human:ana")).hint == "palacectl answer evt_1 TEXT"


def test_an_unproven_sender_is_said():
    found = thing_for(event(to_agent="human:ana", impersonation={"agent": "agent-7"}))
    assert found.title.startswith("[unproven sender] ")


def test_a_body_is_cut_to_a_preview_on_one_line():
    body = "line one\n\tline two \x1b[31mred\u202e " + "x" * 500
    found = thing_for(event(to_agent="human:ana", body=body), preview_chars=50)
    assert len(found.preview) == 50 and found.preview.endswith("…")
    assert "\n" not in found.preview and "\x1b" not in found.preview and "\u202e" not in found.preview
    assert preview("short") == "short" and preview(None) == ""


def test_fork_is_a_palace_wide_thing():
    found = fork_thing({"origin": "ori2_x", "origin_seq": 3, "detected_at": "2026-01-01T00:00:00Z", "source": "p"})
    assert found.kind == "fork" and found.key == "fork:ori2_x:3" and found.to_agent is None


def test_who_wants_what():
    every = frozenset(KINDS)
    question = thing(kind="question", to="human:ana")
    assert wants("human:ana", every, "palace", question)
    assert not wants("human:bob", every, "palace", question)  # a question is only ever addressed
    assert wants("human:bob", every, "addressed", thing(kind="question", to="human:*"))
    failed = thing(kind="task_failed", to="agent-1")
    assert wants("human:ana", every, "palace", failed)
    assert not wants("human:ana", every, "addressed", failed)
    assert wants("human:ana", every, "addressed", thing(kind="task_failed", to="human:ana"))
    assert not wants("human:ana", frozenset({"question"}), "palace", failed)
    assert not wants("human:ana", every, "palace", thing(to="human:*", from_agent="human:ana"))  # her own words


# -- payloads -----------------------------------------------------------------------------------

def test_one_thing_and_several_render_differently():
    one = render("human:ana", [thing()], palace="fleet")
    assert one.title == "palace fleet: t evt_1" and "p" in one.text
    many = render("human:ana", [thing(f"e{i}") for i in range(12)], dropped=3)
    assert many.title == "palace: 12 things need you"
    assert many.text.count("•") == 10 and "and 2 more" in many.text and "3 older thing(s) were dropped" in many.text


def test_webhook_shapes():
    message = render("human:ana", [Thing(kind="question", title="Q <b> & @everyone", preview="may I?", key="e")])
    slack = webhook_body("slack", message)
    assert set(slack) == {"text", "unfurl_links", "unfurl_media"} and "&lt;b&gt; &amp;" in slack["text"]
    assert slack["text"].startswith("*palace: ")
    discord = webhook_body("discord", message)
    assert discord["allowed_mentions"] == {"parse": []} and discord["content"].startswith("**palace: ")
    long = render("human:ana", [Thing(kind="message", title="x" * 119, preview="y" * 1000, key=str(i))
                                for i in range(10)])
    assert len(webhook_body("discord", long)["content"]) == 2000
    ntfy = webhook_body("ntfy", message, url="https://ntfy.example/sub/palace-ana")
    assert ntfy["topic"] == "palace-ana" and ntfy["priority"] == 4 and ntfy["message"]
    assert ntfy_target("https://ntfy.example/sub/palace-ana") == ("https://ntfy.example/sub/", "palace-ana")
    assert ntfy_target("https://ntfy.sh/t") == ("https://ntfy.sh/", "t")
    generic = webhook_body("generic", message)
    assert generic["person"] == "human:ana" and generic["count"] == 1 and generic["things"][0]["kind"] == "question"


#: what an agent or a member may write, as a thing's title and preview would carry it
HOSTILE = ("[docs](https://evil.example/login) **now** @everyone <@123> <@&9> <#7> ||x|| ~~y~~ `z` _w_ > q "
           "<https://evil.example> \\[a](b) | see https://ok.example/a_b?c=d")


def test_discord_shows_what_members_write_as_text_never_as_a_link_or_a_mention():
    """Guards issue 43 (a member's ``[text](url)`` rendered as a link in Discord notifications,
    its target hidden): every markdown character of what agents and members wrote is escaped
    (a bare URL stays whole and visible), headings and lists at a line's start too, mentions are
    neither parsed nor shown as such, and links are not unfurled."""
    message = render("human:ana", [Thing(kind="message", title="# from agent-7 [x](https://evil.example)",
                                         preview=HOSTILE, key="e", hint="palacectl show e")])
    body = webhook_body("discord", message)
    assert body["allowed_mentions"] == {"parse": []} and body["flags"] == 4  # SUPPRESS_EMBEDS
    content = body["content"]
    assert content.startswith("**palace: # from agent-7 \\[x\\]\\(https://evil.example\\)**\n")
    assert "\\[docs\\]\\(https://evil.example/login\\)" in content
    assert "[docs](" not in content and "@everyone" not in content and "@\u200beveryone" in content
    preview_line = content.split("\n")[1].replace("https://ok.example/a_b?c=d", "")
    assert re.findall(r"[\[\]()<>*_~`|]", re.sub(r"\\.", "", preview_line)) == []  # each one escaped
    assert "\\\\\\[a\\]\\(b\\)" in content  # a member's own backslash cannot undo an escape
    assert "https://ok.example/a_b?c=d" in content  # a bare URL is shown as it goes
    assert (discord_escape("# h\n - item\n+ x\n12. twelve\n-# small")
            == "\\# h\n \\- item\n\\+ x\n12\\. twelve\n\\-# small")
    assert discord_escape("a # b - c 1. d") == "a # b - c 1. d"  # only a line's start makes a heading or list


def test_a_discord_cut_never_leaves_a_backslash_escaping_the_ellipsis():
    """Guards the cut of an escaped message: the 2,000 characters end on a whole escape."""
    lengths = []
    for pad in range(2):  # the cut lands after a whole escape, then between a backslash and its star
        message = render("human:ana", [Thing(kind="message", title="t", preview="x" * (1975 + pad) + "*" * 30,
                                             key="e")])
        content = webhook_body("discord", message)["content"]
        body = content.removesuffix("…")
        escapes = body[len(body.rstrip("\\*")):]
        assert escapes and escapes == "\\*" * (len(escapes) // 2)  # whole escapes, none cut in two
        lengths.append(len(content))
    assert lengths == [2000, 1999]


def test_the_other_channels_send_what_members_write_as_text():
    """Guards issue 43's other channels: Slack's ``<url|text>`` links and mentions are escaped
    and nothing is unfurled; ntfy gets plain text (no markdown); a desktop notification's body,
    which notification servers may read as markup (``<a href>``), is escaped."""
    message = render("human:ana", [Thing(kind="question", title="Q <!channel>", key="e",
                                         preview='<https://evil.example|docs> & <a href="https://evil.example">docs</a>')])
    slack = webhook_body("slack", message)
    assert "<https://evil.example|docs>" not in slack["text"]
    assert "&lt;https://evil.example|docs&gt; &amp;" in slack["text"]
    assert "<!channel>" not in slack["text"] and slack["unfurl_links"] is False and slack["unfurl_media"] is False
    ntfy = webhook_body("ntfy", message, url="https://ntfy.example/palace-ana")
    assert ntfy["markdown"] is False and "click" not in ntfy and "actions" not in ntfy
    linux = desktop_argv("linux", message)
    assert linux[-2] == message.title  # the summary is never markup
    assert "<a href" not in linux[-1] and "&lt;a href=\"https://evil.example\"&gt;docs&lt;/a&gt;" in linux[-1]
    assert desktop_argv("darwin", message)[-1] == message.text  # osascript shows text as text


def test_mail_and_desktop():
    message = probe_message("human:ana", "mail", palace="fleet", daemon="beta")
    mail = email_message(message, "palace@example.com", ["ana@example.com", "ops@example.com"], now=0)
    assert mail["Subject"] == "palace fleet: test notification" and mail["To"] == "ana@example.com, ops@example.com"
    assert mail["Auto-Submitted"] == "auto-generated" and "channel 'mail'" in mail.get_content()
    linux = desktop_argv("linux", message)
    assert linux[0] == "notify-send" and linux[-3:] == ["--", message.title, message.text]
    mac = desktop_argv("darwin", message)
    assert mac[0] == "osascript" and mac[-2:] == [message.title, message.text]
    assert desktop_argv("win32", message) is None


# -- the dispatcher -----------------------------------------------------------------------------

def test_things_within_the_window_go_out_as_one_message_per_channel():
    core = Dispatcher({"human:ana": ("hook", "mail")}, group_window_s=10)
    assert core.offer("human:ana", thing("a"), 100.0)
    assert core.offer("human:ana", thing("b"), 105.0)
    assert not core.offer("human:ana", thing("a"), 106.0)  # one thing is offered once
    assert not core.offer("human:bob", thing("c"), 106.0)  # nobody to send to
    assert core.get_timer() == 110.0
    assert core.take_due(109.9) == []
    out = core.take_due(110.0)
    assert [(d.channel, [t.key for t in d.things]) for d in out] == [("hook", ["a", "b"]), ("mail", ["a", "b"])]
    assert core.get_timer() is None
    assert repr(core) == "<Dispatcher people=1 pending=0 retrying=0 sent=0 failed=0>"


def test_the_rate_limit_holds_messages_back_and_groups_them():
    core = Dispatcher({"human:ana": ("hook",)}, group_window_s=0, rate_per_minute=2)
    for i, at in enumerate((0.0, 1.0)):
        core.offer("human:ana", thing(f"e{i}"), at)
        assert len(core.take_due(at)) == 1
    core.offer("human:ana", thing("e2"), 2.0)
    core.offer("human:ana", thing("e3"), 3.0)
    assert core.take_due(3.0) == []  # two in the last minute
    assert core.get_timer() == 60.0  # the first send leaves the window
    (late,) = core.take_due(60.0)
    assert [t.key for t in late.things] == ["e2", "e3"]


def test_a_failed_delivery_is_retried_with_back_off_then_given_up():
    core = Dispatcher({"human:ana": ("hook",)}, group_window_s=0, attempts=3)
    core.offer("human:ana", thing(), 0.0)
    (delivery,) = core.take_due(0.0)
    assert core.failed(delivery, 0.0) == BACKOFF_S[0]
    assert core.take_due(0.5) == [] and core.get_timer() == BACKOFF_S[0]
    (again,) = core.take_due(BACKOFF_S[0])
    assert again is delivery and again.attempt == 1
    assert core.failed(again, 1.0) == BACKOFF_S[1]
    (third,) = core.take_due(1.0 + BACKOFF_S[1])
    assert core.failed(third, 20.0) is None
    stats = core.statistics()
    assert stats["retried"] == 2 and stats["failed"] == 1 and stats["sent"] == 0 and stats["retrying"] == 0


def test_the_queue_is_bounded_and_the_next_message_says_what_was_dropped():
    core = Dispatcher({"human:ana": ("hook",), "human:bob": ("hook",)}, group_window_s=10, max_pending=10)
    core.offer("human:bob", thing("b0"), 0.0)
    for i in range(10):
        core.offer("human:ana", thing(f"a{i}"), 1.0 + i)
    assert core.statistics()["pending"] == 10 and core.dropped == 1  # bob's, the oldest
    out = {d.person: d for d in core.take_due(100.0)}
    assert "human:bob" not in out and out["human:ana"].dropped == 0
    core.offer("human:bob", thing("b1"), 200.0)
    assert core.take_due(210.0)[0].dropped == 1


def test_a_withdrawn_thing_leaves_the_queue_and_the_retries():
    core = Dispatcher({"human:ana": ("hook",)}, group_window_s=0)
    core.offer("human:ana", thing("secret"), 0.0)
    core.offer("human:ana", thing("other"), 0.0)
    (delivery,) = core.take_due(0.0)
    core.failed(delivery, 0.0)
    core.offer("human:ana", thing("secret2"), 0.5)
    assert core.withdraw("secret") == 1 and core.withdraw("secret2") == 1
    (again,) = core.take_due(5.0)
    assert [t.key for t in again.things] == ["other"]
    assert core.withdraw("other") == 0  # on its way already: nothing can call it back
    assert core.statistics()["withdrawn"] == 2


def test_the_memory_of_offered_things_is_bounded():
    core = Dispatcher({"human:ana": ("hook",)}, group_window_s=0, max_pending=10_000)
    for i in range(MAX_SEEN + 5):
        core.offer("human:ana", thing(f"e{i}"), 0.0)
        if i % 5_000 == 0:
            core.take_due(0.0)
    assert len(core._seen) == MAX_SEEN
    assert core.offer("human:ana", thing("e0"), 1.0)  # forgotten first


# -- the notifier's timers, in-process (trio's mock clock) ----------------------------------------

#: the wall clock the events below are read at (an event over a day older is history, not news)
WALL = "2026-01-01T00:00:01.000000Z"


class StandInStore:
    """The store's one read the notifier makes besides the log: the forks table (none here)."""

    async def forks(self) -> list[dict[str, Any]]:
        return []


class Deliveries:
    """Takes the notifier's deliveries in place of its channels: when (on trio's clock), through
    which channel, what; a channel named in ``failing`` refuses that many first."""

    def __init__(self, failing: dict[str, int] | None = None) -> None:
        self.taken: list[tuple[float, str, list[str]]] = []
        self.failing = dict(failing or {})

    async def __call__(self, channel: Any, message: Any, *, timeout_s: float, limiter: trio.CapacityLimiter,
                       now: float) -> None:
        if self.failing.get(channel.name, 0) > 0:
            self.failing[channel.name] -= 1
            raise DeliveryError("HTTP 500")
        self.taken.append((trio.current_time(), channel.name, [thing.key for thing in message.things]))


def notifier_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, deliveries: Deliveries,
                 **notify: Any) -> Notifier:
    """A notifier for human:ana (channels hook and mail) in a daemon of no palace: it holds every
    person. Its log is a bus nothing is published on; events are handed to ``observe``."""
    monkeypatch.setattr(notifier_module, "deliver", deliveries)
    table = {**notify, "people": {"ana": {"channels": ["hook", "mail"]}},
             "channels": {"hook": {"kind": "webhook", "url": "https://hooks.example.com/x"},
                          "mail": {"kind": "webhook", "url": "https://mail.example.com/y"}}}
    reads = StandInStore()
    ctx = SimpleNamespace(membership=None, bus=EventBus(), store=reads, features=DAEMON)
    return Notifier(ctx, parse_notify(table, tmp_path, KINDS))  # type: ignore[arg-type]


def told(key: str) -> dict[str, Any]:
    return event(id=key, to_agent="human:ana", body=f"about {key}")


async def test_things_within_the_group_window_go_out_together_when_it_closes(autojump_clock, tmp_path,
                                                                              monkeypatch):
    """Guards the notifier's own timer: the first thing opens a window; what comes within it goes
    out with it, once per channel, when it closes (not before, and never twice)."""
    deliveries = Deliveries()
    notifier = notifier_for(tmp_path, monkeypatch, deliveries, group_window="10s")
    async with trio.open_nursery() as nursery:
        await nursery.start(notifier.run)
        opened = trio.current_time()
        notifier.observe([told("evt_a")], trio.current_time(), WALL)
        await trio.sleep(4)
        notifier.observe([told("evt_b")], trio.current_time(), WALL)
        await trio.sleep(600)
        nursery.cancel_scope.cancel()
    assert sorted(deliveries.taken) == [(opened + 10, "hook", ["evt_a", "evt_b"]),
                                        (opened + 10, "mail", ["evt_a", "evt_b"])]
    assert notifier.statistics()["sent"] == 2 and notifier.statistics()["pending"] == 0


async def test_a_message_over_the_rate_waits_for_its_slot(autojump_clock, tmp_path, monkeypatch):
    """Guards the per-person rate as the notifier keeps it: with one message a minute, the second
    thing goes out a minute after the first message, not before."""
    deliveries = Deliveries()
    notifier = notifier_for(tmp_path, monkeypatch, deliveries, group_window=0, rate_per_minute=1)
    async with trio.open_nursery() as nursery:
        await nursery.start(notifier.run)
        first = trio.current_time()
        notifier.observe([told("evt_a")], trio.current_time(), WALL)
        await trio.sleep(5)
        notifier.observe([told("evt_b")], trio.current_time(), WALL)
        await trio.sleep(RATE_WINDOW_S - 6)
        assert notifier.statistics()["pending"] == 1  # a second before its slot
        await trio.sleep(600)
        nursery.cancel_scope.cancel()
    assert sorted((at - first, channel, keys) for at, channel, keys in deliveries.taken) == [
        (0, "hook", ["evt_a"]), (0, "mail", ["evt_a"]),
        (RATE_WINDOW_S, "hook", ["evt_b"]), (RATE_WINDOW_S, "mail", ["evt_b"])]


async def test_a_failed_delivery_is_tried_again_after_the_back_off_on_its_channel_only(autojump_clock, tmp_path,
                                                                                        monkeypatch):
    """Guards the retry: the channel that refused gets the same message again BACKOFF_S[0] later;
    the one that took it is not sent it twice."""
    deliveries = Deliveries(failing={"hook": 1})
    notifier = notifier_for(tmp_path, monkeypatch, deliveries, group_window=0)
    async with trio.open_nursery() as nursery:
        await nursery.start(notifier.run)
        offered = trio.current_time()
        notifier.observe([told("evt_a")], trio.current_time(), WALL)
        await trio.sleep(600)
        nursery.cancel_scope.cancel()
    assert sorted((at - offered, channel, keys) for at, channel, keys in deliveries.taken) == [
        (0, "mail", ["evt_a"]), (BACKOFF_S[0], "hook", ["evt_a"])]
    stats = notifier.statistics()
    assert (stats["sent"], stats["retried"], stats["failed"]) == (2, 1, 0)
    assert notifier.last_error is not None and notifier.last_error["channel"] == "hook"


# -- settings -----------------------------------------------------------------------------------

GOOD = {
    "rate_per_minute": 2, "group_window": "30s",
    "people": {"ana": {"channels": ["hook", "mail"], "on": ["question"]}, "human:bob": {"channels": ["desk"],
                                                                                        "scope": "addressed"}},
    "channels": {"hook": {"kind": "webhook", "url": "https://hooks.slack.com/services/x", "format": "slack"},
                 "desk": {"kind": "desktop"},
                 "mail": {"kind": "email", "host": "smtp.example.com", "from": "p@example.com", "to": "ana@example.com",
                          "username": "ana", "password_file": "smtp.pass"}},
}


def test_good_settings(tmp_path):
    (tmp_path / "smtp.pass").write_text("s3cret\n")
    settings = parse_notify(GOOD, tmp_path, KINDS)
    assert settings.group_window_s == 30 and settings.rate_per_minute == 2
    assert set(settings.people) == {"human:ana", "human:bob"}
    assert settings.people["human:ana"].on == frozenset({"question"})
    assert settings.people["human:bob"].scope == "addressed"
    mail = settings.channels["mail"]
    assert mail.port == 587 and mail.starttls and mail.password_file == tmp_path / "smtp.pass"
    assert "s3cret" not in repr(settings)
    assert settings.channels["hook"].describe() == "slack webhook to https://hooks.slack.com"


@pytest.mark.parametrize(("change", "message"), [
    (lambda c: c.update(colour="red"), "unknown key notify.colour (known: "),
    (lambda c: c["people"]["ana"].update(email="x"), "unknown key notify.people.ana.email"),
    (lambda c: c["channels"]["hook"].update(method="PUT"), "unknown key notify.channels.hook.method"),
    (lambda c: c["channels"]["mail"].update(password="hunter2"), "notify.channels.mail.password: a password is never"),
    (lambda c: c["people"]["ana"].update(channels=["nope"]), "notify.people.ana.channels names 'nope'"),
    (lambda c: c["people"]["ana"].update(on=["everything"]), "notify.people.ana.on: 'everything' is not one of"),
    (lambda c: c["channels"]["hook"].update(format="teams"), "notify.channels.hook.format must be one of"),
    (lambda c: c["channels"]["hook"].update(url="ftp://x"), "notify.channels.hook.url must be an http"),
    (lambda c: c["channels"]["mail"].update(port=70000), "notify.channels.mail.port must be an integer between"),
    (lambda c: c["channels"]["mail"].update(ssl=True), "notify.channels.mail: ssl (TLS from the start"),
    (lambda c: c["channels"]["mail"].update(password_file="missing"), "notify.channels.mail.password_file: "),
    (lambda c: c.update(group_window="soon"), "notify.group_window must be a duration"),
    (lambda c: c.update(rate_per_minute=0), "notify.rate_per_minute must be an integer between 1 and 60"),
    (lambda c: c["channels"].update(desk={"kind": "pager"}), "notify.channels.desk.kind must be one of"),
])
def test_bad_settings_name_the_key(tmp_path, change, message):
    import copy

    (tmp_path / "smtp.pass").write_text("s3cret\n")
    config = copy.deepcopy(GOOD)
    change(config)
    with pytest.raises(NotifyConfigError) as caught:
        parse_notify(config, tmp_path, KINDS)
    assert str(caught.value).startswith(message) and "\n" not in str(caught.value)
    assert "hunter2" not in str(caught.value)


def test_config_toml_with_a_bad_notify_key_is_refused_in_one_line(tmp_path: Path):
    (tmp_path / "config.toml").write_text('[notify]\nrate_per_minute = 3\n[notify.people.ana]\nchanels = ["x"]\n')
    with pytest.raises(ConfigError) as caught:
        load_config(tmp_path, DAEMON.config_extensions)
    assert str(caught.value) == (f"{tmp_path / 'config.toml'}: unknown key notify.people.ana.chanels "
                                 "(known: channels, on, scope)")
    (tmp_path / "config.toml").write_text('[notfy]\n')
    with pytest.raises(ConfigError, match=r"unknown section \[notfy\] \(known: .*notify"):
        load_config(tmp_path, DAEMON.config_extensions)
    (tmp_path / "config.toml").write_text('[notify.people.ana]\nchannels = ["d"]\n[notify.channels.d]\nkind = "desktop"\n')
    assert load_config(tmp_path, DAEMON.config_extensions).notify.people["human:ana"].channels == ("d",)
    (tmp_path / "config.toml").write_text("")
    assert load_config(tmp_path, DAEMON.config_extensions).notify is None
