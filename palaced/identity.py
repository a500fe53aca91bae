"""The daemon's identity: an Ed25519 key pair kept in ``$HOME/identity.key`` (PKCS#8 PEM, 0600).

Owns: creating the key on first start and loading it afterwards. The key signs every event this
replica originates; its fingerprint (palace_proto.ids.fingerprint) is the id humans compare.

Resource handling: a new key is written to a temporary file (0600 from its creation, ``O_EXCL``),
fsynced, then *linked* to ``identity.key`` — a link never replaces an existing file, so a key
events were signed with is never overwritten — and the folder is fsynced. A crash leaves no key
or a whole one, never an empty or partial file under the key's name. An empty ``identity.key``
(what an older release could leave after a crash while creating it) is treated as absent:
nothing can have been signed with it. Any other unreadable key is refused, never replaced.
The caller holds the home's lock (app.serve), so no other daemon creates a key meanwhile.
"""

from __future__ import annotations

import logging
import os
import stat
from pathlib import Path
from typing import Final

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
)

from .files import fsync_directory

__all__ = ["IdentityError", "load_or_create_identity"]

LOGGER: Final = logging.getLogger("palaced.identity")


class IdentityError(Exception):
    """The identity key cannot be used; the message says what to do."""


def load_or_create_identity(path: Path) -> tuple[Ed25519PrivateKey, bool]:
    """Return (key, created). Creates the key file with mode 0600 if it does not exist (or is empty).

    Raises:
        IdentityError: the file is readable by others, unreadable, or not an Ed25519 key.
    """
    try:
        info = path.lstat()
    except FileNotFoundError:
        info = None
    except OSError as exc:
        raise IdentityError(f"cannot read identity key {path}: {exc.strerror}") from None
    if info is not None and stat.S_ISREG(info.st_mode) and info.st_size == 0:
        LOGGER.warning("identity key %s is empty (left by a crash while it was being created); making a new one",
                       path)
        try:
            path.unlink()
        except OSError as exc:
            raise IdentityError(f"cannot replace the empty identity key {path}: {exc.strerror}") from None
        info = None
    if info is None:
        try:
            created = _create(path)
        except OSError as exc:
            raise IdentityError(f"cannot create identity key {path}: {exc.strerror or exc}") from None
        if created is not None:
            return created, True
    return _load(path), False


def _create(path: Path) -> Ed25519PrivateKey | None:
    """Write a new key as ``path``; None if a key appeared there meanwhile (then load that one)."""
    key = Ed25519PrivateKey.generate()
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)  # a crash's leftover: never linked, so nothing was signed with it
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)  # fails if identity.key exists: an existing key is never replaced
        except FileExistsError:
            return None
        except OSError:
            # A filesystem without hard links: rename, after checking nothing is there (we hold the
            # home's lock, so nothing can appear in between).
            if path.exists() or path.is_symlink():
                return None
            os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_directory(path.parent)
    return key


def _load(path: Path) -> Ed25519PrivateKey:
    try:
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise IdentityError(
                f"identity key {path} is accessible by other users (mode {stat.S_IMODE(mode):04o}); "
                f"run: chmod 600 {path}"
            )
        data = path.read_bytes()
    except OSError as exc:
        raise IdentityError(f"cannot read identity key {path}: {exc.strerror}") from None
    try:
        key = load_pem_private_key(data, password=None)
    except (ValueError, TypeError) as exc:
        raise IdentityError(f"identity key {path} is not a valid key ({exc}); move it away to mint a new identity") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise IdentityError(f"identity key {path} is not an Ed25519 key; move it away to mint a new identity")
    return key
