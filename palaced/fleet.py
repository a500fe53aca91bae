"""Operations about the palace and the fleet: init, invite, join, revoke, peers, replicated
waits, fleet-wide ``who`` and ``doctor``.

Owns: the local-API handlers that need membership or the network (mixed into ``Service``).
Roles are enforced here for local writes: an observer daemon refuses every write with
``read_only``. Invites and revocations need the palace CA key, which only the daemon that ran
``init`` holds; other members get a clear ``not_permitted`` naming that daemon.
"""

from __future__ import annotations

import datetime
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.errors import ApiError, NotFound, ValidationError
from palace_proto.peer import format_peer_address, parse_peer_address
from palace_proto.pki import REVOKE_EVENT_TYPE, Invite, InviteError, Revocation, ca_fingerprint
from palace_proto.validation import AppendRequest, clean_optional, clean_required

from .enrolment import enrol
from .interfaces import interface_ipv4_addresses
from .membership import Membership, create_palace, load_ca_key, save_joined
from .network import ListenError
from .store import WriteContext

if TYPE_CHECKING:
    from .members import MemberDirectory
    from .network import Network
    from .service import Service

__all__ = ["FleetOps", "ReadOnly", "replicated_args"]

LOGGER: Final = logging.getLogger("palaced.fleet")
DEFAULT_INVITE_TTL_S: Final = 24 * 3600
MAX_INVITE_TTL_S: Final = 30 * 24 * 3600
MAX_REPLICATED_TIMEOUT_MS: Final = 3_600_000
DEFAULT_REPLICATED_TIMEOUT_MS: Final = 30_000
CERT_EXPIRY_WARNING_DAYS: Final = 30
CLOCK_SKEW_WARNING_S: Final = 2.0


class ReadOnly(ApiError):
    code = "read_only"


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def replicated_args(args: Mapping[str, Any]) -> tuple[int, float]:
    count = args.get("replicated", 0)
    if type(count) is not int or count < 0 or count > 1000:
        raise ValidationError("replicated must be an integer from 0 to 1000 (the number of peers)", field="replicated")
    timeout_ms = args.get("timeout_ms", DEFAULT_REPLICATED_TIMEOUT_MS)
    if type(timeout_ms) is not int or not 0 <= timeout_ms <= MAX_REPLICATED_TIMEOUT_MS:
        raise ValidationError(f"timeout_ms must be an integer from 0 to {MAX_REPLICATED_TIMEOUT_MS}",
                              field="timeout_ms")
    return count, timeout_ms / 1000


class FleetOps:
    """Mixin for ``Service``: the palace and fleet operations."""

    membership: Membership | None
    network: Network | None
    directory: MemberDirectory | None
    start_network: Callable[[Membership], Awaitable[None]] | None

    # -- roles ---------------------------------------------------------------------------------

    def require_writer(self) -> None:
        """Refuse local writes on an observer daemon (roles are enforced by every receiver too)."""
        if self.membership is not None and self.membership.role == "observer":
            raise ReadOnly(f"this daemon is a read-only observer of palace {self.membership.palace_name or self.membership.palace_id}; "
                           "it receives everything and writes nothing — append from a member's machine")

    def _require_member(self: Service) -> Membership:  # type: ignore[misc]
        if self.membership is None:
            raise ApiError("this daemon has not joined a palace; run `palacectl init` on the first machine, "
                           "then `palacectl invite` there and `palacectl join CODE` here", code="not_member")
        return self.membership

    def _require_ca(self: Service) -> Membership:  # type: ignore[misc]
        membership = self._require_member()
        if not membership.can_invite:
            raise ApiError("only the daemon that created the palace (ran `palacectl init`) holds the palace key; "
                           "run this command there", code="not_permitted")
        return membership

    def _ca_key(self: Service) -> Ed25519PrivateKey:  # type: ignore[misc]
        return load_ca_key(self.config.home)

    async def _joined(self: Service, membership: Membership) -> None:  # type: ignore[misc]
        self.membership = membership
        if self.start_network is not None:
            try:
                await self.start_network(membership)
            except ListenError as exc:
                raise ApiError(f"this daemon is now a member of {membership.palace_id}, but {exc.message}; "
                               "then restart palaced", code="internal") from None

    # -- membership ----------------------------------------------------------------------------

    async def op_init(self: Service, args: Mapping[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
        """Make this daemon the first member of a new palace (a new CA and our certificate)."""
        palace_name = clean_optional("name", args.get("name")) or socket.gethostname()
        name = clean_optional("daemon_name", args.get("daemon_name")) or socket.gethostname()
        assert self.identity is not None
        membership = await trio.to_thread.run_sync(create_palace, self.config.home, self.identity, palace_name, name,
                                                   _now())
        LOGGER.info("created palace %s (%s); this daemon is its first member", membership.palace_id, palace_name)
        await self._joined(membership)
        return self._membership_view()

    def _membership_view(self: Service) -> dict[str, Any]:  # type: ignore[misc]
        assert self.membership is not None
        view = self.membership.to_wire()
        view["listen"] = self.network.listen_addresses if self.network else []
        return view

    async def op_invite(self: Service, args: Mapping[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
        membership = self._require_ca()
        role = args.get("role", "member")
        if role not in ("member", "observer"):
            raise ValidationError("role must be 'member' or 'observer'", field="role")
        ttl_s = args.get("ttl_s", DEFAULT_INVITE_TTL_S)
        if type(ttl_s) is not int or not 60 <= ttl_s <= MAX_INVITE_TTL_S:
            raise ValidationError(f"ttl must be between 1 minute and {MAX_INVITE_TTL_S // 86400} days", field="ttl_s")
        address = clean_optional("address", args.get("address"))
        if address is None:
            assert self.network is not None
            host, port = parse_peer_address(self.network.listen_addresses[0])
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
        expires_at = int(time.time()) + ttl_s
        invite = Invite(membership.palace_id, address, ca_fingerprint(membership.ca_cert_pem), secret, role,
                        expires_at)

        def job(ctx: WriteContext) -> None:
            ctx.conn.execute("INSERT INTO invites (invite_id, secret, role, expires_at, created_at) VALUES (?,?,?,?,?)",
                             (invite.invite_id, secret, role, expires_at, _now().strftime("%Y-%m-%dT%H:%M:%SZ")))

        await self.astore.write(job)
        assert self.network is not None
        await self.network.refresh_invites()
        LOGGER.info("issued a %s invite (expires %s) for %s", role, time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                                   time.gmtime(expires_at)), address)
        return {"code": invite.encode(), "role": role, "address": address, "palace_id": membership.palace_id,
                "expires_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(expires_at))}

    async def op_join(self: Service, args: Mapping[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
        if self.membership is not None:
            raise ApiError(f"this daemon already belongs to palace {self.membership.palace_id} "
                           f"({self.membership.palace_name}); a daemon is a member of one palace", code="invalid_argument")
        code = clean_required("code", args.get("code"))
        try:
            invite = Invite.decode(code)
            invite.check_not_expired(time.time())
        except InviteError as exc:
            raise ValidationError(str(exc), field="code") from None
        address = clean_optional("address", args.get("address"))
        name = clean_optional("name", args.get("name")) or socket.gethostname()
        assert self.identity is not None
        palace_name, ca_pem, cert_pem, used = await enrol(invite, self.store.public_key, name, address, _now())
        membership = await trio.to_thread.run_sync(lambda: save_joined(
            self.config.home, self.identity, palace_name=palace_name, ca_pem=ca_pem, member_pem=cert_pem, now=_now()))
        LOGGER.info("joined palace %s (%s) as %s via %s", membership.palace_id, palace_name, membership.role, used)
        await self._joined(membership)
        assert self.network is not None
        self.network.add_target(used, "invite")
        return self._membership_view()

    async def op_revoke(self: Service, args: Mapping[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
        membership = self._require_ca()
        peer_id = clean_required("peer_id", args.get("peer_id")).upper()
        if peer_id == membership.peer_id:
            raise ValidationError("a daemon cannot revoke itself", field="peer_id")
        assert self.directory is not None
        cert = self.directory.certificate_of_peer(peer_id)
        if cert is None:
            raise NotFound(f"no member {peer_id!r} is known here (see `palacectl peers` for peer ids)")
        if self.directory.is_revoked(peer_id):
            raise ValidationError(f"peer {peer_id} is already revoked", field="peer_id")
        cutoffs = await self.astore.read(self.store.origins_of_key, cert.public_key)
        revocation = Revocation(membership.palace_id, peer_id, cert.public_key, tuple(sorted(cutoffs.items())),
                                _now().strftime("%Y-%m-%dT%H:%M:%SZ")).signed(self._ca_key())
        directory = self.directory
        req = AppendRequest.from_wire(
            {"type": REVOKE_EVENT_TYPE, "stream": "palace", "room": "members", "from_agent": "palaced",
             "topic": "revoke", "body": f"revoked {peer_id} ({cert.name})", "metadata": revocation.to_metadata()},
            self.limits)

        def job(ctx: WriteContext) -> dict[str, Any]:
            event = ctx.append(req)
            directory.revoke(revocation)
            return event

        event = await self.astore.write(job)
        LOGGER.warning("revoked %s (%s)", peer_id, cert.name)
        return {"revoked": peer_id, "name": cert.name, "event": event}

    # -- peers ---------------------------------------------------------------------------------

    async def op_peers(self: Service, args: Mapping[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
        self._require_member()
        assert self.network is not None
        heads = await self.astore.read(self.store.version_vector)
        forks = await self.astore.read(self.store.forks)
        return {"peer_id": self.membership.peer_id, "listen": self.network.listen_addresses,
                "mdns": self.network.mdns_state, "peers": self.network.peers_view(heads), "forks": forks}

    async def op_peers_add(self: Service, args: Mapping[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
        self._require_member()
        assert self.network is not None
        try:
            address = await self.network.add_static(clean_required("address", args.get("address")))
        except ValueError as exc:
            raise ValidationError(f"address: {exc}", field="address") from None
        return {"added": address}

    async def op_peers_remove(self: Service, args: Mapping[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
        self._require_member()
        assert self.network is not None
        address = clean_required("address", args.get("address"))
        try:
            removed = await self.network.remove_static(address)
        except ValueError as exc:
            raise ValidationError(f"address: {exc}", field="address") from None
        if not removed:
            raise NotFound(f"{address} is not a static peer (see `palacectl peers`)")
        return {"removed": format_peer_address(*parse_peer_address(address))}

    # -- replicated writes ---------------------------------------------------------------------

    async def wait_replicated(self: Service, event: Mapping[str, Any], count: int,  # type: ignore[misc]
                              timeout_s: float) -> dict[str, Any]:
        if count == 0:
            return {"replicated": [], "replicated_count": 0, "timed_out": False}
        if self.network is None:
            raise ApiError("this daemon has not joined a palace: no peer can hold the event "
                           "(run `palacectl init` / `palacectl join`)", code="not_member")
        holders = await self.network.wait_replicated(event["origin"], event["origin_seq"], count, timeout_s)
        return {"replicated": holders, "replicated_count": len(holders), "timed_out": len(holders) < count}

    async def op_replicated(self: Service, args: Mapping[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
        count, timeout_s = replicated_args(args)
        event = await self._get_event_or_404(args.get("event_id"))
        return {"event_id": event["id"], **await self.wait_replicated(event, count, timeout_s)}

    # -- who and doctor ------------------------------------------------------------------------

    def remote_watchers(self) -> list[dict[str, Any]]:
        return self.network.remote_watchers() if self.network is not None else []

    async def op_doctor(self: Service, args: Mapping[str, Any]) -> dict[str, Any]:  # type: ignore[misc]
        checks: list[dict[str, str]] = []

        def check(name: str, status: str, detail: str) -> None:
            checks.append({"check": name, "status": status, "detail": detail})

        m = self.membership
        if m is None:
            check("palace", "fail", "this daemon has not joined a palace, so it opens no network port and no peer "
                  "can see it: run `palacectl init` on the first machine, `palacectl invite` there, and "
                  "`palacectl join CODE` here")
            return {"checks": checks, "ok": False}
        check("palace", "ok", f"member of {m.palace_name or m.palace_id} ({m.palace_id}) as {m.role}, peer id {m.peer_id}")
        days_left = (m.member.not_after - _now()).days
        assert self.directory is not None and self.network is not None
        if self.directory.is_revoked(m.peer_id):
            check("certificate", "fail", "this daemon has been revoked by the palace: peers refuse it; ask the palace "
                  "owner for a new invite and join again from a fresh home")
        elif days_left < 0:
            check("certificate", "fail", "this daemon's certificate has expired; join again with a new invite")
        elif days_left < CERT_EXPIRY_WARNING_DAYS:
            check("certificate", "warn", f"this daemon's certificate expires in {days_left} days; join again soon")
        else:
            check("certificate", "ok", f"valid until {m.member.not_after:%Y-%m-%d}")
        net = self.network
        if not net.listen_addresses:
            check("listening", "fail", "palaced is not listening for peers (see its log for the bind error)")
        else:
            host, port = parse_peer_address(net.listen_addresses[0])
            probe = "127.0.0.1" if host in ("0.0.0.0", "::") else host
            try:
                with trio.fail_after(2):
                    conn = await trio.open_tcp_stream(probe, port)
                    await conn.aclose()
                reach = "accepts connections"
            except (OSError, trio.TooSlowError) as exc:
                reach = f"but a test connection failed ({exc})"
            where = ("on every interface" if host in ("0.0.0.0", "::")
                     else "on loopback only: other machines cannot reach it (use --listen 0.0.0.0:PORT)"
                     if host.startswith("127.") or host == "::1" else f"on {host} only")
            check("listening", "ok" if reach == "accepts connections" and not host.startswith("127.") else "warn",
                  f"port {port} {where}; {reach}; peers need this TCP port open in firewalls")
        lan = await trio.to_thread.run_sync(lambda: interface_ipv4_addresses(multicast=True))
        if net.mdns_state == "off":
            check("mdns", "warn", "mDNS is off (--no-mdns or network.mdns = false): only static and remembered peers "
                  "are dialled; add peers with `palacectl peers add HOST:PORT`")
        elif not lan:
            check("mdns", "warn", "no LAN interface with an IPv4 address: mDNS cannot see other machines")
        else:
            seen = sum(1 for t in net.targets_view() if "mdns" in t["sources"])
            check("mdns", "ok" if seen else "warn",
                  f"advertising on {', '.join(lan)}; {seen} peer address(es) seen by mDNS"
                  + ("" if seen else " — if peers run on this LAN, multicast may be blocked (Wi-Fi isolation, "
                     "VPN, Windows 'Public' network): add them with `palacectl peers add HOST:PORT`"))
        for target in net.targets_view():
            if "static" not in target["sources"]:
                continue
            if target["last_error"] and target["state"] not in ("connected", "connected (other direction)"):
                check(f"static peer {target['address']}", "fail", f"unreachable: {target['last_error']}")
            else:
                check(f"static peer {target['address']}", "ok", f"{target['state']}"
                      + (f" ({target['peer_id']})" if target["peer_id"] else ""))
        heads = await self.astore.read(self.store.version_vector)
        peers = [p for p in net.peers_view(heads) if p["peer_id"]]
        live = [p for p in peers if p["state"] in ("live", "catching up")]
        check("peers", "ok" if live else "warn",
              f"{len(live)} connected of {len(peers)} known" + ("" if live else
                                                                "; nobody connected yet — see the checks above"))
        for p in peers:
            if p["revoked"]:
                check(f"peer {p['name'] or p['peer_id'][:7]}", "warn", "revoked: refused on every link")
            elif p["state"] in ("error", "disconnected") and p["last_error"]:
                check(f"peer {p['name'] or p['peer_id'][:7]}", "warn", f"{p['state']}: {p['last_error']}")
        for peer_id, skew in sorted(net.clock_skews().items()):
            if abs(skew) >= CLOCK_SKEW_WARNING_S:
                check(f"clock {peer_id[:7]}", "warn", f"clock differs from peer {peer_id[:7]} by {skew:+.1f} s: event "
                      "timestamps will disagree; enable time sync (NTP) on both machines")
        forks = await self.astore.read(self.store.forks)
        if forks:
            check("forks", "fail", f"{len(forks)} forked event(s) refused: two daemons write the same origin "
                  "(a copied home or restored backup); see `palacectl peers`")
        return {"checks": checks, "ok": all(c["status"] != "fail" for c in checks)}

