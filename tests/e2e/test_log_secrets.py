"""No secret ever reaches a log line: a whole palace's life at debug level — found, invite,
join, replicate, write memory, redact a token, back up, revoke — then every daemon log is
searched for every secret the run used: invite codes and their secrets, private keys (identity,
CA), and the redacted text. Logs go to journals and bug reports; secrets must not."""

from __future__ import annotations

import base64
import re

from palace_proto.pki import Invite
from tests.fleet import append, ctl_json, wait_converged, wait_until
from tests.helpers import run_ctl

DEBUG = ("--log-level", "debug")
REDACTED_TOKEN = "tok_live_Zq8sYwTfXp3n"


def _pem_body(pem: bytes) -> list[str]:
    """The base64 lines of a PEM block (what a leak would show), minus the BEGIN/END lines."""
    return [line for line in pem.decode().splitlines() if line and not line.startswith("-----")]


def _forms(secret: bytes) -> list[str]:
    """A secret as a log line might spell it: hex, base64, url-safe base64 (padding stripped)."""
    return [secret.hex(), base64.b64encode(secret).decode().rstrip("="),
            base64.urlsafe_b64encode(secret).decode().rstrip("=")]


def test_no_secret_appears_in_any_log_line(fleet, tmp_path):
    alpha = fleet.start("alpha", extra_args=DEBUG)
    ctl_json(alpha.home, "init", "--palace-name", "secrets", "--daemon-name", "alpha")
    fleet.founder = alpha
    codes = [ctl_json(alpha.home, "invite", "--role", role)["code"] for role in ("member", "observer")]
    beta = fleet.start("beta", extra_args=DEBUG)
    ctl_json(beta.home, "join", codes[0], "--name", "beta")
    gamma = fleet.start("gamma", extra_args=DEBUG)
    ctl_json(gamma.home, "join", codes[1], "--name", "gamma")
    bad = run_ctl(beta.home, "join", codes[0], "--name", "again")  # a used code: refused, and logged as such
    assert bad.returncode != 0
    leaked = append(alpha.home, f"oops: the deploy token is {REDACTED_TOKEN}")
    run_ctl(beta.home, "remember", "--wing", "wing_ops", "--room", "tokens", input=f"staging uses {REDACTED_TOKEN}\n"
            .encode())
    ctl_json(alpha.home, "redact", leaked["id"], "--from-agent", leaked["from_agent"], "--reason", "a token")
    drawer_event = next(e for e in ctl_json(beta.home, "list", "--stream", "memory", "--limit", "10")["events"]
                        if REDACTED_TOKEN in e["body"])
    ctl_json(beta.home, "redact", drawer_event["id"], "--from-agent", "beta-agent", "--operator")
    ctl_json(alpha.home, "backup", str(tmp_path / "alpha.sqlite3"))
    wait_converged(alpha, beta, gamma)
    ctl_json(alpha.home, "revoke", ctl_json(gamma.home, "status")["palace"]["peer_id"])
    wait_until(lambda: "gamma" not in {p["name"] for p in ctl_json(alpha.home, "peers")["peers"]
                                         if p["state"] == "live"}, "gamma to be cut off")
    for daemon in (alpha, beta, gamma):
        daemon.stop()

    secrets: dict[str, str] = {}
    for code in codes:
        secrets[f"invite code {code[:16]}…"] = code
        for form in _forms(Invite.decode(code).secret):
            secrets[f"invite secret ({form[:6]}…)"] = form
    for daemon in (alpha, beta, gamma):
        for line in _pem_body((daemon.home / "identity.key").read_bytes()):
            secrets[f"{daemon.home.name} identity key line"] = line
    for line in _pem_body((alpha.home / "palace" / "ca.key").read_bytes()):
        secrets["palace CA key line"] = line
    secrets["redacted token"] = REDACTED_TOKEN
    logs = {d.home.name: d.log() for d in (alpha, beta, gamma)}
    assert all(" DEBUG " in text for text in logs.values()), {n: len(t.splitlines()) for n, t in logs.items()}
    assert re.search(r"invite", logs["alpha"], re.IGNORECASE), "the run should have logged its invites"
    found = [(what, name) for name, text in logs.items() for what, secret in secrets.items() if secret in text]
    assert found == [], f"secrets in logs: {found}"
