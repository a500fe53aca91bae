"""The deliverers: a desktop notification, a webhook POST, a mail over SMTP.

Owns: ``deliver(channel, message, ...)``, the one place notifications touch the outside world,
and ``DeliveryError`` (one line saying what failed, never a secret). Blocking IO (urllib, smtplib)
runs on a worker thread under a ``CapacityLimiter`` with a socket timeout, and the caller's
``fail_after`` abandons a thread that still hangs, so nothing here blocks the daemon; the desktop
command runs as a trio subprocess.

Error handling: every failure of a channel — refused, timed out, an HTTP status outside 2xx, an
SMTP reply, no desktop session — becomes ``DeliveryError``; the notifier counts it and tries again
later. Secrets (an SMTP password, a webhook token) are read from their file at each delivery and
appear in no message and no log line. A webhook never follows a redirect (it could carry the
notification to another host), and a loopback URL never goes through a proxy.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import smtplib
import ssl
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping
from http.client import HTTPMessage
from pathlib import Path
from typing import IO, Final
from urllib.parse import urlsplit

import trio

from palace_proto import __version__

from .payloads import Message, desktop_argv, email_message, ntfy_target, webhook_body
from .settings import ChannelSettings

__all__ = ["DeliveryError", "deliver", "desktop_session"]

# Why 64 KiB: what is read of a webhook's reply (it is only checked for its status).
_MAX_REPLY_BYTES: Final = 65536
_SESSION_VARS: Final = ("DISPLAY", "WAYLAND_DISPLAY", "DBUS_SESSION_BUS_ADDRESS")


class DeliveryError(Exception):
    """A channel did not take the message; the text is one line for status and ``notify test``."""


def _loopback(host: str | None) -> bool:
    if not host:
        return False
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                         headers: HTTPMessage, newurl: str) -> urllib.request.Request | None:
        raise urllib.error.HTTPError(req.full_url, code, f"redirect to {urlsplit(newurl).hostname} refused",
                                     headers, fp)


def _read_secret(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8").strip()
    except OSError as exc:
        raise DeliveryError(f"cannot read the secret file {path}: {exc.strerror}") from None


def _post_json(channel: ChannelSettings, body: Mapping[str, object], timeout_s: float) -> None:
    """POST ``body`` as JSON to the channel's URL (worker thread)."""
    url = channel.url or ""
    if channel.format == "ntfy":
        url, _ = ntfy_target(url)
    host = urlsplit(url).hostname
    headers = {"Content-Type": "application/json", "User-Agent": f"palaced/{__version__}"}
    if channel.token_file is not None:
        headers["Authorization"] = f"Bearer {_read_secret(channel.token_file)}"
    handlers: list[urllib.request.BaseHandler] = [_NoRedirect()]
    if _loopback(host):
        handlers.append(urllib.request.ProxyHandler({}))
    opener = urllib.request.build_opener(*handlers)
    request = urllib.request.Request(url, data=json.dumps(body, ensure_ascii=False).encode("utf-8"), headers=headers,
                                     method="POST")
    try:
        with opener.open(request, timeout=timeout_s) as reply:
            reply.read(_MAX_REPLY_BYTES)
    except urllib.error.HTTPError as exc:
        raise DeliveryError(f"{host} answered HTTP {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise DeliveryError(f"cannot reach {host}: {exc.reason}") from None
    except (OSError, ValueError) as exc:  # a reset, a timeout, a malformed reply
        raise DeliveryError(f"cannot reach {host}: {exc or type(exc).__name__}") from None


def _send_mail(channel: ChannelSettings, message: Message, timeout_s: float, now: float) -> None:
    """Send ``message`` as a mail (worker thread): TLS from the start, STARTTLS, or (only to a
    loopback relay, or without a login) plain."""
    host, port = channel.host or "", channel.port
    assert channel.sender is not None
    mail = email_message(message, channel.sender, channel.recipients, now=now)
    context = ssl.create_default_context()
    try:
        smtp = (smtplib.SMTP_SSL(host, port, timeout=timeout_s, context=context) if channel.ssl
                else smtplib.SMTP(host, port, timeout=timeout_s))
        with smtp:
            smtp.ehlo()
            if channel.starttls:
                smtp.starttls(context=context)
                smtp.ehlo()
            if channel.username is not None:
                if not (channel.ssl or channel.starttls or _loopback(host)):
                    raise DeliveryError(f"refusing to log in to {host} without TLS (set starttls or ssl)")
                password = _read_secret(channel.password_file) if channel.password_file is not None else ""
                smtp.login(channel.username, password)
            smtp.send_message(mail, from_addr=channel.sender, to_addrs=list(channel.recipients))
    except smtplib.SMTPResponseException as exc:
        text = exc.smtp_error.decode("utf-8", "replace") if isinstance(exc.smtp_error, bytes) else str(exc.smtp_error)
        raise DeliveryError(f"SMTP {host}:{port} said {exc.smtp_code} {' '.join(text.split())[:200]}") from None
    except smtplib.SMTPRecipientsRefused as exc:
        raise DeliveryError(f"SMTP {host}:{port} refused {', '.join(exc.recipients)}") from None
    except (smtplib.SMTPException, ssl.SSLError, OSError) as exc:
        raise DeliveryError(f"SMTP {host}:{port}: {exc or type(exc).__name__}") from None


def desktop_session(environ: Mapping[str, str], platform: str) -> str | None:
    """Why there is no desktop to notify here, or None when there is one."""
    if platform == "darwin":
        return None if shutil.which("osascript") else "osascript is not installed"
    if platform.startswith("linux") or "bsd" in platform:
        if not any(environ.get(name) for name in _SESSION_VARS):
            return "no desktop session (DISPLAY, WAYLAND_DISPLAY and DBUS_SESSION_BUS_ADDRESS are unset)"
        return None if shutil.which("notify-send", path=environ.get("PATH")) else "notify-send is not installed"
    return f"no desktop notifications on {platform}"


async def _desktop(message: Message, timeout_s: float) -> None:
    why = desktop_session(os.environ, sys.platform)
    argv = desktop_argv(sys.platform, message)
    if why is not None or argv is None:
        raise DeliveryError(why or f"no desktop notifications on {sys.platform}")
    try:
        with trio.fail_after(timeout_s):
            result = await trio.run_process(argv, capture_stdout=True, capture_stderr=True, check=False,
                                            stdin=b"")
    except trio.TooSlowError:
        raise DeliveryError(f"{argv[0]} did not finish within {timeout_s:.0f} s") from None
    except OSError as exc:
        raise DeliveryError(f"cannot run {argv[0]}: {exc.strerror}") from None
    if result.returncode != 0:
        said = " ".join(result.stderr.decode("utf-8", "replace").split())[:200]
        raise DeliveryError(f"{argv[0]} exited {result.returncode}" + (f": {said}" if said else ""))


async def deliver(channel: ChannelSettings, message: Message, *, timeout_s: float, limiter: trio.CapacityLimiter,
                  now: float) -> None:
    """Send ``message`` through ``channel``.

    Raises:
        DeliveryError: the channel did not take it (one line, no secret).
    """
    if channel.kind == "desktop":
        await _desktop(message, timeout_s)
        return
    try:
        # The socket timeout ends the thread; the extra second abandons one stuck elsewhere.
        with trio.fail_after(timeout_s + 1):
            if channel.kind == "webhook":
                body = webhook_body(channel.format, message, url=channel.url or "")
                await trio.to_thread.run_sync(_post_json, channel, body, timeout_s, limiter=limiter,
                                              abandon_on_cancel=True)
            else:
                await trio.to_thread.run_sync(_send_mail, channel, message, timeout_s, now, limiter=limiter,
                                              abandon_on_cancel=True)
    except trio.TooSlowError:
        raise DeliveryError(f"{channel.describe()}: no answer within {timeout_s:.0f} s") from None
