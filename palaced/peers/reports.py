"""Daemon reports: what each daemon says about itself for the fleet view (``palacectl fleet``).

Owns: this daemon's report — its links with their state and lag (as ``peers`` shows them), and the
rest as ``status`` sees it (``facts``), content in ``palace_proto.reports`` — signed with its key and
announced at start, on a heartbeat, and once links settle after one of them changed state (heard
through the registry's change hook); the newest report heard from each other member daemon, kept
only if it verifies and holds a report, and relayed to every other link; and what the ``fleet``
operation reads (``current``, ``heard``).

Sends through gossip.py and reads views.py; the registry tells it of changes, it never reaches
into dialling or admission.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Final

import trio
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from palace_proto.overlay import gossip_period
from palace_proto.peer import Report, report_signing_bytes
from palace_proto.reports import decode_report, encode_report
from palace_proto.text import printable

from ..clock import unix_now_us, utc_now_seconds
from ..limits import LimitLog
from ..members import MemberDirectory
from ..membership import Membership
from ..store.aio import AsyncStore
from .gossip import Gossip, GossipRecord
from .registry import LinkChange, LinkRegistry
from .views import PeerViews

if TYPE_CHECKING:
    from .link import PeerLink

__all__ = ["REPORT_HEARTBEAT_S", "REPORT_SETTLE_S", "REPORT_SILENT_S", "HeardReport", "Reports"]

LOGGER: Final = logging.getLogger("palaced.peers.reports")
# Why 30 s: a report (up to 16 KiB) goes to every link of every daemon on each beat; the fleet view
# needs health and lag fresh to the minute, and a link's change of state goes out sooner anyway
# (REPORT_SETTLE_S). A daemon whose report is older than 3 beats is "silent".
REPORT_HEARTBEAT_S: Final = 30.0
REPORT_SILENT_S: Final = 3 * REPORT_HEARTBEAT_S
# Why 2 s: a link coming up changes state several times within a second (connected, hello, vectors,
# caught up); one report once they settle says it all, and a flapping link costs a report per 2 s.
REPORT_SETTLE_S: Final = 2.0


@dataclasses.dataclass(frozen=True, slots=True)
class HeardReport:
    """Another daemon's newest report that verified, read once (``decode_report``) when it came."""

    report: Report
    content: dict[str, Any]
    #: trio.current_time() when it came (the "silent" judgement) and the same as UTC (for display)
    heard: float
    heard_at: str


class Reports:
    """This daemon's report and the newest one heard from each other daemon."""

    def __init__(self, *, peer_id: str, membership: Membership, identity: Ed25519PrivateKey, store: AsyncStore,
                 directory: MemberDirectory, registry: LinkRegistry, views: PeerViews, gossip: Gossip,
                 facts: Callable[[], Awaitable[Mapping[str, Any]]] | None, limits: LimitLog) -> None:
        self.peer_id = peer_id
        self.membership = membership
        self.identity = identity
        self.store = store
        self.directory = directory
        self.registry = registry
        self.views = views
        self.gossip = gossip
        self.limits = limits
        #: what this daemon's report says beyond its links (release, start, events, health, forks,
        #: watchers), gathered as ``status`` gathers it: handlers/maintenance.py ``report_facts``
        self._facts = facts
        self._serial = 0
        #: this daemon's newest report, as sent (None until the first is built, at start)
        self._own: Report | None = None
        #: the (state, direction) of each link in the newest report, to tell a change of state
        self._reported_links: dict[str, tuple[Any, Any]] = {}
        self._due = trio.Event()
        #: other daemons' newest reports: at most one per member daemon (a certificate is needed)
        self._heard: dict[str, HeardReport] = {}
        #: which peers' links the report names (overlay.py sets it: the active view and live links)
        self.keeps: Callable[[str], bool] = lambda peer_id: True
        registry.subscribe(self._on_change)
        gossip.add_source(self._for_new_link)

    def _period(self) -> float:
        """The heartbeat (``REPORT_HEARTBEAT_S``, longer in a palace of more than ten: ``gossip_period``)."""
        return gossip_period(REPORT_HEARTBEAT_S, len(self.directory.certificates()))

    def __repr__(self) -> str:
        return f"<Reports {self.peer_id[:7]} heard={len(self._heard)} serial={self._serial}>"

    def _on_change(self, change: LinkChange) -> None:
        """A link may have changed state: the report loop looks within ``REPORT_SETTLE_S``."""
        if change.kind == "removed" and not change.current:
            return  # a link replaced earlier: its peer's link is the new one
        self._due.set()

    def _for_new_link(self) -> list[GossipRecord]:
        """A new link is sent our report (the one naming that link follows once it settles), then
        every other daemon's we hold."""
        own: list[GossipRecord] = [self._own] if self._own is not None else []
        return own + [heard.report for heard in self._heard.values()]

    async def serve(self) -> None:
        """Announce this daemon's report at start, every ``REPORT_HEARTBEAT_S``, and once links
        settle after one of them changed state. A link's own events (connected, lost, failed,
        revoked, the peer's progress) wake the loop; a link in a passing state (connecting,
        catching up) is looked at again every ``REPORT_SETTLE_S``, because it ends without an
        event of its own (the last of our pulls applied). A look that finds every link in the
        state last reported sends nothing until the heartbeat."""
        next_beat = trio.current_time()
        passing = False
        failed_before = False
        while True:
            with trio.move_on_at(min(next_beat, trio.current_time() + REPORT_SETTLE_S) if passing else next_beat):
                await self._due.wait()
                await trio.sleep(REPORT_SETTLE_S)
            self._due = trio.Event()  # after the settling: what changed by now is in this report
            beat = trio.current_time() >= next_beat
            try:
                links = await self._links()
                passing = any(link["state"] in ("connecting", "catching up") for link in links)
                if beat or _link_states(links) != self._reported_links:
                    await self._announce(links)
                    next_beat = trio.current_time() + self._period()
            except Exception as exc:
                # A report is worth less than the daemon: say so (with a traceback the first time:
                # it is a bug, or the store failing) and try again on the next beat.
                if not failed_before:
                    LOGGER.exception("could not announce this daemon's report (retried every %.0f s)",
                                     REPORT_HEARTBEAT_S)
                    failed_before = True
                self.limits.hit("report_failed", "could not announce this daemon's report: %s: %s",
                                type(exc).__name__, exc)
                next_beat = trio.current_time() + self._period()

    async def _links(self) -> list[dict[str, Any]]:
        """This daemon's own links as its report carries them: every peer it has a record of (met,
        dialled or seen by mDNS) and keeps a link to (``keeps``: in a palace of partial views, the
        active view and the links up; the other members are no link of ours), with the state and
        lag ``peers`` shows; connected ones first, as the report keeps only the first ``MAX_REPORT_LINKS``."""
        heads = self.store.version_vector()  # kept in memory: no read
        keeps = self.keeps
        views = [p for p in self.views.peers_view(heads) if p["peer_id"] in self.registry.records and keeps(p["peer_id"])]
        views.sort(key=lambda p: (p["state"] not in ("live", "catching up", "connecting"), p["peer_id"]))
        return [{key: p[key] for key in ("peer_id", "state", "direction", "last_contact", "we_lack", "they_lack")}
                for p in views]

    async def _content(self, links: list[dict[str, Any]]) -> dict[str, Any]:
        """The whole report (palace_proto.reports): ``links``, and the rest as ``status`` sees it."""
        content: dict[str, Any] = {"role": self.membership.role, "origin": self.store.origin_id, "links": links}
        try:
            content.update(await self._facts() if self._facts is not None else {})
        except Exception as exc:
            # The report still goes out (its links are worth having), saying what went wrong; a
            # failing store shows in status and the log as well.
            self.limits.hit("report_facts", "could not gather this daemon's status for its report: %s: %s",
                            type(exc).__name__, exc)
            content["health"] = {"ok": False, "problems": [
                f"could not gather this daemon's status: {type(exc).__name__}: {exc}"]}
        return content

    async def _announce(self, links: list[dict[str, Any]]) -> None:
        """Sign a new report and hand it to every link."""
        encoded = encode_report(await self._content(links))
        # The daemon's clock in µs (as presence): a restarted daemon's reports still win over its old ones.
        self._serial = max(self._serial + 1, unix_now_us())
        name = self.membership.name
        signature = self.identity.sign(report_signing_bytes(self.peer_id, name, self._serial, encoded))
        self._own = Report(self.peer_id, name, self._serial, encoded, signature)
        self._reported_links = _link_states(links)
        self.gossip.broadcast(self._own)

    async def current(self) -> dict[str, Any]:
        """This daemon's report as it would go out now, read back as its peers read it."""
        return decode_report(encode_report(await self._content(await self._links())))

    def heard(self) -> list[dict[str, Any]]:
        """Other daemons' newest reports (revoked daemons left out), in peer id order: ``{peer_id,
        name, report, heard_at, silent}``; the name is the one its certificate gives."""
        now, silent_after = trio.current_time(), gossip_period(REPORT_SILENT_S, len(self.directory.certificates()))
        out = []
        for peer_id, heard in sorted(self._heard.items()):
            if self.directory.is_revoked(peer_id):
                continue
            cert = self.directory.certificate_of_peer(peer_id)
            out.append({"peer_id": peer_id, "name": printable(cert.name if cert else heard.report.name, 64),
                        "report": heard.content, "heard_at": heard.heard_at,
                        "silent": now - heard.heard > silent_after})
        return out

    def receive(self, link: PeerLink, report: Report) -> None:
        """Keep and relay another daemon's report (``LinkHooks.link_report``) if it is newer than the
        one we hold, comes from a member daemon we know and that is not revoked, verifies with that
        daemon's key and holds a JSON object; anything else is ignored and counted
        (``status.network.limits``). So what is kept is bounded by the member directory: one report
        per daemon, at most 16 KiB each."""
        if report.peer_id == self.peer_id:
            return  # our own, back through a relay: ours is newer
        known = self._heard.get(report.peer_id)
        if known is not None and known.report.serial >= report.serial:
            if known.report.serial == report.serial:  # the same record again: the tree prunes its sender
                self.gossip.duplicate(report, link)
            return
        about, relay = printable(report.peer_id, 80), printable(link.peer_id, 80)
        cert = self.directory.certificate_of_peer(report.peer_id)
        if cert is None:
            # Invented, or a race (its bindings travel ahead of its gossip on every link, so they
            # come first): its next report will do once it is known.
            self.limits.hit("report_unknown_daemon", "ignored a daemon report for %s relayed by %s: no member "
                            "certificate of it is known here", about, relay)
            return
        if self.directory.is_revoked(report.peer_id):
            self.limits.hit("report_revoked_daemon", "ignored a daemon report for revoked daemon %s relayed by %s",
                            about, relay)
            return
        try:
            Ed25519PublicKey.from_public_bytes(cert.public_key).verify(
                report.signature, report_signing_bytes(report.peer_id, report.name, report.serial, report.report))
        except InvalidSignature:
            self.limits.hit("bad_report", "ignored a daemon report for %s relayed by %s: bad signature", about, relay)
            return
        try:
            content = decode_report(report.report)
        except ValueError as exc:
            # Signed by its daemon, yet not a report: a bug or a hostile member. Not relayed either.
            self.limits.hit("bad_report_content", "ignored a daemon report of %s: %s", about, exc)
            return
        self._heard[report.peer_id] = HeardReport(report, content, trio.current_time(), utc_now_seconds())
        self.gossip.relay(report, link)

    def forget(self, peer_id: str) -> None:
        """Drop the report heard from ``peer_id`` (it was revoked)."""
        self._heard.pop(peer_id, None)


def _link_states(links: list[dict[str, Any]]) -> dict[str, tuple[Any, Any]]:
    """What of the links makes a new report worth sending before the heartbeat: each link's state
    and direction, a link catching up counted as live (every burst of writes sets links catching
    up for a moment: a report each time would go round the palace per burst; the heartbeat
    carries the lag)."""
    return {link["peer_id"]: ("live" if link["state"] == "catching up" else link["state"], link["direction"])
            for link in links}
