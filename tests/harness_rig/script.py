"""The script a scripted model replays, and what it records (pure: no IO; the clock is passed in).

A script is a list of steps, one tool call per model turn, then a plain text answer that ends the
run. A step is a ``Call`` or a function of the run so far (``Progress``: the outcomes, and the
text of the request being answered) that returns one: a later call needs an event id an earlier
one returned, an edit needs the worktree the harness was started in. The model server asks ``Script.turn`` what to answer
each request of the main loop, handing it the tool results that request carries; the number of
results is how far the run has got, so a request the harness retries gets the same answer again.

A step names its tool the way the script's author knows it: palace's tools by their MCP name
(``mempalace_event_wait``), matched against whatever prefix the harness adds
(``mcp__palace__mempalace_event_wait``, ``palace_mempalace_event_wait``); a harness's own tool by a
tuple of the exact names it may have (``("Write", "write_file", "write")``), the first offered wins.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Call", "Outcome", "Progress", "Script", "Text", "ToolCall", "ToolResult", "palace_json", "resolve_tool"]

#: characters a harness puts between its prefix and an MCP tool's own name
_SEPARATORS = "_.-/:"


@dataclass(frozen=True)
class Call:
    """One scripted tool call: ``tool`` (see the module docstring) with ``args``; ``on_issue`` runs
    when the call is sent to the harness (to append a reply from outside while the call waits)."""

    tool: str | tuple[str, ...]
    args: dict[str, Any]
    label: str = ""
    on_issue: Callable[[], None] | None = None


Step = Call | Callable[["Progress"], Call]


@dataclass(frozen=True)
class ToolCall:
    """A turn that calls a tool."""

    call_id: str
    name: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Text:
    """A turn that answers in words (and so ends the run)."""

    text: str


Turn = ToolCall | Text


@dataclass(frozen=True)
class ToolResult:
    """A tool result as a request carries it: the id of the call it answers, what the harness sent
    back (text, or the provider's structure), and whether the harness marked it an error."""

    call_id: str | None
    raw: Any
    is_error: bool = False


@dataclass
class Outcome:
    """One scripted call and, once the harness sent it back, its result."""

    index: int
    label: str
    name: str
    args: dict[str, Any]
    issued_at: float
    answered_at: float | None = None
    raw: Any = None
    harness_error: bool = False

    @property
    def result(self) -> Any:
        """The palace result (the JSON the MCP server answered), dug out of the harness's wrapping."""
        return palace_json(self.raw)

    @property
    def error(self) -> str | None:
        """Why this call did not succeed, or None: no answer, an error the harness flagged, a result
        that is not palace's JSON, or palace's own ``{"success": false}`` / ``{"error": …}``."""
        if self.answered_at is None:
            return "no result came back"
        value = self.result
        if self.harness_error:
            return f"the harness marked the result an error: {str(self.raw)[:500]}"
        if not isinstance(value, dict):
            return f"not palace's JSON: {str(self.raw)[:500]}"
        if value.get("success") is False or "error" in value:
            return f"palace refused it: {value.get('error')}"
        return None

    @property
    def seconds(self) -> float | None:
        """From the call sent to its result received (the harness's overhead included)."""
        return None if self.answered_at is None else self.answered_at - self.issued_at


@dataclass(frozen=True)
class Progress:
    """What a step function sees: the outcomes so far, the prompt text of the current request and
    the tools it offers."""

    outcomes: Sequence[Outcome]
    prompt: str = ""
    offered: Sequence[str] = ()

    def result(self, label: str) -> Any:
        """The palace result of the (last) call labelled ``label``; KeyError if there is none."""
        for outcome in reversed(self.outcomes):
            if outcome.label == label:
                return outcome.result
        raise KeyError(f"no call labelled {label!r} so far")


def palace_json(raw: Any) -> Any:
    """The JSON object palace's MCP server answered, from any harness's wrapping of it: the text
    itself, MCP ``content`` blocks, ``{"output": …}`` (Gemini, Codex), or text around a JSON object."""
    if isinstance(raw, str):
        text = raw.strip()
        if text[:1] in ("[", '"'):
            try:
                return palace_json(json.loads(text))
            except json.JSONDecodeError:
                pass
        start = text.find("{")  # the object itself, or after a harness's preamble ("Output:")
        if start < 0:
            return raw
        try:
            value, _ = json.JSONDecoder().raw_decode(text[start:])
        except json.JSONDecodeError:
            return raw
        return palace_json(value)
    if isinstance(raw, list):
        texts = [b.get("text") for b in raw if isinstance(b, dict) and isinstance(b.get("text"), str)]
        return palace_json("".join(texts)) if texts else raw
    if isinstance(raw, dict):
        for wrapper in ("content", "output", "result", "llmContent"):
            if wrapper in raw and len(raw) <= 3 and not {"success", "event", "events", "artifact"} & raw.keys():
                inner = palace_json(raw[wrapper])
                if isinstance(inner, dict):
                    return inner
        return raw
    return raw


def resolve_tool(tool: str | tuple[str, ...], offered: Sequence[str]) -> str:
    """The offered tool a step means (see the module docstring); ValueError names what was offered."""
    if isinstance(tool, tuple):
        for name in tool:
            if name in offered:
                return name
        raise ValueError(f"none of {tool} is offered; offered: {sorted(offered)}")
    if tool in offered:
        return tool
    matches = [name for name in offered if name.endswith(tool) and name[-len(tool) - 1] in _SEPARATORS]
    if len(matches) != 1:
        raise ValueError(f"{tool} is offered {len(matches)} times ({matches}); offered: {sorted(offered)}")
    return matches[0]


@dataclass
class Script:
    """A run's steps and final words, and the outcomes recorded as it is replayed."""

    steps: Sequence[Step]
    final: str = "All done."
    id_prefix: str = "call_rig_"
    outcomes: list[Outcome] = field(default_factory=list)
    #: a step that could not be issued (its function raised, its tool is not offered)
    failure: str | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def __repr__(self) -> str:
        return f"<Script {len(self.outcomes)}/{len(self.steps)} steps issued failure={self.failure!r}>"

    def call_id(self, index: int) -> str:
        return f"{self.id_prefix}{index}"

    def turn(self, offered: Sequence[str], results: Sequence[ToolResult], now: float, prompt: str = "") -> Turn:
        """The answer to a main-loop request that offers ``offered``, carries ``results`` and reads
        ``prompt`` (its system prompt and messages, for step functions)."""
        with self._lock:
            self._record(results, now)
            done = len(results)
            if self.failure is not None or done >= len(self.steps):
                return Text(self.final if self.failure is None else f"The rig's script stopped: {self.failure}")
            if done < len(self.outcomes):  # a retried request: the same call again
                issued = self.outcomes[done]
                return ToolCall(self.call_id(done), issued.name, issued.args)
            step = self.steps[done]
            try:
                call = step(Progress(list(self.outcomes), prompt, list(offered))) if callable(step) else step
                name = resolve_tool(call.tool, offered)
            except Exception as exc:  # the step's own bug or a missing tool: the run ends, the test says why
                self.failure = f"step {done}: {type(exc).__name__}: {exc}"
                return Text(f"The rig's script stopped: {self.failure}")
            self.outcomes.append(Outcome(done, call.label or str(call.tool), name, call.args, issued_at=now))
            if call.on_issue is not None:
                call.on_issue()
            return ToolCall(self.call_id(done), name, call.args)

    def _record(self, results: Sequence[ToolResult], now: float) -> None:
        for position, result in enumerate(results):
            index = self._index_of(result.call_id, position)
            if index is None or index >= len(self.outcomes):
                continue
            outcome = self.outcomes[index]
            if outcome.answered_at is None:
                outcome.answered_at, outcome.raw, outcome.harness_error = now, result.raw, result.is_error

    def _index_of(self, call_id: str | None, position: int) -> int | None:
        if call_id and call_id.startswith(self.id_prefix) and call_id[len(self.id_prefix):].isdigit():
            return int(call_id[len(self.id_prefix):])
        return position  # a harness that made its own ids: results come in the order of the calls

    @property
    def finished(self) -> bool:
        return len(self.outcomes) == len(self.steps) and all(o.answered_at is not None for o in self.outcomes)
