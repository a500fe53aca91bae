"""Helpers for multi-daemon tests: a palace of real palaced processes on loopback.

Every daemon runs in the root network namespace with mDNS off and listens on 127.0.0.1 with an
ephemeral port (``tests.helpers.ROOT_NS_NETWORK``). Members join the way users do
(``invite`` + ``join``), or — where a test needs a topology the invite would not give, like a
line A—B—C — are enrolled offline with the founder's CA key, which is exactly what ``join``
would have written, and then connected with ``peers add``.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.identity import REGISTRY_TYPES
from palace_proto.pki import issue_certificate
from palaced.membership import save_joined
from tests.helpers import Daemon, RawClient, run_ctl

WAIT_S = 30.0


def ctl_json(home: Path, *args: str, timeout: float = 60.0) -> Any:
    result = run_ctl(home, *args, "--json", timeout=timeout)
    if result.returncode == 3:  # the daemon is gone: its log says why
        log = home.parent / f"{home.name}.log"
        raise AssertionError(f"palaced on {home} is not running; its log:\n"
                             + (log.read_text(errors="replace")[-6000:] if log.exists() else "(none)"))
    if args[:1] == ("status",) and result.returncode == 1:
        # status exits 1 when its health check finds a problem: that, and only that, is fine here.
        document = json.loads(result.stdout)
        assert document["health"]["ok"] is False and document["health"]["problems"], result
        return document
    assert result.returncode == 0, result
    return json.loads(result.stdout)


def api(home: Path, op: str, **args: Any) -> Any:
    """One call to the daemon on ``home`` in this process (no palacectl process: what the helpers
    below poll many times a second uses this; the CLI itself is tested through ``ctl_json``)."""
    try:
        with RawClient(home / "palaced.sock") as client:
            client.hello()
            return client.call(op, **args)
    except OSError:  # refused, gone: its log says why
        log = home.parent / f"{home.name}.log"
        raise AssertionError(f"palaced on {home} is not answering; its log:\n"
                             + (log.read_text(errors="replace")[-6000:] if log.exists() else "(none)")) from None


def listen_address(home: Path) -> str:
    return api(home, "status")["network"]["listen"][0]


def digest(home: Path) -> dict[str, Any]:
    return api(home, "digest")


def event_count(home: Path) -> int:
    return api(home, "status")["events"]


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.1)


def wait_converged(*daemons: Daemon, timeout: float = WAIT_S) -> dict[str, Any]:
    """Until every daemon reports the same digest; returns it."""
    def same() -> dict[str, Any] | None:
        digests = [digest(d.home) for d in daemons]
        return digests[0] if all(d["digest"] == digests[0]["digest"] for d in digests) else None

    return wait_until(same, f"identical digests on {', '.join(d.home.name for d in daemons)}", timeout)


def bodies(home: Path) -> list[str]:
    """Every event body on a replica, sorted (what converged means to an agent), without the
    daemons' own agent registrations (palace_proto.identity: bookkeeping, not anyone's words)."""
    return sorted(e["body"] for e in api(home, "list", limit=500)["events"] if e["type"] not in REGISTRY_TYPES)


def connected(home: Path) -> list[str]:
    return api(home, "status")["network"]["connected"]


def peer_id(home: Path) -> str:
    return api(home, "status")["fingerprint"]


def append(home: Path, body: str, **fields: str) -> dict[str, Any]:
    args = ["append", "--type", fields.pop("type", "note"), "--stream", fields.pop("stream", "project/fleet"),
            "--room", fields.pop("room", "general"), "--from-agent", fields.pop("from_agent", home.name),
            "--body", body]
    for key, value in fields.items():
        args += [f"--{key.replace('_', '-')}", value]
    return ctl_json(home, *args)


def seed(daemon: Daemon, count: int, *, depth: int = 16, padding: int = 0) -> None:
    """Append ``count`` events quickly: one connection, ``depth`` requests in flight (bodies
    ``padding`` bytes longer than "event N", to fill the database faster)."""
    with RawClient(daemon.socket_path) as client:
        client.call("hello", version=1)
        sent = answered = 0
        while answered < count:
            while sent < count and sent - answered < depth:
                client.send_message({"id": sent + 1000, "op": "append", "args": {
                    "type": "note", "stream": "s", "room": "r", "from_agent": "bulk",
                    "body": f"event {sent}" + "x" * padding}})
                sent += 1
            reply = client.recv_message()
            assert reply.get("ok") is True, reply
            answered += 1


#: events per append_many request (the API's bound is 1,000)
BULK = 1_000


def seed_bulk(daemon: Daemon, count: int, *, agent: str = "bulk") -> None:
    """Append ``count`` events ("event N", all from ``agent``) in append_many requests of
    ``BULK``: a backlog to replicate, where how it was written is not the point (20,000 take 2-3 s
    this way, 30 s one append at a time)."""
    with RawClient(daemon.socket_path) as client:
        client.hello()
        for start in range(0, count, BULK):
            client.call("append_many", events=[
                {"type": "note", "stream": "s", "room": "r", "from_agent": agent, "body": f"event {i}"}
                for i in range(start, min(count, start + BULK))])


def fork_an_origin(fleet: Fleet, copies_dir: Path) -> tuple[Daemon, Daemon]:
    """alpha and beta, one palace, where a copy of alpha's home (a restored backup, a cloned VM)
    wrote seq 3 of alpha's origin before alpha did: beta kept the copy's event and holds
    alpha's own as a fork. Returns (alpha, beta), both running."""
    import shutil

    a = fleet.found("alpha")
    append(a.home, "shared history")
    b = fleet.join("beta")
    wait_converged(a, b)
    assert a.stop() == 0 and b.stop() == 0
    clone_home = copies_dir / "clone"
    shutil.copytree(a.home, clone_home, ignore=shutil.ignore_patterns("palaced.sock", "palaced.lock"))
    b.start()
    clone = fleet.start("clone")
    append(clone.home, "the clone's version of seq 3")
    ctl_json(clone.home, "peers", "add", listen_address(b.home))
    wait_until(lambda: "the clone's version of seq 3" in bodies(b.home), "the clone's event at beta")
    a.start()
    append(a.home, "alpha's version of seq 3")
    ctl_json(a.home, "peers", "add", listen_address(b.home))
    wait_until(lambda: ctl_json(b.home, "status")["network"]["forks"] >= 1, "beta to detect the fork")
    return a, b


class Fleet:
    """Start daemons and make them members of one palace."""

    def __init__(self, daemon_factory: Callable[..., Daemon], root: Path) -> None:
        self._factory = daemon_factory
        self.root = root
        self.founder: Daemon | None = None

    def home(self, name: str) -> Path:
        return self.root / name

    def start(self, name: str, **kwargs: Any) -> Daemon:
        return self._factory(self.home(name), **kwargs)

    def found(self, name: str = "alpha", **kwargs: Any) -> Daemon:
        daemon = self.start(name, **kwargs)
        ctl_json(daemon.home, "init", "--palace-name", "fleet-test", "--daemon-name", name)
        self.founder = daemon
        return daemon

    def invite(self, role: str = "member") -> str:
        assert self.founder is not None
        return ctl_json(self.founder.home, "invite", "--role", role)["code"]

    def join(self, name: str, role: str = "member") -> Daemon:
        daemon = self.start(name)
        ctl_json(daemon.home, "join", self.invite(role), "--daemon-name", name)
        return daemon

    def ends_through_middle(self) -> tuple[Daemon, Daemon, Daemon]:
        """alpha — beta — gamma: the ends are linked only through beta, so stopping beta
        (``partitioned``) splits them. The ends dial no gossiped address (``--no-gossip-dial``):
        on one loopback they would otherwise find each other, as machines that can reach each
        other do."""
        a = self.found("alpha", extra_args=["--no-gossip-dial"])
        b = self.enrol_offline("beta").start()
        c = self.enrol_offline("gamma", extra_args=["--no-gossip-dial"]).start()
        ctl_json(a.home, "peers", "add", listen_address(b.home))
        ctl_json(c.home, "peers", "add", listen_address(b.home))
        return a, b, c

    @contextlib.contextmanager
    def partitioned(self, middle: Daemon) -> Iterator[None]:
        """``middle`` is stopped for the with-block, then started again on the same port (the
        daemons that knew it redial it, as static peers, with back-off): the partition heals."""
        address = listen_address(middle.home)
        assert middle.stop() == 0
        yield
        middle.extra_args[middle.extra_args.index("127.0.0.1:0")] = address
        middle.start()

    def enrol_offline(self, name: str, role: str = "member", *, daemon_name: str | None = None,
                      **kwargs: Any) -> Daemon:
        """Write what ``join`` would (identity key, CA, certificate) without starting the daemon;
        the daemon is named ``daemon_name`` (default: ``name``, its home's), taken or not."""
        assert self.founder is not None
        home = self.home(name)
        home.mkdir(mode=0o700, parents=True)
        key = Ed25519PrivateKey.generate()
        key_path = home / "identity.key"
        fd = os.open(key_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                       serialization.NoEncryption()))
        folder = self.founder.home / "palace"
        ca_key = serialization.load_pem_private_key((folder / "ca.key").read_bytes(), password=None)
        ca_pem = (folder / "ca.crt").read_bytes()
        now = datetime.datetime.now(datetime.UTC)
        raw = key.public_key().public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
        cert = issue_certificate(ca_key, ca_pem, raw, role=role, name=daemon_name or name,  # type: ignore[arg-type]
                                 now=now)
        save_joined(home, key, palace_name="fleet-test", ca_pem=ca_pem, member_pem=cert, now=now)
        return self.start(name, start=False, **kwargs)
