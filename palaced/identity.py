"""The daemon's identity: an Ed25519 key pair kept in ``$HOME/identity.key`` (PKCS#8 PEM, 0600).

Owns: creating the key on first start and loading it afterwards. The key signs every event this
replica originates; its fingerprint (palace_proto.ids.fingerprint) is the id humans compare.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    NoEncryption,
    PrivateFormat,
    load_pem_private_key,
)

__all__ = ["IdentityError", "load_or_create_identity"]


class IdentityError(Exception):
    """The identity key cannot be used; the message says what to do."""


def load_or_create_identity(path: Path) -> tuple[Ed25519PrivateKey, bool]:
    """Return (key, created). Creates the key file with mode 0600 if it does not exist.

    Raises:
        IdentityError: the file is readable by others, unreadable, or not an Ed25519 key.
    """
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        key = Ed25519PrivateKey.generate()
        with os.fdopen(fd, "wb") as fh:
            fh.write(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
            fh.flush()
            os.fsync(fh.fileno())
        return key, True
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
    return key, False
