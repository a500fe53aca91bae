"""``palaced``: parse arguments, set up logging, run the daemon until SIGTERM/SIGINT.

Exit codes: 0 clean stop, 1 start-up failure (message on stderr), 64 usage error.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import logging
import os
import signal
import sys
import time
from pathlib import Path
from typing import NoReturn

import trio

from palace_proto import __version__
from palace_proto.paths import parse_api_listen
from palace_proto.peer import parse_peer_address

from .api import ApiListenError, SocketPathTooLong
from .app import AlreadyRunning, serve
from .config import DEFAULT_LISTEN, ConfigError, default_home, load_config
from .features import features
from .identity import IdentityError
from .membership import MembershipError
from .peers import ListenError
from .store import StoreError

EXIT_USAGE = 64


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"palaced: {message}\n")


def _setup_logging(level: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    formatter = logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s", "%Y-%m-%dT%H:%M:%SZ")
    formatter.converter = time.gmtime
    handler.setFormatter(formatter)
    root = logging.getLogger("palaced")
    from .recent_errors import RECENT_ERRORS  # status shows the newest error (health)

    root.handlers[:] = [handler, RECENT_ERRORS]
    root.setLevel(level.upper())
    root.propagate = False


async def _run(config) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async with trio.open_nursery() as nursery:
            await nursery.start(serve, config)
            # What is alive once the daemon serves (modules, the store, caches) lives as long as it
            # does: kept out of the collector's full passes, which would otherwise walk all of it and
            # hold every thread for tens of milliseconds each time (issue 25, finding 6).
            gc.collect()
            gc.freeze()
            async for signum in signals:
                logging.getLogger("palaced.app").info("received %s; stopping", signal.Signals(signum).name)
                nursery.cancel_scope.cancel(reason=f"signal {signum}")
                break


def main(argv: list[str] | None = None) -> int:
    parser = _Parser(prog="palaced", description="The palace daemon: owns this machine's replica of the log.")
    parser.add_argument("--home", type=Path, help="palace home (default: $PALACE_HOME, else ~/.palace)")
    parser.add_argument("--log-level", choices=["debug", "info", "warning", "error"], help="overrides config.toml")
    parser.add_argument("--listen", metavar="HOST:PORT",
                        help=f"where peers connect (default {DEFAULT_LISTEN}; overrides config.toml)")
    parser.add_argument("--api", metavar="unix|tcp://127.0.0.1:PORT",
                        help="the local API: a Unix socket in the home (default here) or loopback TCP with a token "
                             "in HOME/api.json (the default on Windows; PORT 0 picks a free one)")
    parser.add_argument("--no-mdns", action="store_true",
                        help="do not advertise or browse with mDNS (static and remembered peers only)")
    parser.add_argument("--no-gossip-dial", action="store_true",
                        help="do not dial the addresses other daemons gossip (static, remembered, mDNS and invite "
                             "peers only; overrides config.toml)")
    parser.add_argument("--version", action="version", version=f"palaced {__version__}")
    args = parser.parse_args(argv)
    home = (args.home or default_home()).expanduser().absolute()
    try:
        config = load_config(home, features().config_extensions)
    except ConfigError as exc:
        print(f"palaced: {exc}", file=sys.stderr)
        return 1
    if args.listen is not None:
        try:
            parse_peer_address(args.listen)
        except ValueError as exc:
            parser.error(f"--listen: {exc}")
        config = dataclasses.replace(config, listen=args.listen)
    if args.api is not None:
        try:
            parse_api_listen(args.api)
        except ValueError as exc:
            parser.error(f"--api: {exc}")
        config = dataclasses.replace(config, api=args.api)
    if args.log_level:
        config = dataclasses.replace(config, log_level=args.log_level)
    if args.no_mdns:
        config = dataclasses.replace(config, mdns=False)
    if args.no_gossip_dial:
        config = dataclasses.replace(config, gossip_dial=False)
    _setup_logging(config.log_level)
    # Why 1 ms (Python's default is 5): derivations, embeddings and big reads run in worker threads
    # while the event loop answers; each time the loop wakes it waits for the interpreter lock up to
    # this long, and one request wakes it several times (issue 25, finding 6: pings behind a lease
    # derivation). The cost is more switching while threads compute, a few percent at most.
    sys.setswitchinterval(0.001)
    # Everything the daemon writes is for this user alone: the database and its journal, vectors,
    # backups, logs (issue 26: palace.sqlite3 was 0644 inside the 0700 home).
    os.umask(0o077)
    try:
        trio.run(_run, config)
    except BaseException as exc:  # start-up failures arrive wrapped in nursery exception groups
        startup = _find_startup_error(exc)
        if startup is None:
            raise
        print(f"palaced: {startup}", file=sys.stderr)
        return 1
    return 0


_STARTUP_ERRORS = (AlreadyRunning, ApiListenError, ConfigError, IdentityError, MembershipError, StoreError,
                   SocketPathTooLong, ListenError, PermissionError)


def _find_startup_error(exc: BaseException) -> BaseException | None:
    """The expected start-up failure inside ``exc`` (possibly nested in exception groups), if any."""
    if isinstance(exc, PermissionError):
        return PermissionError(f"permission denied: {exc.filename}: cannot use this home")
    if isinstance(exc, _STARTUP_ERRORS):
        return exc
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            if (found := _find_startup_error(inner)) is not None:
                return found
    return None


if __name__ == "__main__":
    exit_code = main()
    # Stopped: the database is closed. Exit now rather than at the interpreter's pace, which waits
    # for every executor thread — the embedding model's may still be loading the model (seconds on
    # a busy machine), and a service manager would see a daemon that does not stop on SIGTERM.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(exit_code)
