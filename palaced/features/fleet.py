"""Operations about the palace and the fleet: init, invite, join, revoke, peers, replicated
waits, ``who`` across the fleet, ``fleet`` (every daemon's report, for the fleet view) and
``doctor``.

Owns: the local-API handlers that need membership or the network, and the network's part of
``status`` (``network_status``, ``peer_counts``). Roles are enforced for local writes by
``Context.require_writer``: an observer daemon refuses every write with ``read_only``. Invites and
revocations need the palace CA key, which only the daemon that ran ``init`` holds; other members
get a clear ``not_permitted`` naming that daemon.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
from collections.abc import Mapping
from typing import Any, Final

import trio

from palace_proto.errors import ApiError, NotFound, ValidationError
from palace_proto.event_fields import PublicEvent
from palace_proto.fleet import daemon_labels, derived_daemon_name
from palace_proto.peer import format_peer_address, parse_peer_address
from palace_proto.pki import (
    REVOKE_EVENT_TYPE,
    Invite,
    InviteError,
    Revocation,
    ca_fingerprint,
)
from palace_proto.stamps import format_stamp_seconds
from palace_proto.text import printable
from palace_proto.validation import AppendRequest, clean_optional, clean_required

from ..clock import unix_now, utc_datetime, utc_now_seconds
from ..enrolment import DaemonNameTaken, enrol
from ..feature import Feature
from ..handlers.context import Context
from ..handlers.network import replicated_args, wait_replicated
from ..handlers.session import capped
from ..interfaces import interface_ipv4_addresses
from ..membership import Membership, create_palace, save_joined
from ..notify.triggers import Trigger
from ..peers import ListenError
from ..store import WriteContext, append_event, invites

__all__ = ["FEATURE", "OPS", "daemon_label_map", "fleet", "who"]

LOGGER: Final = logging.getLogger("palaced.features.fleet")
DEFAULT_INVITE_TTL_S: Final = 24 * 3600
MAX_INVITE_TTL_S: Final = 30 * 24 * 3600
CERT_EXPIRY_WARNING_DAYS: Final = 30
CLOCK_SKEW_WARNING_S: Final = 2.0


def _now() -> datetime.datetime:
    return utc_datetime()


# -- membership ----------------------------------------------------------------------------------


async def _joined(ctx: Context, membership: Membership) -> None:
    ctx.membership = membership
    if ctx.start_network is not None:
        try:
            await ctx.start_network(membership)
        except ListenError as exc:
            raise ApiError(f"this daemon is now a member of {membership.palace_id}, but {exc.message}; "
                           "then restart palaced", code="internal") from None


def _membership_view(ctx: Context) -> dict[str, Any]:
    assert ctx.membership is not None
    view = ctx.membership.to_wire()
    view["listen"] = ctx.network.listen_addresses if ctx.network else []
    return view


async def init(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """Make this daemon the first member of a new palace (a new CA and our certificate)."""
    # ``name``: the palace's name as palacectl before issue 47 sent it (``--name`` on init).
    palace_name = (clean_optional("palace_name", args.get("palace_name")) or clean_optional("name", args.get("name"))
                   or socket.gethostname())
    name = clean_optional("daemon_name", args.get("daemon_name")) or socket.gethostname()
    membership = await trio.to_thread.run_sync(create_palace, ctx.config.home, ctx.identity, palace_name, name, _now())
    LOGGER.info("created palace %s (%s); this daemon is its first member", membership.palace_id, palace_name)
    await _joined(ctx, membership)
    return _membership_view(ctx)


async def invite(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    membership = ctx.require_ca()
    role = args.get("role", "member")
    if role not in ("member", "observer"):
        raise ValidationError("role must be 'member' or 'observer'", field="role")
    ttl_s = args.get("ttl_s", DEFAULT_INVITE_TTL_S)
    if type(ttl_s) is not int or not 60 <= ttl_s <= MAX_INVITE_TTL_S:
        raise ValidationError(f"ttl must be between 1 minute and {MAX_INVITE_TTL_S // 86400} days", field="ttl_s")
    address = clean_optional("address", args.get("address"))
    if address is None:
        assert ctx.network is not None
        host, port = parse_peer_address(ctx.network.listen_addresses[0])
        if host in ("0.0.0.0", "::"):
            lan = await trio.to_thread.run_sync(lambda: interface_ipv4_addresses(multicast=False))
            host = lan[0] if lan else "127.0.0.1"
        address = format_peer_address(host, port)
    else:
        try:
            address = format_peer_address(*parse_peer_address(address))
        except ValueError as exc:
            raise ValidationError(f"address: {exc}", field="address") from None
    secret = os.urandom(24)
    expires_at = int(unix_now()) + ttl_s
    invitation = Invite(membership.palace_id, address, ca_fingerprint(membership.ca_cert_pem), secret, role,
                        expires_at)

    def job(w: WriteContext) -> None:
        invites.issue(w, invitation.invite_id, secret, role, expires_at, utc_now_seconds())

    await ctx.store.write(job)
    assert ctx.network is not None
    await ctx.network.admission.refresh_invites()
    LOGGER.info("issued a %s invite (expires %s) for %s", role, format_stamp_seconds(expires_at), address)
    return {"code": invitation.encode(), "role": role, "address": address, "palace_id": membership.palace_id,
            "expires_at": format_stamp_seconds(expires_at)}


async def join(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    if ctx.membership is not None:
        raise ApiError(f"this daemon already belongs to palace {ctx.membership.palace_id} "
                       f"({ctx.membership.palace_name}); a daemon is a member of one palace", code="invalid_argument")
    code = clean_required("code", args.get("code"))
    try:
        invitation = Invite.decode(code)
        invitation.check_not_expired(unix_now())
    except InviteError as exc:
        raise ValidationError(str(exc), field="code") from None
    address = clean_optional("address", args.get("address"))
    # ``name``: the daemon's name as palacectl before issue 47 sent it (``--name`` on join).
    given = clean_optional("daemon_name", args.get("daemon_name")) or clean_optional("name", args.get("name"))
    name, renamed_from = given or socket.gethostname(), None
    try:
        palace_name, ca_pem, cert_pem, used = await enrol(invitation, ctx.store.public_key, name, address, _now())
    except DaemonNameTaken:
        if given is not None:
            raise
        # Cloned machines share a hostname: the default name is made this daemon's own.
        renamed_from, name = name, derived_daemon_name(name, ctx.fingerprint)
        palace_name, ca_pem, cert_pem, used = await enrol(invitation, ctx.store.public_key, name, address, _now())
    membership = await trio.to_thread.run_sync(lambda: save_joined(
        ctx.config.home, ctx.identity, palace_name=palace_name, ca_pem=ca_pem, member_pem=cert_pem, now=_now()))
    LOGGER.info("joined palace %s (%s) as %s via %s", membership.palace_id, palace_name, membership.role, used)
    await _joined(ctx, membership)
    assert ctx.network is not None
    ctx.network.dialer.add_target(used, "invite")
    view = _membership_view(ctx)
    if renamed_from is not None:
        view["renamed_from"] = renamed_from  # the hostname another daemon of the palace bears
    return view


async def revoke(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    membership = ctx.require_ca()
    peer_id = clean_required("peer_id", args.get("peer_id")).upper()
    if peer_id == membership.peer_id:
        raise ValidationError("a daemon cannot revoke itself", field="peer_id")
    directory = ctx.directory
    assert directory is not None
    cert = directory.certificate_of_peer(peer_id)
    if cert is None:
        raise NotFound(f"no member {peer_id!r} is known here (see `palacectl peers` for peer ids)")
    if directory.is_revoked(peer_id):
        raise ValidationError(f"peer {peer_id} is already revoked", field="peer_id")
    cutoffs = await ctx.store.origins_of_key(cert.public_key)
    revocation = Revocation(membership.palace_id, peer_id, cert.public_key, tuple(sorted(cutoffs.items())),
                            utc_now_seconds()).signed(ctx.ca_key())
    req = AppendRequest.from_wire(
        {"type": REVOKE_EVENT_TYPE, "stream": "palace", "room": "members", "from_agent": "palaced",
         "topic": "revoke", "body": f"revoked {peer_id} ({cert.name})", "metadata": revocation.to_metadata()},
        ctx.limits)

    def job(w: WriteContext) -> PublicEvent:
        event = append_event(w, req)
        directory.revoke(revocation)
        return event

    event = await ctx.store.write(job)
    LOGGER.warning("revoked %s (%s)", peer_id, cert.name)
    return {"revoked": peer_id, "name": cert.name, "event": event}


# -- peers ---------------------------------------------------------------------------------------


async def peers(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    membership = ctx.require_member()
    assert ctx.network is not None
    heads = ctx.store.version_vector()  # kept in memory: no read
    forks = await ctx.store.forks()
    return {"peer_id": membership.peer_id, "listen": ctx.network.listen_addresses,
            "mdns": ctx.network.dialer.mdns_state, "peers": ctx.network.views.peers_view(heads), "forks": forks}


async def peers_add(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    ctx.require_member()
    assert ctx.network is not None
    try:
        address = await ctx.network.dialer.add_static(clean_required("address", args.get("address")))
    except ValueError as exc:
        raise ValidationError(f"address: {exc}", field="address") from None
    return {"added": address}


async def peers_remove(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    ctx.require_member()
    assert ctx.network is not None
    address = clean_required("address", args.get("address"))
    try:
        removed = await ctx.network.dialer.remove_static(address)
    except ValueError as exc:
        raise ValidationError(f"address: {exc}", field="address") from None
    if not removed:
        raise NotFound(f"{address} is not a static peer (see `palacectl peers`)")
    return {"removed": format_peer_address(*parse_peer_address(address))}


async def replicated(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    count, timeout_s = replicated_args(args)
    event = await ctx.event_or_404(args.get("event_id"))
    return {"event_id": event["id"], **await wait_replicated(ctx, event, count, timeout_s)}


# -- who and doctor ------------------------------------------------------------------------------


def daemon_label_map(ctx: Context) -> dict[str, str]:
    """peer id -> how a person tells each known daemon of the palace apart: its name, plus its
    short peer id where another daemon bears the same name (``palace_proto.fleet.daemon_labels``)."""
    names = ctx.network.views.peer_names() if ctx.network is not None else {}
    if ctx.membership is not None:
        names[ctx.membership.peer_id] = ctx.membership.name
    return daemon_labels(names)


async def who(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """Watchers connected here, and (gossiped) those connected to every other daemon; each one's
    daemon carries its ``label`` (its name, told apart from a namesake's)."""
    local = sorted((w.to_wire() for w in ctx.watchers.values()), key=lambda w: w["since"])
    me = {"peer_id": ctx.membership.peer_id, "name": ctx.membership.name} if ctx.membership else None
    for watcher in local:
        watcher["daemon"] = me
        watcher["local"] = True
    remote = sorted(ctx.network.presence.remote_watchers() if ctx.network is not None else [], key=lambda w: w["since"])
    for watcher in remote:
        watcher["local"] = False
    labels = daemon_label_map(ctx)
    for watcher in (*local, *remote):
        daemon = watcher.get("daemon")
        if isinstance(daemon, dict):
            daemon["label"] = labels.get(daemon.get("peer_id") or "") or daemon.get("name")
    # A retired agent is gone from the roster and from here, even while an old watch of it runs.
    records = ctx.store.agents.records
    local = [w for w in local if not (w["agent"] in records and records[w["agent"]].retired)]
    remote = [w for w in remote if not (w["agent"] in records and records[w["agent"]].retired)]
    return {"watchers": local + remote, "count": len(local) + len(remote), "local_count": len(local)}


async def fleet(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    """Every daemon of the palace as the fleet view draws it: this daemon's report (built now), the
    newest report heard from each other daemon (signed by it, relayed by the palace), which daemon
    writes each origin (so an event's author daemon can be named), and the revoked daemons.

    A daemon not in a palace answers empty lists (nothing is wrong with asking)."""
    membership, network, directory = ctx.membership, ctx.network, ctx.directory
    if membership is None or network is None or directory is None:
        return {"self": None, "daemons": [], "origins": [], "revoked": []}
    names = {cert.peer_id: printable(cert.name, 64) for cert in directory.certificates()}
    origins = sorted(({"origin": origin, "peer_id": cert.peer_id, "name": names[cert.peer_id]}
                      for cert in directory.certificates() for origin in directory.origins_of_peer(cert.peer_id)),
                     key=lambda o: o["origin"])
    revoked = [{"peer_id": r.peer_id, "name": names.get(r.peer_id, ""), "at": printable(r.revoked_at, 64)}
               for r in directory.revocations()]
    return {"self": {"peer_id": membership.peer_id, "name": membership.name, "report": await network.reports.current()},
            "daemons": network.reports.heard(), "origins": origins, "revoked": revoked}


async def doctor(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    checks: list[dict[str, str]] = []

    def check(name: str, status: str, detail: str) -> None:
        checks.append({"check": name, "status": status, "detail": detail})

    m = ctx.membership
    if m is None:
        check("palace", "fail", "this daemon has not joined a palace, so it opens no network port and no peer "
              "can see it: run `palacectl init` on the first machine, `palacectl invite` there, and "
              "`palacectl join CODE` here")
        return {"checks": checks, "ok": False}
    check("palace", "ok", f"member of {m.palace_name or m.palace_id} ({m.palace_id}) as {m.role}, peer id {m.peer_id}")
    days_left = (m.member.not_after - _now()).days
    assert ctx.directory is not None and ctx.network is not None
    if ctx.directory.is_revoked(m.peer_id):
        check("certificate", "fail", "this daemon has been revoked by the palace: peers refuse it; ask the palace "
              "owner for a new invite and join again from a fresh home")
    elif days_left < 0:
        check("certificate", "fail", "this daemon's certificate has expired; join again with a new invite")
    elif days_left < CERT_EXPIRY_WARNING_DAYS:
        check("certificate", "warn", f"this daemon's certificate expires in {days_left} days; join again soon")
    else:
        check("certificate", "ok", f"valid until {m.member.not_after:%Y-%m-%d}")
    net = ctx.network
    if not net.listen_addresses:
        check("listening", "fail", "palaced is not listening for peers (see its log for the bind error)")
    else:
        host, port = parse_peer_address(net.listen_addresses[0])
        probe = "127.0.0.1" if host in ("0.0.0.0", "::") else host
        try:
            with trio.fail_after(2):
                # The listener knows this connection for ours: no "refused a connection" warning.
                await net.admission.probe_self(probe, port)
            reach = "accepts connections"
        except (OSError, trio.TooSlowError) as exc:
            reach = f"but a test connection failed ({exc})"
        where = ("on every interface" if host in ("0.0.0.0", "::")
                 else "on loopback only: other machines cannot reach it (use --listen 0.0.0.0:PORT)"
                 if host.startswith("127.") or host == "::1" else f"on {host} only")
        check("listening", "ok" if reach == "accepts connections" and not host.startswith("127.") else "warn",
              f"port {port} {where}; {reach}; peers need this TCP port open in firewalls")
    lan = await trio.to_thread.run_sync(lambda: interface_ipv4_addresses(multicast=True))
    known = [p for p in net.views.peers_view(ctx.store.version_vector()) if p["peer_id"]]
    labels = daemon_label_map(ctx)
    live = [p for p in known if p["state"] in ("live", "catching up")]
    if net.dialer.mdns_state == "off":
        check("mdns", "warn", "mDNS is off (--no-mdns or network.mdns = false): only static and remembered peers "
              "are dialled; add peers with `palacectl peers add HOST:PORT`")
    elif not lan:
        check("mdns", "warn", "no LAN interface with an IPv4 address: mDNS cannot see other machines")
    else:
        seen = sum(1 for t in net.views.targets_view() if "mdns" in t["sources"])
        others = [p for p in known if not p["revoked"]]
        if seen:
            why = ""
        elif others and not live:
            # A stopped daemon stops advertising: silence then says nothing about multicast (issue 26).
            names = ", ".join(labels.get(p["peer_id"]) or p["peer_id"][:7] for p in others[:5])
            why = (f" — none of the {len(others)} known peer(s) ({names}) is advertising: they are stopped, "
                   "asleep or off this LAN; if one is running on this LAN, multicast may be blocked (Wi-Fi "
                   "isolation, VPN, Windows 'Public' network)")
        else:
            why = (" — if peers run on this LAN, multicast may be blocked (Wi-Fi isolation, VPN, Windows 'Public' "
                   "network): add them with `palacectl peers add HOST:PORT`")
        check("mdns", "ok" if seen or live else "warn", f"advertising on {', '.join(lan)}; {seen} peer "
              f"address(es) seen by mDNS{why}")
    for target in net.views.targets_view():
        if "static" not in target["sources"]:
            continue
        if target["last_error"] and target["state"] not in ("connected", "connected (other direction)"):
            check(f"static peer {target['address']}", "fail", f"unreachable: {target['last_error']}")
        else:
            check(f"static peer {target['address']}", "ok", f"{target['state']}"
                  + (f" ({target['peer_id']})" if target["peer_id"] else ""))
    check("peers", "ok" if live else "warn",
          f"{len(live)} connected of {len(known)} known" + ("" if live else
                                                            "; nobody connected yet — see the checks above"))
    for p in known:
        label = labels.get(p["peer_id"]) or p["peer_id"][:7]
        if p["revoked"]:
            check(f"peer {label}", "warn", "revoked: refused on every link")
        elif p["state"] in ("error", "disconnected") and p["last_error"]:
            check(f"peer {label}", "warn", f"{p['state']}: {p['last_error']}")
    for peer_id, skew in sorted(net.presence.clock_skews().items()):
        if abs(skew) >= CLOCK_SKEW_WARNING_S:
            check(f"clock {peer_id[:7]}", "warn", f"clock differs from peer {peer_id[:7]} by {skew:+.1f} s: event "
                  "timestamps will disagree; enable time sync (NTP) on both machines")
    forks = await ctx.store.forks()
    if forks:
        check("forks", "fail", f"{len(forks)} forked event(s) refused: two daemons write the same origin "
              "(a copied home or restored backup); see `palacectl peers`")
    return {"checks": checks, "ok": all(c["status"] != "fail" for c in checks)}


OPS: Final = {
    "init": init,
    "invite": invite,
    "join": join,
    "revoke": revoke,
    "peers": peers,
    "peers_add": peers_add,
    "peers_remove": peers_remove,
    "replicated": replicated,
    "who": who,
    "fleet": fleet,
    "doctor": doctor,
}


# -- the feature's declaration --------------------------------------------------------------------

# Why 20: the watchers session start names (who is home in the palace now).
WATCHERS_SHOWN: Final = 20


async def session_part(ctx: Context, agent: str) -> dict[str, Any]:
    """Session start's watchers: who is home in the palace now, and whether the agent's own watch runs here."""
    watching = []
    for watcher in (await who(ctx, {}))["watchers"]:
        if not watcher.get("agent") or watcher.get("daemon_silent"):
            continue
        where = "here" if watcher.get("local") else ((watcher.get("daemon") or {}).get("label") or "a peer")
        entry = {"agent": watcher["agent"], "on": where, "worker": bool(watcher.get("worker"))}
        if entry not in watching:
            watching.append(entry)
    return {"watching": capped(watching, WATCHERS_SHOWN),
            "you_are_watching": any(w["agent"] == agent and w["on"] == "here" for w in watching)}


def _revoked(event: Mapping[str, Any]) -> str:
    metadata = event.get("metadata")
    peer = metadata.get("peer_id") if isinstance(metadata, Mapping) else None
    return f"A daemon was revoked: {str(peer)[:7] if peer else 'unknown'}"


TRIGGERS: Final = (Trigger("revocation", lambda e: e.get("type") == REVOKE_EVENT_TYPE, _revoked,
                           lambda e: "palacectl peers"),)

FEATURE: Final = Feature(name="fleet", ops=OPS, session=session_part, triggers=TRIGGERS,
                         inline_ops=frozenset({"who"}))
