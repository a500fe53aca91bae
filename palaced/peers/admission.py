"""Admission: who may connect to this daemon, and what an incoming connection becomes.

Owns: the bounds on what strangers can make us hold before they prove anything (connections in
total and per host, a per-host accept rate, the hosts tracked), each hit logged once and counted;
the TLS handshake as a server, which checks membership (a certificate from the palace CA); the
hand-off of certificate-less joiners to enrolment while invites are pending (``invites_pending``,
refreshed by ``refresh_invites``), with the names the palace's daemons bear (``name_holder``: two
never share one); and handing a member's authenticated stream to the link runner.
A failure of ours on one incoming connection is logged with its traceback, counted in the runner's
``failures`` and closes that connection only.

Imports the link runner and enrolment; never the dialler, gossip or reports.
"""

from __future__ import annotations

import logging
import socket
import ssl
from pathlib import Path
from typing import Final

import trio
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from palace_proto.peer import format_peer_address
from palace_proto.pki import CertificateError

from ..clock import unix_now, utc_datetime
from ..enrolment import serve_enrolment
from ..limits import LimitLog
from ..membership import Membership, load_ca_key
from ..store.aio import AsyncStore
from ..tls import peer_certificate
from ..tls_stream import TlsStream
from .links import HANDSHAKE_TIMEOUT_S, LinkRunner

__all__ = ["MAX_ACCEPTS_PER_HOST", "MAX_INBOUND", "MAX_INBOUND_PER_HOST", "Admission"]

LOGGER: Final = logging.getLogger("palaced.peers.admission")
# Bounds on what strangers can make us hold before they prove anything (each hit is logged once,
# see limits.py). Why 256 / 32: a palace is a handful of machines, each with a link or two; a LAN
# host holding 32 connections at once is not one daemon. Why 64 per 10 s: an honest peer redials
# with back-off (0.5 s doubling); a host dialling faster is storming, and each TLS handshake
# costs us CPU. Why 1024 hosts: the accounting itself must not grow without bound.
MAX_INBOUND: Final = 256
MAX_INBOUND_PER_HOST: Final = 32
ACCEPT_WINDOW_S: Final = 10.0
MAX_ACCEPTS_PER_HOST: Final = 64
MAX_TRACKED_HOSTS: Final = 1024


class Admission:
    """Takes each incoming TCP connection (``on_tcp``, the listener's handler) to a link, to
    enrolment, or to a refusal."""

    def __init__(self, *, home: Path, membership: Membership, store: AsyncStore, runner: LinkRunner,
                 server_ctx: ssl.SSLContext, enrol_ctx: ssl.SSLContext | None, limits: LimitLog) -> None:
        self.membership = membership
        self.store = store
        self.runner = runner
        self.limits = limits
        self._home = home
        self._server_ctx = server_ctx
        #: the context that lets certificate-less joiners through (the CA's daemon only)
        self._enrol_ctx = enrol_ctx
        self.invites_pending = False
        self._inbound = 0
        self._inbound_by_host: dict[str, int] = {}
        self._accepts_by_host: dict[str, list[float]] = {}
        #: daemon name (casefolded) -> the peer id it was issued to, since start: a daemon enrolled a
        #: moment ago may not have linked yet, so its certificate is not in the directory
        self._names_issued: dict[str, str] = {}
        #: local port -> set when the listener took it: this daemon's own test connections
        #: (``probe_self``), closed at once without a word in the log
        self._own_probes: dict[int, trio.Event] = {}

    def __repr__(self) -> str:
        return f"<Admission inbound={self._inbound} invites_pending={self.invites_pending}>"

    async def refresh_invites(self) -> None:
        """Whether the listener should let certificate-less joiners through to enrolment."""
        if self._enrol_ctx is None:
            return
        self.invites_pending = await self.store.pending_invites(int(unix_now())) > 0

    def _admit(self, host: str) -> bool:
        """May a new connection from ``host`` proceed to the TLS handshake? (Bounds: total, per host
        at once, per host per window; refusals are logged once per limit and counted.)"""
        if self._inbound >= MAX_INBOUND:
            self.limits.hit("inbound_total", "refusing peer connections: %d are open (the limit)", MAX_INBOUND)
            return False
        if self._inbound_by_host.get(host, 0) >= MAX_INBOUND_PER_HOST:
            self.limits.hit("inbound_per_host", "refusing peer connections from %s: %d are open from there (the "
                            "limit)", host, MAX_INBOUND_PER_HOST)
            return False
        now = trio.current_time()
        recent = [t for t in self._accepts_by_host.get(host, ()) if now - t < ACCEPT_WINDOW_S]
        if len(recent) >= MAX_ACCEPTS_PER_HOST:
            self._accepts_by_host[host] = recent
            self.limits.hit("accept_rate", "refusing peer connections from %s: more than %d in %.0f s (a reconnect "
                            "storm)", host, MAX_ACCEPTS_PER_HOST, ACCEPT_WINDOW_S)
            return False
        if host not in self._accepts_by_host and len(self._accepts_by_host) >= MAX_TRACKED_HOSTS:
            self._accepts_by_host = {h: ts for h, ts in self._accepts_by_host.items()
                                     if (ts and now - ts[-1] < ACCEPT_WINDOW_S) or self._inbound_by_host.get(h)}
            if len(self._accepts_by_host) >= MAX_TRACKED_HOSTS:
                self.limits.hit("tracked_hosts", "refusing peer connections: %d hosts connected within %.0f s (the "
                                "limit)", MAX_TRACKED_HOSTS, ACCEPT_WINDOW_S)
                return False
        recent.append(now)
        self._accepts_by_host[host] = recent
        return True

    async def on_tcp(self, tcp: trio.SocketStream) -> None:
        """One incoming connection, from accept to close (``trio.serve_listeners``' handler)."""
        try:
            host = str(tcp.socket.getpeername()[0])
        except OSError:
            host = "?"
        if not self._admit(host):
            await trio.aclose_forcefully(tcp)
            return
        self._inbound += 1
        self._inbound_by_host[host] = self._inbound_by_host.get(host, 0) + 1
        try:
            await self._accept(tcp)
        except Exception:
            # A bug in one connection must not take the daemon down: log it, drop the connection.
            self.runner.failures += 1
            LOGGER.exception("unexpected error on an incoming peer connection from %s", host)
        finally:
            self._inbound -= 1
            left = self._inbound_by_host.get(host, 1) - 1
            if left > 0:
                self._inbound_by_host[host] = left
            else:
                self._inbound_by_host.pop(host, None)
            await trio.aclose_forcefully(tcp)

    async def probe_self(self, host: str, port: int) -> None:
        """Connect to our own listener at ``host``:``port`` and wait until it has taken the
        connection (``palacectl doctor``'s check that the port accepts connections). The listener
        knows it by its source port and closes it without a word: a stranger's connection that
        says nothing is a warning in the log, our own test is not (issue 47).

        Raises:
            OSError: the connection failed. Never returns if something else answers on the port:
                the caller bounds the wait (``fail_after``).
        """
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        sock = trio.socket.socket(family, socket.SOCK_STREAM)
        with sock:
            await sock.bind(("::" if family == socket.AF_INET6 else "0.0.0.0", 0))
            local_port = sock.getsockname()[1]
            taken = self._own_probes[local_port] = trio.Event()
            try:
                await sock.connect((host, port))
                await taken.wait()
            finally:
                self._own_probes.pop(local_port, None)

    async def _accept(self, tcp: trio.SocketStream) -> None:
        try:
            peer = tcp.socket.getpeername()
            remote = format_peer_address(*peer[:2])
        except OSError:
            peer, remote = None, "?"
        probe = self._own_probes.pop(peer[1], None) if peer is not None else None
        if probe is not None:
            LOGGER.debug("our own test connection from %s (palacectl doctor): accepted and closed", remote)
            probe.set()
            return
        enrolling = self._enrol_ctx is not None and self.invites_pending
        stream = TlsStream(tcp, self._enrol_ctx if self._enrol_ctx is not None and enrolling else self._server_ctx,
                           server_side=True)
        try:
            with trio.fail_after(HANDSHAKE_TIMEOUT_S):
                await stream.do_handshake()
            cert = peer_certificate(stream, self.membership.ca_cert_pem, utc_datetime())
        except (trio.TooSlowError, trio.BrokenResourceError, ssl.SSLError, CertificateError, OSError) as exc:
            LOGGER.warning("refused a connection from %s: %s", remote, _describe_accept_error(exc))
            await trio.aclose_forcefully(stream)
            return
        if cert is None:
            try:
                joined = await serve_enrolment(stream, self.store, ca_key=self._load_ca_key,
                                      ca_pem=self.membership.ca_cert_pem, palace_id=self.membership.palace_id,
                                      palace_name=self.membership.palace_name, remote=remote,
                                      now=lambda: utc_datetime(), name_holder=self.name_holder)
                if joined is not None:
                    self._names_issued[joined.name.strip().casefold()] = joined.peer_id
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            finally:
                await trio.aclose_forcefully(stream)
                await self.refresh_invites()
            return
        await self.runner.run(stream, cert, dialer=cert.peer_id, remote=remote)

    def name_holder(self, name: str) -> str | None:
        """The peer id of the member daemon bearing ``name`` (ignoring case, as hostnames do), None
        if none does: this daemon, a certificate the directory holds, or one enrolled here since
        start. A revoked daemon's name is free again (its machine may join anew)."""
        key = name.strip().casefold()
        directory = self.runner.directory
        if self.membership.name.strip().casefold() == key:
            return self.membership.peer_id
        for cert in directory.certificates():
            if cert.name.strip().casefold() == key and not directory.is_revoked(cert.peer_id):
                return cert.peer_id
        issued = self._names_issued.get(key)
        return None if issued is None or directory.is_revoked(issued) else issued

    def _load_ca_key(self) -> Ed25519PrivateKey:
        return load_ca_key(self._home)


def _describe_accept_error(exc: BaseException) -> str:
    if isinstance(exc, ssl.SSLError):
        return f"TLS handshake failed ({exc.reason or exc}): not a member of this palace"
    if isinstance(exc, trio.BrokenResourceError):
        cause = exc.__cause__
        if isinstance(cause, ssl.SSLError):
            return f"TLS handshake failed ({cause.reason or cause}): not a member of this palace"
        return "the connection closed during the TLS handshake (not a member of this palace?)"
    if isinstance(exc, trio.TooSlowError):
        return "no TLS handshake within the time limit"
    return str(exc)
