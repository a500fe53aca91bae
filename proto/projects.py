"""A project: the name agents give a piece of work, and the stream its tasks, leases and rooms live on.

Owns: ``slugify`` (a name as lower-case letters and digits joined by ``_``) and ``project_stream``
(``project/<slug>``): what every feature that files things under a project agrees on. Pure.
"""

from __future__ import annotations

import re

__all__ = ["project_stream", "slugify"]


def slugify(text: str, *, max_len: int = 40, empty: str = "work") -> str:
    """Lower-case letters and digits joined by ``_`` (at most ``max_len``), ``empty`` if none."""
    slug = re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")[:max_len].rstrip("_")
    return slug or empty


def project_stream(project: str) -> str:
    """The stream a project's tasks, leases and rooms live on: ``project/<slug>``."""
    return f"project/{slugify(project, empty='project')}"
