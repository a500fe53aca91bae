"""mDNS discovery of palace peers on the local network (``_palace._tcp.local.``).

Owns: advertising this daemon (TXT ``palace``, ``peer``, ``v``) on its non-loopback IPv4
addresses, browsing for the other daemons of the same palace and turning zeroconf's callbacks
into ``on_seen(Sighting)`` / ``on_gone(peer_id)`` calls in trio context. It does not connect to
anyone (``replication`` and its callers do) and must not import ``palaced.app``.

The sync ``Zeroconf`` runs its own asyncio loop in its own thread. Blocking calls reach it
through ``trio.to_thread.run_sync``; browser callbacks, which run on zeroconf's threads, hop
into trio with ``trio.from_thread.run_sync(..., trio_token=token)``. The trio loop never blocks.

Error handling: if zeroconf cannot start (no multicast-capable interface, a socket error, a
name conflict) we log one warning and sleep until cancelled: discovery is simply off and the
daemon keeps running. Cancellation unregisters (goodbye packets) and closes zeroconf, shielded.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import re
from collections.abc import Callable, Iterable, Mapping
from typing import Final

import trio
from zeroconf import Error as ZeroconfError
from zeroconf import (
    IPVersion,
    ServiceBrowser,
    ServiceInfo,
    ServiceStateChange,
    Zeroconf,
)

from palace_proto.text import printable

from .interfaces import local_ipv4_addresses

__all__ = ["SERVICE_TYPE", "Sighting", "run_discovery", "sighting_from_record"]

LOGGER: Final = logging.getLogger("palaced.discovery")
SERVICE_TYPE: Final = "_palace._tcp.local."
# Why 3 s: a live responder answers in milliseconds (usually from cache, as the browser's
# answer carries SRV/TXT/A too); the bound only matters for a peer that vanished meanwhile.
RESOLVE_TIMEOUT_MS: Final = 3000
# Why 256: events are a handful per peer; a full buffer drops one (logged) rather than block
# zeroconf's thread, and the next "Updated" re-resolves.
EVENT_BUFFER: Final = 256
# Why 512 instances and 8 resolves at once: mDNS is open to anyone on the LAN. A palace has a
# handful of daemons; beyond these, new instance names are ignored (logged once) rather than
# tracked, and resolves queue for a slot rather than each holding a worker thread for 3 s.
MAX_INSTANCES: Final = 512
MAX_RESOLVING: Final = 8
# What "zeroconf could not start" looks like: sockets, no interfaces, zeroconf's own errors.
START_ERRORS: Final = (OSError, RuntimeError, ZeroconfError)
# Linux's <linux/sockios.h> and <net/if.h>: read an interface's flags, to skip addresses on an
# interface that is down or cannot multicast (WireGuard): zeroconf would send into the void there.


@dataclasses.dataclass(frozen=True, slots=True)
class Sighting:
    """A peer of our palace, as its mDNS record describes it."""

    peer_id: str
    palace_id: str
    version: int
    addresses: tuple[str, ...]  # "HOST:PORT", IPv6 as "[addr]:port"
    name: str  # the mDNS instance name


def sighting_from_record(name: str, properties: Mapping[bytes, bytes | None], addresses: Iterable[str],
                         port: int | None, *, palace_id: str, peer_id: str) -> Sighting | None:
    """The sighting a resolved record describes, or None (reason logged at debug) when the
    record is malformed, belongs to another palace, or is our own."""
    try:
        txt = {k.decode(): v.decode() for k, v in properties.items() if v is not None}
    except UnicodeDecodeError:
        LOGGER.debug("ignoring %s: TXT is not UTF-8", printable(name))
        return None
    palace, peer, version = txt.get("palace", ""), txt.get("peer", ""), txt.get("v", "")
    if not (palace and peer and version.isascii() and version.isdigit()):
        LOGGER.debug("ignoring %s: malformed TXT %s", printable(name), printable(repr(txt), 300))
        return None
    if palace != palace_id:
        LOGGER.debug("ignoring %s: another palace (%s)", printable(name), printable(palace))
        return None
    if peer == peer_id:
        LOGGER.debug("ignoring %s: ourselves", printable(name))
        return None
    addresses, hosts = list(addresses), []
    for address in addresses:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            continue
        hosts.append(f"[{ip}]:{port}" if ip.version == 6 else f"{ip}:{port}")
    if not hosts or not port:
        LOGGER.debug("ignoring %s: no usable address (%s, port %s)", printable(name), printable(repr(addresses), 200), port)
        return None
    return Sighting(peer_id=peer, palace_id=palace, version=int(version), addresses=tuple(hosts), name=name)


def _label(text: str) -> str:
    """``text`` as a DNS label fragment: letters, digits and single hyphens."""
    return re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-")


class _Mdns:
    """The zeroconf objects, owned across thread calls so a cancelled start still gets closed."""

    def __init__(self, instance: str, server: str, port: int, properties: dict[str, str]) -> None:
        self.instance, self.server, self.port, self.properties = instance, server, port, properties
        self.addresses: list[str] = []
        self.zc: Zeroconf | None = None
        self.browser: ServiceBrowser | None = None
        self.info: ServiceInfo | None = None  # set once registered

    def open(self, handler: Callable[..., None]) -> None:
        self.addresses = local_ipv4_addresses()
        info = ServiceInfo(SERVICE_TYPE, f"{self.instance}.{SERVICE_TYPE}", port=self.port, server=self.server,
                           properties=self.properties, parsed_addresses=self.addresses)
        self.zc = Zeroconf(interfaces=self.addresses, ip_version=IPVersion.V4Only, use_asyncio=False)
        # Browse first: registration probes for ~1.6 s and we lose nothing by listening meanwhile.
        self.browser = ServiceBrowser(self.zc, SERVICE_TYPE, handlers=[handler])
        self.zc.register_service(info)
        self.info = info

    def close(self) -> None:
        zc, browser, self.zc, self.browser = self.zc, self.browser, None, None
        try:
            if browser is not None:
                browser.cancel()
            if zc is not None:
                if self.info is not None:
                    zc.unregister_service(self.info)  # goodbye packets
                zc.close()
        except START_ERRORS as exc:
            LOGGER.warning("mDNS shutdown was not clean: %s", exc)


async def run_discovery(*, palace_id: str, peer_id: str, name: str, port: int, version: int,
                        on_seen: Callable[[Sighting], None], on_gone: Callable[[str], None],
                        task_status: trio.TaskStatus[bool] = trio.TASK_STATUS_IGNORED) -> None:
    """Advertise this daemon and report the peers of ``palace_id`` until cancelled.

    Args:
        palace_id, peer_id, version: published in TXT (``palace``, ``peer``, ``v``).
        name: a human name, part of the instance name (after the short peer id).
        port: the TCP port peers should connect to.
        on_seen: called (in trio context) when a peer of our palace is resolved, and again
            whenever its record changes; it must be idempotent and must not block.
        on_gone: called with the peer id when a peer we reported withdraws its record.

    ``task_status.started(True)`` fires once we browse and our record is registered;
    ``started(False)`` once we have given up (discovery off), so ``nursery.start`` never hangs.
    """
    token = trio.lowlevel.current_trio_token()
    send, receive = trio.open_memory_channel[tuple[ServiceStateChange, str]](EVENT_BUFFER)

    def on_change(zeroconf: Zeroconf, service_type: str, name: str, state_change: ServiceStateChange) -> None:
        """Runs on zeroconf's thread: hand the event to trio, never block."""
        try:
            trio.from_thread.run_sync(send.send_nowait, (state_change, name), trio_token=token)
        except trio.WouldBlock:
            if not dropped["events"]:
                dropped["events"] = True
                LOGGER.warning("mDNS events dropped: discovery is %d events behind (logged once)", EVENT_BUFFER)
        except (trio.RunFinishedError, trio.BrokenResourceError, trio.ClosedResourceError):
            pass  # shutting down

    short = _label(peer_id)[:12].lower() or "peer"
    instance = f"{_label(name)[:40] or 'palaced'}-{short}"
    mdns = _Mdns(instance, f"palace-{short}.local.", port, {"palace": palace_id, "peer": peer_id, "v": str(version)})
    known: dict[str, str] = {}  # instance name -> peer id we reported through on_seen
    generation: dict[str, int] = {}  # instance name -> newest event, so a stale resolve is dropped
    resolving = trio.CapacityLimiter(MAX_RESOLVING)
    dropped = {"instances": False, "events": False}

    def forget(instance_name: str) -> None:
        gone = known.pop(instance_name, None)
        if gone is not None and gone not in known.values():
            on_gone(gone)

    async def resolve(instance_name: str, gen: int, zc: Zeroconf) -> None:
        try:
            async with resolving:
                if generation.get(instance_name) != gen:
                    return  # superseded while it waited for a slot
                info = await trio.to_thread.run_sync(zc.get_service_info, SERVICE_TYPE, instance_name,
                                                     RESOLVE_TIMEOUT_MS)
        except START_ERRORS as exc:
            LOGGER.debug("could not resolve %s: %s", printable(instance_name), exc)
            return
        if generation.get(instance_name) != gen:
            return  # removed or updated meanwhile; the newer event decides
        if info is None:
            LOGGER.debug("could not resolve %s in %d ms", printable(instance_name), RESOLVE_TIMEOUT_MS)
            return
        sighting = sighting_from_record(instance_name, info.properties, info.parsed_addresses(), info.port,
                                        palace_id=palace_id, peer_id=peer_id)
        if sighting is None:
            forget(instance_name)  # e.g. it moved to another palace
        else:
            known[instance_name] = sighting.peer_id
            on_seen(sighting)

    try:
        try:
            await trio.to_thread.run_sync(mdns.open, on_change)
        except START_ERRORS as exc:
            LOGGER.warning("mDNS discovery is off: zeroconf could not start on %s (%s: %s)",
                           ", ".join(mdns.addresses) or "any address", type(exc).__name__, exc)
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(mdns.close)
            task_status.started(False)
            await trio.sleep_forever()
        assert mdns.zc is not None
        LOGGER.info("mDNS: advertising %s on %s port %d", instance, ", ".join(mdns.addresses), port)
        task_status.started(True)
        async with trio.open_nursery() as nursery:
            async for state_change, instance_name in receive:
                if instance_name not in generation and len(generation) >= MAX_INSTANCES:
                    if not dropped["instances"]:
                        dropped["instances"] = True
                        LOGGER.warning("mDNS: ignoring new services beyond %d (logged once); someone on this network "
                                       "announces a great many", MAX_INSTANCES)
                    continue
                gen = generation[instance_name] = generation.get(instance_name, 0) + 1
                if state_change is ServiceStateChange.Removed:
                    forget(instance_name)
                    del generation[instance_name]
                else:  # Added or Updated: (re-)resolve
                    nursery.start_soon(resolve, instance_name, gen, mdns.zc)
    finally:
        receive.close()
        with trio.CancelScope(shield=True):
            await trio.to_thread.run_sync(mdns.close)
