"""The dashboard's gate: who may see the palace through it, and which requests may change it.

Owns: the per-run secret and what is derived from it (the session cookie and the CSRF token),
and the checks every request passes before any palace data is read:

* **Host**: only ``127.0.0.1:PORT`` or ``localhost:PORT``. A page on another site that makes a
  browser resolve its own name to 127.0.0.1 (DNS rebinding) sends its own name as Host, and is
  refused before the secret is even looked at.
* **The secret**: the session cookie (set by the first load of the printed URL), an
  ``Authorization: Bearer`` header (programs), or ``?secret=`` in the URL (the printed link).
  Compared in constant time. Cookies are not port-specific, so the cookie is named after the
  port: two dashboards on one machine never overwrite each other's.
* **A one-time code** (``?code=``) the browser is opened with, spent on its first use: a
  browser's command line is readable by every local user (``/proc``), so it never carries the
  reusable secret (issue 25, finding 9). It is passed through a 0600 file that redirects
  (``server``), so even the code is seen only by the browser.
* **Writes** (POST): the secret as above, plus an ``Origin`` of this very server and the CSRF
  token (an HMAC of the secret the page reads from its own HTML) in ``X-CSRF-Token``. The
  cookie is ``SameSite=Strict`` as well; either alone stops a cross-site form.

Pure: no IO, no clock; the secret comes from the caller (``new_secret`` is the one call to the
system's randomness, for ``server``).
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from typing import Final

__all__ = [
    "Gate", "Verdict", "new_secret",
]

#: Why 32 bytes: a secret printed once per run, guessed only by brute force over loopback.
SECRET_BYTES: Final = 32
COOKIE_PREFIX: Final = "palace_ui_"
CSRF_HEADER: Final = "x-csrf-token"


def new_secret() -> str:
    """A fresh per-run secret (URL-safe text)."""
    return secrets.token_urlsafe(SECRET_BYTES)


class Verdict(enum.Enum):
    """What the gate says of one request."""

    ALLOW = "allow"
    #: allowed, and the secret came in the URL: set the cookie and send the browser on without it
    ALLOW_FROM_URL = "allow_from_url"
    BAD_HOST = "bad_host"
    UNAUTHORIZED = "unauthorized"
    #: a write without this server's Origin or without the CSRF token
    FORBIDDEN = "forbidden"


def _same(offered: str | None, expected: str) -> bool:
    if not offered:
        return False
    try:
        return hmac.compare_digest(offered.encode("utf-8"), expected.encode("utf-8"))
    except UnicodeEncodeError:
        return False


class Gate:
    """The checks of one dashboard run (its secret and its port)."""

    def __init__(self, secret: str, port: int) -> None:
        if len(secret) < 16:
            raise ValueError("the dashboard secret must be at least 16 characters")
        self.secret = secret
        self.port = port
        self.cookie_name = f"{COOKIE_PREFIX}{port}"
        self.csrf_token = hmac.new(secret.encode("utf-8"), b"palace/ui/csrf/v1", hashlib.sha256).hexdigest()
        self.hosts = frozenset({f"127.0.0.1:{port}", f"localhost:{port}"})
        self.origins = frozenset(f"http://{host}" for host in self.hosts)
        self._codes: set[str] = set()

    def __repr__(self) -> str:
        return f"<Gate port={self.port}>"

    def allow_once(self, code: str) -> None:
        """Let ``code`` in once (as ``?code=``): what the browser is opened with."""
        if len(code) < 16:
            raise ValueError("a one-time code must be at least 16 characters")
        self._codes.add(code)

    def check(self, *, host: str | None, headers: Mapping[str, str], cookies: Mapping[str, str],
              url_secret: str | None, url_code: str | None = None) -> Verdict:
        """The verdict on one request: its Host, then its secret (``headers`` with lower-cased
        names; ``cookies`` parsed)."""
        if host is None or host.lower() not in self.hosts:
            return Verdict.BAD_HOST
        from_url = False
        if (_same(cookies.get(self.cookie_name), self.secret)
                or _same(_bearer(headers.get("authorization")), self.secret)):
            pass
        elif _same(url_secret, self.secret):
            from_url = True
        elif url_code and (spent := next((c for c in self._codes if _same(url_code, c)), None)) is not None:
            self._codes.discard(spent)  # once: whoever comes second with it is refused
            from_url = True
        else:
            return Verdict.UNAUTHORIZED
        return Verdict.ALLOW_FROM_URL if from_url else Verdict.ALLOW

    def check_write(self, headers: Mapping[str, str]) -> Verdict:
        """The verdict on a request that changes something (after ``check`` allowed it): it must
        come from this server's own page, which alone knows the CSRF token."""
        if headers.get("origin") not in self.origins or not _same(headers.get(CSRF_HEADER), self.csrf_token):
            return Verdict.FORBIDDEN
        return Verdict.ALLOW

    def cookie_header(self) -> str:
        """The ``Set-Cookie`` value that lets this browser in for this run (session cookie: it
        ends with the browser; HttpOnly: the page's scripts never see the secret)."""
        return f"{self.cookie_name}={self.secret}; Path=/; HttpOnly; SameSite=Strict"


def _bearer(value: str | None) -> str | None:
    if not value:
        return None
    scheme, _, token = value.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" else None
