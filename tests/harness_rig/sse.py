"""Server-sent-events framing for the scripted model servers (pure: no IO, no clock).

Each provider streams its answer as SSE (https://html.spec.whatwg.org/multipage/server-sent-events.html):
records of ``event:`` / ``data:`` lines ended by a blank line. Anthropic and OpenAI's Responses API
name every record (``event: message_start``); Chat Completions and Gemini send ``data:`` lines
only, and Chat Completions ends the stream with ``data: [DONE]``. ``parse`` is the inverse of
``frame`` (for the unit tests and for reading what a server sent).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

__all__ = ["frame", "frames", "parse"]


def frame(data: Any, event: str | None = None) -> bytes:
    """One SSE record: ``data`` as compact JSON (a str is sent as is), named ``event`` if given."""
    text = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    if "\n" in text or "\r" in text:  # one data line per record keeps every reader's parser happy
        raise ValueError("an SSE data field must be one line here")
    head = f"event: {event}\n" if event is not None else ""
    return f"{head}data: {text}\n\n".encode()


def frames(records: Iterable[tuple[str | None, Any]]) -> bytes:
    """A whole stream of ``(event, data)`` records."""
    return b"".join(frame(data, event) for event, data in records)


def parse(stream: bytes) -> list[tuple[str | None, str]]:
    """The ``(event, data)`` records of a stream; a trailing record without its blank line is dropped."""
    records: list[tuple[str | None, str]] = []
    text = stream.decode().replace("\r\n", "\n")
    blocks = text.split("\n\n")
    for block in blocks[:-1]:
        event: str | None = None
        data: list[str] = []
        for line in block.split("\n"):
            if line.startswith(":") or not line:
                continue
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "event":
                event = value
            elif field == "data":
                data.append(value)
        if data:
            records.append((event, "\n".join(data)))
    return records
