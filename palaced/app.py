"""Nursery wiring: home directory, lock, identity, store, bus, writer, handlers and API, and clean
shutdown.

Owns: the daemon's lifetime. ``serve(config)`` builds the handlers' ``Context`` and op table once
(palaced/handlers), runs until cancelled (SIGTERM/SIGINT in __main__), then stops accepting, lets
in-flight writes commit, closes the database and returns. The parts that come up later fill in
their slot of the context: the network and member directory when this daemon belongs to a palace
(at start, or on ``init``/``join`` through ``start_network``), the API's address once it listens.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import trio

from palace_proto.bindings import OriginBinding, legacy_binding_signature
from palace_proto.ids import fingerprint
from palace_proto.peer import parse_peer_address
from palace_proto.pki import REVOKE_EVENT_TYPE

from .api import serve_api
from .bus import EventBus
from .clock import utc_datetime
from .config import Config
from .features import features
from .handlers import Context, op_table
from .handlers.log import LogFollower
from .handlers.maintenance import report_facts
from .identity import load_or_create_identity
from .members import BindingError, MemberDirectory
from .membership import Membership, load_membership
from .notify.notifier import Notifier
from .peers import Network, NetworkSettings
from .store import DB_FILENAME, Store, save_bindings
from .store.aio import AsyncStore

__all__ = ["AlreadyRunning", "prepare_home", "serve"]

LOGGER: Final = logging.getLogger("palaced.app")
# Why 5 s: long enough for any queued batch to commit, short enough for a service manager's stop.
SHUTDOWN_GRACE_S: Final = 5.0


class AlreadyRunning(Exception):
    pass


def prepare_home(home: Path) -> None:
    """Create the home directory with mode 0700 (only this user may read the log or the key)."""
    home.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(home, 0o700)


@contextlib.contextmanager
def home_lock(lock_path: Path) -> Iterator[None]:
    """Hold an exclusive lock on the home for the daemon's lifetime (one palaced per home)."""
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        if not _try_lock(fd):
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "unknown"
            raise AlreadyRunning(
                f"another palaced is already running on {lock_path.parent} (pid {holder}); "
                "stop it first, or start this one with a different --home"
            ) from None
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.close(fd)


def _try_lock(fd: int) -> bool:
    """Take the home's lock without waiting; False if another process holds it. flock on POSIX;
    on Windows (designed, not run here) msvcrt's byte-range lock, which the OS also drops when
    the process dies."""
    try:
        import fcntl
    except ImportError:
        import msvcrt

        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)  # type: ignore[attr-defined]
        except OSError:
            return False
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


async def _network_for(ctx: Context, membership: Membership) -> Network:
    """The member directory (bindings and revocations from the log) and the network for a palace,
    set on ``ctx`` for the handlers."""
    config, key, store, bus = ctx.config, ctx.identity, ctx.store, ctx.bus
    directory = MemberDirectory(membership.ca_cert_pem, utc_datetime)
    # Our own origins first, each with its proof: a key-derived origin's nonce, or for a legacy one
    # a signature made now (only we can); they are relayed to every peer that lacks them.
    for origin, nonce in await store.own_origins():
        proof = nonce if nonce is not None else legacy_binding_signature(key, directory.palace_id, origin)
        try:
            directory.bind(OriginBinding(origin, membership.member_pem, proof))
        except BindingError as exc:
            LOGGER.warning("cannot bind this daemon's own origin %s: %s", origin, exc)
    for origin, certificate, stored_proof in await store.bindings():
        try:
            directory.bind(OriginBinding(origin, certificate, stored_proof or b""), stored=True)
        except BindingError as exc:
            LOGGER.warning("dropped a stored binding: %s", exc)
    unsaved = directory.take_unsaved()
    if unsaved:
        await store.write(lambda ctx: save_bindings(ctx, unsaved))
    for event in await store.signed_events_of_type(REVOKE_EVENT_TYPE):
        directory.observe(event)
    host, port = parse_peer_address(config.listen)
    network = Network(settings=NetworkSettings(host, port, config.mdns, config.gossip_dial), home=config.home,
                      membership=membership, identity=key, identity_path=config.key_path, store=store, bus=bus,
                      directory=directory, watchers=ctx.watcher_tuples, max_artifact_bytes=config.limits.max_artifact_bytes,
                      facts=lambda: report_facts(ctx))
    ctx.directory, ctx.network = directory, network
    await ctx.features.joined(ctx, membership)  # e.g. the agent registry judges the palace CA's word from now on
    return network


async def serve(config: Config, *, task_status: trio.TaskStatus[Context] = trio.TASK_STATUS_IGNORED) -> None:
    """Run the daemon for ``config`` until cancelled, then shut down cleanly; reports the handlers'
    context once the API serves."""
    prepare_home(config.home)
    with home_lock(config.lock_path):
        # We hold the lock, so a socket or api.json left behind belongs to a daemon that crashed.
        for kind, stale in (("socket", config.socket_path), ("api.json", config.api_file)):
            if stale.exists() or stale.is_symlink():
                LOGGER.info("removing stale %s %s", kind, stale)
                stale.unlink()
        key, created = load_or_create_identity(config.key_path)
        if created:
            LOGGER.info("created identity key %s", config.key_path)
        daemon_features = features()
        store = await trio.to_thread.run_sync(functools.partial(
            Store, config.home / DB_FILENAME, key, config.limits, parts=daemon_features.store_parts))
        try:
            if store.minted_origin:
                LOGGER.info("new origin %s for %s", store.origin_id, store.path)
            latest_seq, _ = store.latest()
            bus = EventBus(latest_seq)
            astore = AsyncStore(store, bus.publish, on_purged=bus.scrub)
            membership = load_membership(config.home, key, utc_datetime())
            # The network runs in the API nursery, so shutdown stops it before the writer drains.
            network_nursery: trio.Nursery | None = None

            async def start_network(joined: Membership) -> None:
                assert network_nursery is not None
                network = await _network_for(ctx, joined)
                await network_nursery.start(network.run)

            ctx = Context(config, astore, bus, key, daemon_features, membership=membership,
                          start_network=start_network)
            if config.notify is not None and config.notify.configured:
                # Notifications out: a background follower of the bus, never on the append path.
                ctx.notifier = Notifier(ctx, config.notify)
            ops = op_table(ctx)
            ctx.features.start(ctx)

            LOGGER.info("palaced %s origin=%s fingerprint=%s palace=%s", config.home, store.origin_id,
                        fingerprint(store.public_key), membership.palace_id if membership else "none (not joined)")
            # The writer is shielded from the shutdown cancel: handlers whose appends are queued
            # wait for their commit, so the writer must outlive the API and drain the queue.
            writer_scope = trio.CancelScope(shield=True)

            async def run_writer(*, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
                with writer_scope:
                    await astore.serve_writer(task_status=task_status)

            async with trio.open_nursery() as nursery:
                await nursery.start(run_writer)
                try:
                    async with trio.open_nursery() as api_nursery:
                        network_nursery = api_nursery
                        if membership is not None:
                            # Before init/join a daemon opens no network port at all.
                            await start_network(membership)
                        ctx.api_address = await api_nursery.start(serve_api, config.api_endpoint, config.home, ctx,
                                                                  ops, config.max_frame_bytes)
                        api_nursery.start_soon(LogFollower(ctx).run)
                        for service in ctx.features.services(ctx):  # what the features run in the background
                            api_nursery.start_soon(service.run)
                        if ctx.notifier is not None:
                            await api_nursery.start(ctx.notifier.run)
                        task_status.started(ctx)
                        await trio.sleep_forever()
                finally:
                    # Stop taking writes; the writer commits what is queued, then returns.
                    astore.close_writes()
                    writer_scope.deadline = trio.current_time() + SHUTDOWN_GRACE_S
        finally:
            store.close()
            LOGGER.info("stopped; database closed")
