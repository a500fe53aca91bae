"""Cost, counted and capped: what a run's harness says it used, the usage event, totals and budgets.

Owns: reading each harness's own usage report out of a run's output (``parse_usage`` and one
parser per format), the ``usage.report`` event's metadata (``usage_metadata``, and its check on
arrival, ``check_usage_metadata``), summing usage events into totals (``totals``, ``spending``),
the ``[budgets]`` table of ``config.toml`` (``parse_budgets``) and the judgement of budgets
against what was spent (``judge_budgets``, ``blocking``), and a run's last message in words
(``final_text``, what a failed run's reply quotes instead of raw JSON). docs/usage.md describes the formats,
the custom line, the metadata and the budget keys for users. Pure: stdlib only; no clock (the
caller passes ``now``), no IO; it must not import trio, apsw or anything of palaced/palacectl.

Theory of operation
-------------------
Counting. When a run ends (``task launch``, or a worker's run), its runner's output is handed to
``parse_usage(runner, stdout)``. Each built-in harness prints its usage in its own shape when run
with its JSON output on (Claude Code ``--output-format json|stream-json``, Codex ``exec
--json``, Gemini CLI ``--output-format json|stream-json``, OpenCode ``run --format json``); any
runner may instead print the documented custom line (``palace-usage: tokens_in=… tokens_out=…``,
see ``parse_custom_line``). The result is one ``Usage`` in one vocabulary:

* ``tokens_in`` is every input token the model processed, cache reads and writes included
  (Claude Code and OpenCode report cached tokens apart: they are added back; Codex and Gemini
  count them in already). ``cache_read_tokens`` / ``cache_write_tokens`` say how many of those
  were cache hits / cache writes, when the harness says.
* ``tokens_out`` is every token the model generated, reasoning ("thinking") included.
* ``cost_usd`` is the harness's own figure, or None when it reports none (Codex and Gemini never
  do: palace keeps no price list, so their cost stays *unknown*, never 0).

The run's launcher writes it as a signed ``usage.report`` event on the task (metadata from
``usage_metadata``); it replicates like any other event. Only the reports the authority table lets
count are summed (``palace_proto.authority``, rule ``usage.report``, as ``palace_proto.tasks.
derive_task`` judges it: written by an agent that has claimed the task, by the daemon that holds
that agent, on a task that exists and that its metadata names, among the task's first 256): a
member cannot make another's budgets go over with reports of its own. palaced keeps the totals of
those as it commits (palaced/store/usage.py, built with ``total_of``), so every replica holding the
same events has the same totals. Totals sum costs in whole micro-dollars (``cost_micros``), so the
order events arrived in cannot change a total by a rounding bit.

Hostile input. A harness's output is whatever the model and the harness printed: everything in
it is distrusted. Only the last ``MAX_SCAN_CHARS`` of it are read; JSON that does not parse, a
field of the wrong type, a negative, non-finite or absurd number (over ``MAX_TOKENS``,
``MAX_COST_USD``...) is ignored as if absent; a report with no token counts left is no report
(None). The parsers never raise. A peer's or a client's metadata is checked strictly instead
(``check_usage_metadata`` raises ``ValidationError`` naming the field); ``record_from_event``
reads a stored event leniently (None when unusable), so one bad event never breaks a total.

Capping. ``[budgets]`` sets limits in USD and/or tokens (tokens = ``tokens_in + tokens_out``):
each agent per UTC day, each task over all its runs, the whole palace per UTC calendar month,
with per-agent daily overrides. ``spending(records, now)`` sums what counts for each window at
``now``; ``judge_budgets`` says, for each budget and each agent/task it applies to, ``ok``,
``warn`` (at or past ``warn_at``, 80 % by default) or ``over`` (at or past 100 %), with the figure,
the limit and the scope. A USD figure that includes runs of unknown cost is a floor: the
judgement says how many runs were unpriced.

How the worker and launch use it (wired in palacectl; this module only judges):

* Before claiming, a worker judges its agent: ``blocking(breaches, agent=ID)`` non-empty (its
  daily budget, or the palace's monthly one, is over) → it stops claiming, says so in its
  activity (``who``) and notifies its person; it claims again once the window turns (a new UTC
  day or month) or the budget is raised.
* While a run is going and when it ends, launch judges its task: ``blocking(breaches, task=ID)``
  non-empty → the run is stopped and the task replied ``blocked`` with the figure
  (``Breach.describe()``). A run's harness reports usage only when it ends, so a task's budget
  stops its *next* run, or the current one once its usage is known; a single run can overshoot.
* A judgement that turns ``warn`` (or ``over``) sends one notification to the people of the
  palace (issue 28 §3), once per budget, subject and window (``Breach.key``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, final

from .authority import ANY_AGENT, EVER_CLAIMED, Rule
from .errors import ValidationError
from .stamps import STAMP_RE
from .text import printable
from .workers import is_task_id

__all__ = [
    "BUDGET_TYPE", "BUDGET_KEYS", "BY_FIELDS", "CUSTOM_PREFIX", "DEFAULT_WARN_AT", "MAX_COST_USD", "MAX_DURATION_S",
    "MAX_FINAL_CHARS", "MAX_SCAN_CHARS", "MAX_TOKENS", "MAX_TURNS", "STATES", "USAGE_TYPE", "AgentBudget", "Breach",
    "Budgets", "Record", "Spending", "Total", "Usage", "blocking", "check_usage_metadata", "final_text",
    "format_usd", "judge_budgets", "parse_budgets", "parse_claude", "parse_codex", "parse_custom_line", "parse_gemini",
    "parse_opencode", "parse_usage", "record_from_event", "cost_micros", "spending", "total_of", "totals",
    "usage_metadata",
]

#: the event type of a run's usage report (on the task: its correlation id is the task's)
USAGE_TYPE: Final = "usage.report"
#: the event a worker writes when one of its budgets is reached (people are notified of it)
BUDGET_TYPE: Final = "usage.budget"
#: the custom usage line's prefix (docs/usage.md, "The custom line")
CUSTOM_PREFIX: Final = "palace-usage:"
# Why the last 1 MiB: every harness prints its usage last (a final object, or the last events of
# a stream); a run's log may be 32 MiB of hostile text, and parsing all of it buys nothing.
MAX_SCAN_CHARS: Final = 1 << 20
# Why 10^11 tokens: a million-token context re-read on each of 100 000 turns; more is no run's
# report, it is a broken or lying one.
MAX_TOKENS: Final = 10**11
# Why $100 000: no single run costs that; a larger figure is garbage and must not trip budgets.
MAX_COST_USD: Final = 100_000.0
# Why 30 days: the longest a task's run may last (palace_proto.stamps.MAX_DURATION_S).
MAX_DURATION_S: Final = 30 * 86400
# Why a million turns: far past any harness's own turn limit.
MAX_TURNS: Final = 1_000_000
# Why 1024: one line of ten key=value pairs; a longer "usage line" is someone's prose.
MAX_CUSTOM_LINE_CHARS: Final = 1024
# Why 128: the longest model names (Bedrock ids with a region and a version) fit twice.
MAX_MODEL_CHARS: Final = 128
# Why 128: a daemon's name as the fleet shows it.
MAX_MACHINE_CHARS: Final = 128
#: the fields totals group by
BY_FIELDS: Final = ("task", "agent", "machine", "day", "model")
#: the fraction of a budget at which it warns, unless [budgets] warn_at says otherwise
DEFAULT_WARN_AT: Final = 0.8
_MICROS: Final = 1_000_000
_RUNNER_RE: Final = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
# Model names as harnesses print them: "claude-opus-4-5-20251101", "claude-opus-4-6[1m]",
# "anthropic/claude-sonnet-4", "us.anthropic.claude-3-7-sonnet-20250219-v1:0", "qwen2.5-coder:7b".
_MODEL_RE: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:/@+\[\]-]{0,127}$")
_CUSTOM_KEY_RE: Final = re.compile(r"^[a-z_]{1,32}$")
_UINT_RE: Final = re.compile(r"^\d{1,15}$", re.ASCII)
_DECIMAL_RE: Final = re.compile(r"^\d{1,15}(\.\d{1,12})?$", re.ASCII)


# --------------------------------------------------------------------------------------------
# The value type


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Usage:
    """One run's usage, as its harness reported it (see the module docstring for the vocabulary).

    Construction checks every field (``ValidationError`` naming it): a ``Usage`` is always within
    the bounds, whoever made it.
    """

    #: the runner that ran (``claude``, ``codex``, ``gemini``, ``opencode``, or a custom name)
    runner: str
    #: every input token processed, cache reads and writes included
    tokens_in: int
    #: every token generated, reasoning included
    tokens_out: int
    #: of ``tokens_in``, read from the prompt cache (None: not reported)
    cache_read_tokens: int | None = None
    #: of ``tokens_in``, written to the prompt cache (None: not reported)
    cache_write_tokens: int | None = None
    #: what the harness says the run cost, to the micro-dollar (None: unknown, never 0)
    cost_usd: float | None = None
    #: the model that did most of the work (None: not reported)
    model: str | None = None
    #: how long the run took by the harness's own account, in seconds
    duration_s: float | None = None
    #: model turns (requests), if reported
    turns: int | None = None

    def __post_init__(self) -> None:
        _check_runner(self.runner)
        for name in ("tokens_in", "tokens_out"):
            _check_count(name, getattr(self, name), MAX_TOKENS)
        for name in ("cache_read_tokens", "cache_write_tokens"):
            if getattr(self, name) is not None:
                _check_count(name, getattr(self, name), MAX_TOKENS)
        if (self.cache_read_tokens or 0) + (self.cache_write_tokens or 0) > self.tokens_in:
            raise ValidationError("cache_read_tokens and cache_write_tokens are part of tokens_in: together they "
                                  "cannot exceed it", field="cache_read_tokens")
        if self.cost_usd is not None:  # kept to the micro-dollar: finer is noise, and totals count micros
            object.__setattr__(self, "cost_usd", round(_check_amount("cost_usd", self.cost_usd, MAX_COST_USD), 6))
        if self.model is not None:
            _check_model(self.model)
        if self.duration_s is not None:  # kept to the millisecond, what harnesses measure
            object.__setattr__(self, "duration_s", round(_check_amount("duration_s", self.duration_s,
                                                                         MAX_DURATION_S), 3))
        if self.turns is not None:
            _check_count("turns", self.turns, MAX_TURNS)

    @property
    def tokens(self) -> int:
        """What a token budget counts: ``tokens_in + tokens_out``."""
        return self.tokens_in + self.tokens_out

    def __repr__(self) -> str:
        cost = "cost=?" if self.cost_usd is None else f"cost=${self.cost_usd:.6f}"
        return f"<Usage {self.runner} {self.model or '?'} in={self.tokens_in} out={self.tokens_out} {cost}>"


def _check_runner(value: Any) -> str:
    if not isinstance(value, str) or not _RUNNER_RE.match(value):
        raise ValidationError("runner must be a runner name (letters, digits, . _ -; at most 64)", field="runner")
    return value


def _check_count(field: str, value: Any, limit: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= limit:
        raise ValidationError(f"{field} must be a whole number from 0 to {limit}", field=field)
    return value


def _check_amount(field: str, value: Any, limit: float) -> float:
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not 0 <= value <= limit):
        raise ValidationError(f"{field} must be a number from 0 to {limit:g}", field=field)
    return float(value)


def _check_model(value: Any) -> str:
    if not isinstance(value, str) or not _MODEL_RE.match(value):
        raise ValidationError(f"model must be a model name (letters, digits, . _ - : / @ + [ ]; at most "
                              f"{MAX_MODEL_CHARS})", field="model")
    return value


# --------------------------------------------------------------------------------------------
# Reading harness output: lenient helpers (None for anything unusable, never an exception)


def _tail(stdout: Any) -> str:
    """The part of ``stdout`` we read: its last MAX_SCAN_CHARS, starting at a line boundary when cut."""
    if not isinstance(stdout, str):
        return ""
    if len(stdout) <= MAX_SCAN_CHARS:
        return stdout
    tail = stdout[-MAX_SCAN_CHARS:]
    cut = tail.find("\n")
    return tail[cut + 1:] if cut >= 0 else ""


def _reject_constant(name: str) -> Any:
    raise ValueError(name)  # NaN and Infinity are not JSON


def _loads(text: str) -> Any:
    """JSON or None: never raises (deep nesting, huge integers, NaN included)."""
    try:
        return json.loads(text, parse_constant=_reject_constant)
    except (ValueError, RecursionError):
        return None


def _json_lines(text: str, marker: str) -> list[dict[str, Any]]:
    """The JSON objects of the lines of ``text`` that mention ``marker``, in order (others skipped
    unparsed: a stream's many other events cost a substring search each)."""
    found = []
    for line in text.splitlines():
        if marker in line:
            value = _loads(line)
            if isinstance(value, dict):
                found.append(value)
    return found


def _document(text: str) -> Any:
    """The one JSON document ``text`` holds (surrounding blank space allowed), or None. Lines of
    text a harness prints before it are skipped: the document is read from the first line that
    opens one (Gemini CLI warns on stdout first, about colours or a missing ripgrep)."""
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        return _loads(stripped)
    for marker in ("\n{", "\n["):
        start = stripped.find(marker)
        if start >= 0:
            return _loads(stripped[start + 1:])
    return None


def _count(value: Any) -> int | None:
    """A token count read leniently: a whole non-negative number within MAX_TOKENS, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return value if isinstance(value, int) and 0 <= value <= MAX_TOKENS else None


def _amount(value: Any, limit: float) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) and 0 <= value <= limit else None


def _cost(value: Any) -> float | None:
    amount = _amount(value, MAX_COST_USD)
    return round(amount, 6) if amount is not None else None


def _seconds_from_ms(value: Any) -> float | None:
    ms = _amount(value, MAX_DURATION_S * 1000)
    return ms / 1000 if ms is not None else None


def _model(value: Any) -> str | None:
    return value if isinstance(value, str) and _MODEL_RE.match(value) else None


def _turns(value: Any) -> int | None:
    count = _count(value)
    return count if count is not None and count <= MAX_TURNS else None


def _add(*counts: int | None) -> int | None:
    """The sum of the counts that are known (None when none is); None again past MAX_TOKENS."""
    known = [c for c in counts if c is not None]
    if not known:
        return None
    total = sum(known)
    return total if total <= MAX_TOKENS else None


def _build(runner: str, tokens_in: int | None, tokens_out: int | None, *, cache_read: int | None = None,
           cache_write: int | None = None, cost: float | None = None, model: str | None = None,
           duration_s: float | None = None, turns: int | None = None) -> Usage | None:
    """A ``Usage`` from leniently read parts: None without any token count; cache counts that do
    not fit inside ``tokens_in`` (a lying report) are dropped."""
    if tokens_in is None and tokens_out is None:
        return None
    tokens_in = tokens_in or 0
    if (cache_read or 0) + (cache_write or 0) > tokens_in:
        cache_read = cache_write = None
    return Usage(runner=runner, tokens_in=tokens_in, tokens_out=tokens_out or 0, cache_read_tokens=cache_read,
                 cache_write_tokens=cache_write, cost_usd=cost, model=model, duration_s=duration_s, turns=turns)


def _main_model(per_model: Mapping[str, tuple[float, int]]) -> str | None:
    """The model that did most of the work: the highest cost, then the most tokens, then the
    smallest name (so every replica names the same one)."""
    if not per_model:
        return None
    return min(per_model, key=lambda name: (-per_model[name][0], -per_model[name][1], name))


# --------------------------------------------------------------------------------------------
# One parser per harness


def parse_claude(stdout: str, *, runner: str = "claude") -> Usage | None:
    """Claude Code's usage: ``claude --print --output-format json`` (one result object; with
    ``--verbose``, a JSON array of messages ending with it) or ``--output-format stream-json``
    (one object per line; the last ``{"type": "result"}`` line counts).

    The result object carries ``total_cost_usd`` (older releases: ``cost_usd``), ``duration_ms``,
    ``num_turns``, ``usage`` (``input_tokens``, ``output_tokens``, ``cache_creation_input_tokens``,
    ``cache_read_input_tokens``: the main model's only) and ``modelUsage`` (per model:
    ``inputTokens``, ``outputTokens``, ``cacheReadInputTokens``, ``cacheCreationInputTokens``,
    ``costUSD``). Tokens come from ``modelUsage`` when it has counts (it includes the small models
    Claude Code calls on the side), else from ``usage``. Its ``input_tokens`` exclude cached ones,
    which are added back. The figures are the process's running totals, so the last result wins.

    Returns:
        The run's ``Usage``, or None when the output holds no usable result object.
    """
    text = _tail(stdout)
    result: Any = None
    document = _document(text)
    if isinstance(document, dict) and document.get("type") == "result":
        result = document
    elif isinstance(document, list):
        result = next((m for m in reversed(document) if isinstance(m, dict) and m.get("type") == "result"), None)
    else:
        results = [m for m in _json_lines(text, '"result"') if m.get("type") == "result"]
        result = results[-1] if results else None
    if result is None:
        return None
    usage = result.get("usage") if isinstance(result.get("usage"), dict) else {}
    cache_read = _count(usage.get("cache_read_input_tokens"))
    cache_write = _count(usage.get("cache_creation_input_tokens"))
    tokens_in = _add(_count(usage.get("input_tokens")), cache_read, cache_write)
    tokens_out = _count(usage.get("output_tokens"))
    per_model: dict[str, tuple[float, int]] = {}
    sums: dict[str, list[int]] = {"in": [], "out": [], "read": [], "write": []}
    model_usage = result.get("modelUsage")
    for name, entry in (model_usage.items() if isinstance(model_usage, dict) else ()):
        if not isinstance(entry, dict) or _model(name) is None:
            continue
        m_read, m_write = _count(entry.get("cacheReadInputTokens")), _count(entry.get("cacheCreationInputTokens"))
        m_in = _add(_count(entry.get("inputTokens")), m_read, m_write)
        m_out = _count(entry.get("outputTokens"))
        for key, value in (("in", m_in), ("out", m_out), ("read", m_read), ("write", m_write)):
            if value is not None:
                sums[key].append(value)
        per_model[name] = (_cost(entry.get("costUSD")) or 0.0, (m_in or 0) + (m_out or 0))
    if sums["in"] or sums["out"]:
        tokens_in, tokens_out = _add(*sums["in"]), _add(*sums["out"])
        cache_read, cache_write = _add(*sums["read"]), _add(*sums["write"])
    cost = _cost(result.get("total_cost_usd"))
    if cost is None:
        cost = _cost(result.get("cost_usd"))
    return _build(runner, tokens_in, tokens_out, cache_read=cache_read, cache_write=cache_write, cost=cost,
                  model=_main_model(per_model), duration_s=_seconds_from_ms(result.get("duration_ms")),
                  turns=_turns(result.get("num_turns")))


def _codex_totals(event: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The running token totals one Codex event carries, if it carries any."""
    if event.get("type") == "turn.completed":
        usage = event.get("usage")
        return usage if isinstance(usage, dict) else None
    for inner in (event.get("msg"), event.get("payload")):  # older `exec --json`; session files
        if isinstance(inner, dict) and inner.get("type") == "token_count":
            info = inner.get("info")
            total = info.get("total_token_usage") if isinstance(info, dict) else None
            return total if isinstance(total, dict) else None
    return None


def parse_codex(stdout: str, *, runner: str = "codex") -> Usage | None:
    """Codex's usage: ``codex exec --json`` (JSONL). Each ``{"type": "turn.completed"}`` event has
    ``usage`` (``input_tokens``, ``cached_input_tokens``, ``output_tokens``): the thread's running
    totals so far, so the last one wins. Older releases printed protocol events instead; their
    ``{"msg": {"type": "token_count", "info": {"total_token_usage": …}}}`` are read the same way
    (as are the ``payload`` events of Codex's session files).

    ``input_tokens`` already include the cached ones, and ``output_tokens`` the reasoning ones
    (OpenAI's convention; ``reasoning_output_tokens``, where present, is a part of it, not added).
    Codex reports no cost, no model and no duration in this stream: those stay None.

    Returns:
        The run's ``Usage``, or None when no event carries token counts.
    """
    found = [t for t in (_codex_totals(e) for e in _json_lines(_tail(stdout), "token")) if t is not None]
    if not found:
        return None
    last = found[-1]
    return _build(runner, _count(last.get("input_tokens")), _count(last.get("output_tokens")),
                  cache_read=_count(last.get("cached_input_tokens")))


def parse_gemini(stdout: str, *, runner: str = "gemini") -> Usage | None:
    """Gemini CLI's usage: ``gemini --output-format json`` (one object whose ``stats.models`` maps
    each model to its ``tokens``: ``prompt`` (cached included), ``candidates``, ``cached``,
    ``thoughts``, ``tool``, ``total``; and ``api.totalRequests``) or ``--output-format
    stream-json`` (JSONL: an ``init`` event naming the ``model``, and a final ``result`` event
    whose ``stats`` has ``input_tokens``, ``output_tokens``, ``cached``, ``duration_ms``).

    Output is ``candidates`` plus ``thoughts`` (both are generated, and billed as output). Gemini
    CLI reports no cost: it stays None. The JSON form has no duration; its turns are the API
    requests.

    Returns:
        The run's ``Usage``, or None when the output holds no usable stats.
    """
    text = _tail(stdout)
    document = _document(text)
    if isinstance(document, dict) and isinstance(document.get("stats"), dict):
        models = document["stats"].get("models")
        if not isinstance(models, dict):
            return None
        ins: list[int | None] = []
        outs: list[int | None] = []
        reads: list[int | None] = []
        requests: list[int | None] = []
        per_model: dict[str, tuple[float, int]] = {}
        for name, entry in models.items():
            tokens = entry.get("tokens") if isinstance(entry, dict) else None
            if not isinstance(tokens, dict) or _model(name) is None:
                continue
            prompt, cached = _count(tokens.get("prompt")), _count(tokens.get("cached"))
            if prompt is not None and cached is not None and cached > prompt:
                cached = None
            out = _add(_count(tokens.get("candidates")), _count(tokens.get("thoughts")))
            ins.append(prompt)
            outs.append(out)
            reads.append(cached)
            api = entry.get("api")
            requests.append(_turns(api.get("totalRequests")) if isinstance(api, dict) else None)
            per_model[name] = (0.0, (prompt or 0) + (out or 0))
        turns = _add(*requests)
        return _build(runner, _add(*ins), _add(*outs), cache_read=_add(*reads), model=_main_model(per_model),
                      turns=turns if turns is not None and turns <= MAX_TURNS else None)
    events = _json_lines(text, '"type"')
    results = [e for e in events if e.get("type") == "result" and isinstance(e.get("stats"), dict)]
    if not results:
        return None
    stats = results[-1]["stats"]
    inits = [e for e in events if e.get("type") == "init"]
    return _build(runner, _count(stats.get("input_tokens")), _count(stats.get("output_tokens")),
                  cache_read=_count(stats.get("cached")), model=_model(inits[-1].get("model")) if inits else None,
                  duration_s=_seconds_from_ms(stats.get("duration_ms")))


def parse_opencode(stdout: str, *, runner: str = "opencode") -> Usage | None:
    """OpenCode's usage: ``opencode run --format json`` (JSONL). Each model step ends with a
    ``{"type": "step_finish", "part": {"tokens": {"input", "output", "reasoning", "cache":
    {"read", "write"}}, "cost": …}}`` event; the run's usage is their sum (a step's figures are
    its own, not running totals). OpenCode's ``input`` excludes cached tokens and its ``output``
    excludes reasoning: both are added back. Its ``cost`` is its own estimate from its model
    price list (0 for a free or unpriced model).

    OpenCode names no model and no duration in this stream: those stay None. Without
    ``--format json`` (its default output is text for people) it reports nothing usable.

    Returns:
        The run's ``Usage`` (turns: the steps counted), or None when no step reported tokens.
    """
    ins: list[int | None] = []
    outs: list[int | None] = []
    reads: list[int | None] = []
    writes: list[int | None] = []
    costs: list[float] = []
    steps = 0
    for event in _json_lines(_tail(stdout), "step_finish"):
        part = event.get("part")
        if event.get("type") != "step_finish" or not isinstance(part, dict):
            continue
        tokens = part.get("tokens")
        if not isinstance(tokens, dict):
            continue
        cache = tokens["cache"] if isinstance(tokens.get("cache"), dict) else {}
        read, write = _count(cache.get("read")), _count(cache.get("write"))
        step_in = _add(_count(tokens.get("input")), read, write)
        step_out = _add(_count(tokens.get("output")), _count(tokens.get("reasoning")))
        if step_in is None and step_out is None:
            continue
        steps += 1
        ins.append(step_in)
        outs.append(step_out)
        reads.append(read)
        writes.append(write)
        cost = _cost(part.get("cost"))
        if cost is not None:
            costs.append(cost)
    if not steps:
        return None
    total_cost = round(sum(costs), 6) if costs else None
    return _build(runner, _add(*ins), _add(*outs), cache_read=_add(*reads), cache_write=_add(*writes),
                  cost=total_cost if total_cost is not None and total_cost <= MAX_COST_USD else None,
                  turns=steps if steps <= MAX_TURNS else None)


# The custom line's keys and how each is read.
_CUSTOM_FIELDS: Final = {
    "tokens_in": "count", "tokens_out": "count", "cache_read_tokens": "count", "cache_write_tokens": "count",
    "cost_usd": "decimal", "duration_s": "decimal", "turns": "count", "model": "model",
}


def _custom_line(line: str, runner: str) -> Usage | None:
    if len(line) > MAX_CUSTOM_LINE_CHARS:
        return None
    values: dict[str, Any] = {}
    for pair in line[len(CUSTOM_PREFIX):].split():
        key, sep, raw = pair.partition("=")
        if not sep or not _CUSTOM_KEY_RE.match(key) or key in values:
            return None  # not key=value, or a key given twice: not a line we can trust
        kind = _CUSTOM_FIELDS.get(key)
        if kind is None:
            continue  # a key from a newer palace: ignored
        if kind == "count":
            values[key] = int(raw) if _UINT_RE.match(raw) else None
        elif kind == "decimal":
            values[key] = float(raw) if _DECIMAL_RE.match(raw) else None
        else:
            values[key] = _model(raw)
        if values[key] is None:
            return None
    if "tokens_in" not in values or "tokens_out" not in values:
        return None
    try:
        return Usage(runner=runner, **values)
    except ValidationError:
        return None  # out of bounds, or cache counts larger than tokens_in


def parse_custom_line(stdout: str, *, runner: str = "custom") -> Usage | None:
    """The custom usage line any runner may print on its own line (docs/usage.md)::

        palace-usage: tokens_in=1200 tokens_out=340 cost_usd=0.0123 model=my-model

    ``key=value`` pairs separated by spaces, after the prefix at the start of a line (leading
    blanks allowed). ``tokens_in`` and ``tokens_out`` are required; ``cache_read_tokens``,
    ``cache_write_tokens``, ``turns`` (whole numbers), ``cost_usd``, ``duration_s`` (decimals,
    no exponent) and ``model`` are optional; unknown keys are ignored. A line with a malformed
    value, a repeated key or a number out of bounds is skipped whole; the last line that reads
    wins (a runner may print running totals).

    Returns:
        The ``Usage`` of the last well-formed line, or None.
    """
    if not isinstance(runner, str) or not _RUNNER_RE.match(runner):
        return None
    text = _tail(stdout)
    if CUSTOM_PREFIX not in text:
        return None
    for line in reversed(text.splitlines()):
        line = line.strip()
        if line.startswith(CUSTOM_PREFIX):
            usage = _custom_line(line, runner)
            if usage is not None:
                return usage
    return None


_PARSERS: Final = {"claude": parse_claude, "codex": parse_codex, "gemini": parse_gemini, "opencode": parse_opencode}


def parse_usage(runner: str, stdout: str) -> Usage | None:
    """A run's usage from its output: the built-in harness's own format for ``claude``, ``codex``,
    ``gemini`` and ``opencode``, else (and when that format is not found) the custom line.

    Args:
        runner: the runner's name as configured (the ``Usage.runner`` it yields).
        stdout: what the run printed; only its last MAX_SCAN_CHARS are read.

    Returns:
        The ``Usage``, or None when the output reports none usable.

    Error handling:
        Never raises: a harness's output is untrusted, and an unreadable report is no report.
    """
    if not isinstance(runner, str) or not _RUNNER_RE.match(runner) or not isinstance(stdout, str):
        return None
    parser = _PARSERS.get(runner)
    usage = parser(stdout, runner=runner) if parser is not None else None
    return usage if usage is not None else parse_custom_line(stdout, runner=runner)


# --------------------------------------------------------------------------------------------
# The run's last words: what a failed run's reply quotes instead of raw JSON

# Why 2,000 characters: as much as a failed run's reply quoted of its log before (LOG_TAIL_BYTES);
# the whole output stays in the run's log artifact.
MAX_FINAL_CHARS: Final = 2000


def _words(value: Any) -> str | None:
    return (value.strip()[:MAX_FINAL_CHARS] or None) if isinstance(value, str) else None


def _error_words(value: Any) -> str | None:
    """An error object's message (``{"message"}``, or ``{"data": {"message"}}``), else a string."""
    if isinstance(value, Mapping):
        data = value.get("data")
        found = _words(value.get("message")) or (_words(data.get("message")) if isinstance(data, Mapping) else None)
        return f"error: {found}" if found else None
    found = _words(value)
    return f"error: {found}" if found else None


def _claude_words(text: str) -> str | None:
    doc = _document(text)
    items = doc if isinstance(doc, list) else [doc] if doc is not None else _json_lines(text, '"result"')
    for item in reversed(items):
        if isinstance(item, Mapping) and item.get("type") == "result":
            errors = item.get("errors")
            return _words(item.get("result")) or (
                _error_words("; ".join(e for e in errors if isinstance(e, str))) if isinstance(errors, list) else None)
    return None


def _codex_words(text: str) -> str | None:
    for event in reversed(_json_lines(text, "message")):
        item, msg = event.get("item"), event.get("msg")
        if isinstance(item, Mapping) and item.get("type") == "agent_message" and _words(item.get("text")):
            return _words(item.get("text"))
        if isinstance(msg, Mapping) and msg.get("type") == "agent_message" and _words(msg.get("message")):
            return _words(msg.get("message"))
        if event.get("type") in ("error", "turn.failed"):
            found = _error_words(event.get("error")) or _error_words(event.get("message"))
            if found:
                return found
    return None


def _gemini_words(text: str) -> str | None:
    doc = _document(text)
    if not isinstance(doc, Mapping):
        return None
    return _words(doc.get("response")) or _error_words(doc.get("error"))


def _opencode_words(text: str) -> str | None:
    for event in reversed(_json_lines(text, '"type"')):
        part = event.get("part")
        if event.get("type") == "text" and isinstance(part, Mapping) and _words(part.get("text")):
            return _words(part.get("text"))
        if event.get("type") == "error":
            found = _error_words(event.get("error"))
            if found:
                return found
    return None


_FINAL_READERS: Final = {"claude": _claude_words, "codex": _codex_words, "gemini": _gemini_words,
                         "opencode": _opencode_words}


def final_text(runner: str, stdout: str) -> str | None:
    """The run's last message in words, from a built-in harness's JSON output: Claude Code's
    ``result`` (or its ``errors``), Codex's last ``agent_message`` (or its error), Gemini CLI's
    ``response`` (or ``error.message``), OpenCode's last ``text`` part (or its error). Errors are
    given as ``error: …``. At most MAX_FINAL_CHARS, stripped.

    Returns:
        The text, or None for another runner or output that holds none (the caller quotes the
        output itself then).

    Error handling:
        Never raises: the output is untrusted, read like the usage (its last MAX_SCAN_CHARS).
    """
    reader = _FINAL_READERS.get(runner) if isinstance(runner, str) else None
    if reader is None or not isinstance(stdout, str):
        return None
    return reader(_tail(stdout))


# --------------------------------------------------------------------------------------------
# The usage event's metadata

#: every key of a usage event's metadata, in one canonical set
_METADATA_KEYS: Final = frozenset({
    "runner", "tokens_in", "tokens_out", "cache_read_tokens", "cache_write_tokens", "cost_usd", "model",
    "duration_s", "turns", "task_id", "machine",
})


def _check_task_id(value: Any) -> str:
    if not isinstance(value, str) or not is_task_id(value):
        raise ValidationError("task_id must be the task's correlation id (visible text, at most 256 characters)",
                              field="task_id")
    return value


def _check_machine(value: Any) -> str:
    if (not isinstance(value, str) or not 0 < len(value) <= MAX_MACHINE_CHARS
            or printable(value, MAX_MACHINE_CHARS * 10) != value):
        raise ValidationError(f"machine must be the daemon's name (visible text, at most {MAX_MACHINE_CHARS} "
                              "characters)", field="machine")
    return value


def usage_metadata(usage: Usage, *, task_id: str, machine: str) -> dict[str, Any]:
    """The metadata of a ``usage.report`` event: every field of ``usage`` (None as null), the task
    and the machine it ran on. JSON-serialisable, every value bounded.

    Raises:
        ValidationError: ``task_id`` or ``machine`` is not one (naming it).
    """
    return {
        "runner": usage.runner, "tokens_in": usage.tokens_in, "tokens_out": usage.tokens_out,
        "cache_read_tokens": usage.cache_read_tokens, "cache_write_tokens": usage.cache_write_tokens,
        "cost_usd": usage.cost_usd, "model": usage.model, "duration_s": usage.duration_s, "turns": usage.turns,
        "task_id": _check_task_id(task_id), "machine": _check_machine(machine),
    }


def check_usage_metadata(d: Any) -> Usage:
    """A usage event's metadata from a peer or a client, checked strictly.

    Unknown keys are refused (the metadata is palace's own, not free-form); optional fields may be
    absent or null. ``task_id`` and ``machine`` are checked too: read them from ``d`` once this
    returns.

    Returns:
        The ``Usage`` it describes.

    Raises:
        ValidationError: naming the first field that is wrong.
    """
    if not isinstance(d, Mapping):
        raise ValidationError("usage metadata must be an object", field="metadata")
    unknown = sorted(str(k) for k in d if k not in _METADATA_KEYS)
    if unknown:
        raise ValidationError(f"usage metadata has unknown field {printable(unknown[0], 40)!r} (known: "
                              f"{', '.join(sorted(_METADATA_KEYS))})", field=printable(unknown[0], 40))
    for required in ("runner", "tokens_in", "tokens_out", "task_id", "machine"):
        if d.get(required) is None:
            raise ValidationError(f"usage metadata lacks {required}", field=required)
    _check_task_id(d["task_id"])
    _check_machine(d["machine"])
    return Usage(runner=d["runner"], tokens_in=d["tokens_in"], tokens_out=d["tokens_out"],
                 cache_read_tokens=d.get("cache_read_tokens"), cache_write_tokens=d.get("cache_write_tokens"),
                 cost_usd=d.get("cost_usd"), model=d.get("model"), duration_s=d.get("duration_s"),
                 turns=d.get("turns"))


# --------------------------------------------------------------------------------------------
# Totals


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Record:
    """One usage event as totals read it."""

    created_at: str
    from_agent: str
    machine: str
    task_id: str | None
    usage: Usage


def record_from_event(event: Mapping[str, Any]) -> Record | None:
    """A stored ``usage.report`` event (``type``, ``created_at``, ``from_agent``, ``metadata`` as
    an object or its JSON text) as a ``Record``; None when it is not one or does not check (a
    hostile peer's event is left out of totals, never an error)."""
    if not isinstance(event, Mapping) or event.get("type") != USAGE_TYPE:
        return None
    created_at, agent = event.get("created_at"), event.get("from_agent")
    if not isinstance(created_at, str) or not STAMP_RE.match(created_at) or not isinstance(agent, str) or not agent:
        return None
    metadata = event.get("metadata")
    if isinstance(metadata, str):
        metadata = _loads(metadata) if len(metadata) <= 65_536 else None
    try:
        usage = check_usage_metadata(metadata)
    except ValidationError:
        return None
    assert isinstance(metadata, Mapping)
    return Record(created_at, agent, metadata["machine"], metadata["task_id"], usage)


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Total:
    """The usage of a group of runs: one task, agent, machine, UTC day or model.

    ``cost_usd`` is None when no run of the group reported a cost; when some did and others did
    not (``unpriced_runs`` > 0), it is the sum of the known costs: a floor, not the bill.
    """

    by: str
    #: the task id, agent, machine, day (``YYYY-MM-DD``) or model; None: not reported (a model)
    key: str | None
    runs: int = 0
    tokens_in: int = 0
    tokens_out: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    #: the known costs' sum in micro-dollars (exact and order-independent), None if none known
    cost_micros: int | None = None
    #: runs that reported no cost
    unpriced_runs: int = 0

    @property
    def cost_usd(self) -> float | None:
        return None if self.cost_micros is None else self.cost_micros / _MICROS

    @property
    def tokens(self) -> int:
        """What a token budget counts: ``tokens_in + tokens_out``."""
        return self.tokens_in + self.tokens_out

    def add(self, usage: Usage) -> Total:
        """This total with one more run."""
        micros = cost_micros(usage)
        return dataclasses.replace(
            self, runs=self.runs + 1, tokens_in=self.tokens_in + usage.tokens_in,
            tokens_out=self.tokens_out + usage.tokens_out,
            cache_read_tokens=self.cache_read_tokens + (usage.cache_read_tokens or 0),
            cache_write_tokens=self.cache_write_tokens + (usage.cache_write_tokens or 0),
            cost_micros=self.cost_micros if micros is None else (self.cost_micros or 0) + micros,
            unpriced_runs=self.unpriced_runs + (usage.cost_usd is None))

    def to_wire(self) -> dict[str, Any]:
        """The JSON shape ``palacectl usage --json`` and the API give a total."""
        return {"by": self.by, "key": self.key, "runs": self.runs, "tokens_in": self.tokens_in,
                "tokens_out": self.tokens_out, "cache_read_tokens": self.cache_read_tokens,
                "cache_write_tokens": self.cache_write_tokens, "cost_usd": self.cost_usd,
                "unpriced_runs": self.unpriced_runs}

    def __repr__(self) -> str:
        cost = "?" if self.cost_usd is None else format_usd(self.cost_usd) + ("+" if self.unpriced_runs else "")
        return f"<Total {self.by}={self.key} runs={self.runs} tokens={self.tokens} cost={cost}>"


def format_usd(value: float) -> str:
    """A cost for a person, the same in the CLI, notifications and the dashboard (its ``usd()`` in
    palacectl/ui/static/app.js): cents from a cent up (``$1,234.56``); below a cent four decimals,
    rounded down so a fraction never reads as a whole cent (``$0.0040``, not ``$0.01``); below a
    hundredth of a cent ``<$0.0001``; nothing spent ``$0.00``."""
    micros = round(value * _MICROS)
    if micros <= 0:
        return "$0.00"
    if micros < _MICROS // 10_000:
        return "<$0.0001"
    if micros < _MICROS // 100:
        return f"${micros // 100 / 10_000:.4f}"
    return f"${micros / _MICROS:,.2f}"


def cost_micros(usage: Usage) -> int | None:
    """``usage``'s cost in whole micro-dollars (what totals add up), None when unknown."""
    return None if usage.cost_usd is None else round(usage.cost_usd * _MICROS)


def total_of(by: str, key: str | None, *, runs: int, tokens_in: int, tokens_out: int, cache_read_tokens: int,
             cache_write_tokens: int, priced_micros: int, unpriced_runs: int) -> Total:
    """A ``Total`` from sums kept elsewhere (palaced's running totals): ``priced_micros`` is the
    sum of the known costs, which the total gives as unknown (None) when every run was unpriced."""
    return Total(by, key, runs, tokens_in, tokens_out, cache_read_tokens, cache_write_tokens,
                 None if runs == unpriced_runs else priced_micros, unpriced_runs)


def _group_key(record: Record, by: str) -> str | None:
    if by == "task":
        return record.task_id
    if by == "agent":
        return record.from_agent
    if by == "machine":
        return record.machine
    if by == "day":
        return record.created_at[:10] if STAMP_RE.match(record.created_at) else None
    return record.usage.model


def totals(records: Iterable[Record | tuple[str, str, str, str | None, Usage]], by: str) -> list[Total]:
    """Sum ``records`` by ``by`` (one of BY_FIELDS). Filtering by time (``--since``) is the caller's.

    Args:
        records: ``Record``s, or ``(created_at, from_agent, machine, task_id, usage)`` tuples.
        by: ``task``, ``agent``, ``machine``, ``day`` (UTC, from ``created_at``) or ``model``.

    Returns:
        One ``Total`` per group, ordered by key (a group of unknown key, None, last); the same
        list whatever order the records come in.

    Raises:
        ValueError: ``by`` is not one of BY_FIELDS.
    """
    if by not in BY_FIELDS:
        raise ValidationError(f"by must be one of {', '.join(BY_FIELDS)}", field="by")
    groups: dict[str | None, Total] = {}
    for item in records:
        record = item if isinstance(item, Record) else Record(*item)
        key = _group_key(record, by)
        groups[key] = groups.get(key, Total(by, key)).add(record.usage)
    return sorted(groups.values(), key=lambda t: (t.key is None, t.key or ""))


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Spending:
    """What counts against each budget at one moment (``spending``)."""

    #: the UTC day and month of that moment
    day: str
    month: str
    #: each agent's runs of ``day``
    agents_today: tuple[Total, ...]
    #: each task's runs, all of them
    tasks: tuple[Total, ...]
    #: the palace's runs of ``month``
    palace_month: Total


def spending(records: Iterable[Record | tuple[str, str, str, str | None, Usage]], now: str) -> Spending:
    """Sum ``records`` into the windows budgets judge at ``now`` (an event timestamp, UTC).

    Pass at least this month's usage events and every usage event of the tasks to judge (a task
    budget counts all its runs, whenever they were).

    Raises:
        ValidationError: ``now`` is not an event timestamp.
    """
    if not isinstance(now, str) or not STAMP_RE.match(now):
        raise ValidationError("now must be a UTC timestamp (YYYY-MM-DDTHH:MM:SS[.ffffff]Z)", field="now")
    day, month = now[:10], now[:7]
    rows = [item if isinstance(item, Record) else Record(*item) for item in records]
    month_total = Total("month", month)
    for row in rows:
        if row.created_at[:7] == month:
            month_total = month_total.add(row.usage)
    return Spending(day=day, month=month,
                    agents_today=tuple(totals((r for r in rows if r.created_at[:10] == day), "agent")),
                    tasks=tuple(t for t in totals(rows, "task") if t.key is not None), palace_month=month_total)


# --------------------------------------------------------------------------------------------
# Budgets

#: the keys of [budgets], with what each limits (docs/usage.md, "Budgets")
BUDGET_KEYS: Final = {
    "agent_daily_usd": "each agent's cost per UTC day",
    "agent_daily_tokens": "each agent's tokens (in + out) per UTC day",
    "task_usd": "each task's cost over all its runs",
    "task_tokens": "each task's tokens over all its runs",
    "palace_monthly_usd": "the whole palace's cost per UTC calendar month",
    "palace_monthly_tokens": "the whole palace's tokens per UTC calendar month",
    "warn_at": "the fraction of a budget at which palace warns (default 0.8)",
    "agents": "per-agent daily budgets: [budgets.agents.\"ID\"] daily_usd, daily_tokens",
}
_AGENT_KEYS: Final = ("daily_usd", "daily_tokens")


@final
@dataclasses.dataclass(frozen=True, slots=True)
class AgentBudget:
    """One agent's own daily budget (``[budgets.agents."ID"]``); a limit left out is the default's."""

    daily_usd: float | None = None
    daily_tokens: int | None = None


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Budgets:
    """The ``[budgets]`` table: every limit optional (None: no such budget)."""

    agent_daily_usd: float | None = None
    agent_daily_tokens: int | None = None
    task_usd: float | None = None
    task_tokens: int | None = None
    palace_monthly_usd: float | None = None
    palace_monthly_tokens: int | None = None
    warn_at: float = DEFAULT_WARN_AT
    #: agent id → its own daily budget
    agents: Mapping[str, AgentBudget] = dataclasses.field(default_factory=dict)

    def agent(self, agent: str) -> tuple[float | None, int | None]:
        """``agent``'s daily (usd, tokens) limits: its own where set, else the default's."""
        own = self.agents.get(agent, AgentBudget())
        return (own.daily_usd if own.daily_usd is not None else self.agent_daily_usd,
                own.daily_tokens if own.daily_tokens is not None else self.agent_daily_tokens)


def _usd_limit(field: str, value: Any) -> float:
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or not 0 < value <= MAX_COST_USD * 100):
        raise ValidationError(f"{field} must be an amount in US dollars above 0 (e.g. 20 or 2.50)", field=field)
    return float(value)


def _token_limit(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_TOKENS * 100:
        raise ValidationError(f"{field} must be a whole number of tokens above 0 (e.g. 5_000_000)", field=field)
    return value


def parse_budgets(table: Any, *, section: str = "budgets") -> Budgets:
    """The ``[budgets]`` table of ``config.toml`` (as ``tomllib`` reads it) as ``Budgets``.

    Raises:
        ValidationError: an unknown key, or a value of the wrong type or range; the message and
            ``field`` name the key as written (``budgets.task_usd``, ``budgets.agents.ID.daily_usd``).
    """
    if table is None:
        return Budgets()
    if not isinstance(table, Mapping):
        raise ValidationError(f"[{section}] must be a table", field=section)
    values: dict[str, Any] = {}
    for key, value in table.items():
        field = f"{section}.{key}"
        if key not in BUDGET_KEYS:
            raise ValidationError(f"unknown key {printable(field, 80)} (known: {', '.join(sorted(BUDGET_KEYS))})",
                                  field=printable(field, 80))
        if key == "agents":
            values[key] = _parse_agent_budgets(field, value)
        elif key == "warn_at":
            if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
                    or not 0 < value <= 1):
                raise ValidationError(f"{field} must be a fraction above 0 and at most 1 (e.g. 0.8)", field=field)
            values[key] = float(value)
        elif key.endswith("_usd"):
            values[key] = _usd_limit(field, value)
        else:
            values[key] = _token_limit(field, value)
    return Budgets(**values)


def _parse_agent_budgets(field: str, value: Any) -> dict[str, AgentBudget]:
    if not isinstance(value, Mapping):
        raise ValidationError(f"{field} must be a table of agent ids ([{field}.\"mac-claude\"])", field=field)
    agents: dict[str, AgentBudget] = {}
    for agent, limits in value.items():
        where = f"{field}.{printable(agent, 80)}"
        if not isinstance(agent, str) or not agent or printable(agent, 300) != agent or len(agent) > 256:
            raise ValidationError(f"{where} is not an agent id", field=where)
        if not isinstance(limits, Mapping):
            raise ValidationError(f"{where} must be a table (daily_usd, daily_tokens)", field=where)
        own: dict[str, Any] = {}
        for key, limit in limits.items():
            if key not in _AGENT_KEYS:
                raise ValidationError(f"unknown key {where}.{printable(key, 40)} (known: {', '.join(_AGENT_KEYS)})",
                                      field=f"{where}.{printable(key, 40)}")
            own[key] = (_usd_limit if key == "daily_usd" else _token_limit)(f"{where}.{key}", limit)
        agents[agent] = AgentBudget(**own)
    return agents


#: the judgements, in increasing severity
STATES: Final = ("ok", "warn", "over")


@final
@dataclasses.dataclass(frozen=True, slots=True)
class Breach:
    """One budget judged for one subject: where its spending stands against its limit."""

    #: the [budgets] key (``agent_daily_usd`` … ``palace_monthly_tokens``)
    budget: str
    #: ``agent``, ``task`` or ``palace``
    scope: str
    #: the agent id, the task id, or ``palace``
    subject: str
    #: the window: the UTC day (agent), ``all runs`` (task) or the UTC month (palace)
    window: str
    #: ``usd`` or ``tokens``
    unit: str
    spent: float | int
    limit: float | int
    #: ``ok``, ``warn`` or ``over``
    state: str
    #: runs of the window that reported no cost (a USD figure is then a floor)
    unpriced_runs: int = 0

    @property
    def fraction(self) -> float:
        return self.spent / self.limit

    @property
    def key(self) -> tuple[str, str, str]:
        """What a notification is sent once for: the budget, its subject and the window."""
        return (self.budget, self.subject, self.window)

    def describe(self) -> str:
        """One line for a person (a notification, a ``blocked`` reply, ``who``)."""
        def figure(value: float) -> str:
            return format_usd(value) if self.unit == "usd" else f"{value:,} tokens"

        whose = {"agent": f"agent {self.subject}", "task": f"task {self.subject}", "palace": "the palace"}[self.scope]
        per = {"agent": f"daily budget ({self.window})", "task": "budget", "palace": f"monthly budget ({self.window})"}
        floor = f"; {self.unpriced_runs} run(s) reported no cost" if self.unit == "usd" and self.unpriced_runs else ""
        verdict = {"ok": "within", "warn": "nearing", "over": "over"}[self.state]
        return (f"{whose} is {verdict} its {figure(self.limit)} {per[self.scope]}: {figure(self.spent)} spent, "
                f"{self.fraction:.0%}{floor}")

    def to_wire(self) -> dict[str, Any]:
        return {"budget": self.budget, "scope": self.scope, "subject": self.subject, "window": self.window,
                "unit": self.unit, "spent": self.spent, "limit": self.limit, "state": self.state,
                "unpriced_runs": self.unpriced_runs}

    def __repr__(self) -> str:
        return f"<Breach {self.budget} {self.subject} {self.state} {self.spent}/{self.limit}>"


def _judge(budgets: Budgets, budget: str, scope: str, subject: str, window: str, total: Total,
           limit: float | None) -> Breach | None:
    if limit is None:
        return None
    unit = "usd" if budget.endswith("_usd") else "tokens"
    spent: float | int = (total.cost_micros or 0) / _MICROS if unit == "usd" else total.tokens
    # Compared in whole micro-dollars / tokens, so 80 % of $5.00 is exactly $4.00 on every machine.
    scaled = (total.cost_micros or 0) if unit == "usd" else total.tokens
    scaled_limit = round(limit * _MICROS) if unit == "usd" else int(limit)
    state = ("over" if scaled >= scaled_limit
             else "warn" if scaled >= math.ceil(scaled_limit * budgets.warn_at - 1e-9) else "ok")
    return Breach(budget, scope, subject, window, unit, spent, limit, state,
                  total.unpriced_runs if unit == "usd" else 0)


def judge_budgets(budgets: Budgets, totals_now: Spending) -> list[Breach]:
    """Every budget of ``budgets`` judged against ``totals_now`` (from ``spending``).

    Agents and tasks without runs in their window are not listed (they are ``ok`` at 0).

    Returns:
        One ``Breach`` per budget and subject: palace first, then agents, then tasks, each in key
        order; ``state`` is ``ok``, ``warn`` (at or past ``warn_at``) or ``over`` (at or past
        the limit).
    """
    judged: list[Breach | None] = []
    month = totals_now.palace_month
    judged.append(_judge(budgets, "palace_monthly_usd", "palace", "palace", totals_now.month, month,
                         budgets.palace_monthly_usd))
    judged.append(_judge(budgets, "palace_monthly_tokens", "palace", "palace", totals_now.month, month,
                         budgets.palace_monthly_tokens))
    for total in totals_now.agents_today:
        if total.key is None:
            continue
        usd, tokens = budgets.agent(total.key)
        judged.append(_judge(budgets, "agent_daily_usd", "agent", total.key, totals_now.day, total, usd))
        judged.append(_judge(budgets, "agent_daily_tokens", "agent", total.key, totals_now.day, total, tokens))
    for total in totals_now.tasks:
        if total.key is None:
            continue
        judged.append(_judge(budgets, "task_usd", "task", total.key, "all runs", total, budgets.task_usd))
        judged.append(_judge(budgets, "task_tokens", "task", total.key, "all runs", total, budgets.task_tokens))
    return [b for b in judged if b is not None]


def blocking(breaches: Sequence[Breach], *, agent: str | None = None, task: str | None = None) -> list[Breach]:
    """The ``over`` judgements that stop work: for ``agent``, its daily budgets and the palace's
    monthly ones (a worker stops claiming); for ``task``, the task's budgets (its run is stopped
    and the task replied ``blocked``)."""
    def applies(breach: Breach) -> bool:
        if agent is not None and (breach.scope == "palace" or (breach.scope == "agent" and breach.subject == agent)):
            return True
        return task is not None and breach.scope == "task" and breach.subject == task

    return [b for b in breaches if b.state == "over" and applies(b)]


# -- the feature's declaration (palace_proto.features puts every feature's together) ----------------

#: the local API's operations of usage
OPS: Final = frozenset({"usage"})
NAMESPACE: Final = "usage."


def _check_report(kind: str, body: str | None, metadata_json: str) -> None:
    # What every replica sums: a report is checked field by field before it is appended.
    check_usage_metadata(json.loads(metadata_json))


def _names_its_task(event: Mapping[str, Any], task: str) -> str | None:
    metadata = event.get("metadata")
    named = metadata.get("task_id") if isinstance(metadata, Mapping) else None
    return None if named == task else "usage.report must name its task in metadata.task_id"


#: a client's usage report must carry figures that check
APPEND_CHECKS: Final = {USAGE_TYPE: _check_report}
# Why 256 reports per task: one per run; a task run 256 times is a loop, not work (issue 43, finding 4).
MAX_USAGE_REPORTS_PER_TASK: Final = 256
RULES: Final[tuple[Rule, ...]] = (
    Rule("usage.report", ("usage.report",), (), "task", frozenset({EVER_CLAIMED}),
         "an existing task, named both by its correlation id and by metadata.task_id",
         "summed into every total and budget; only the first reports of a task count",
         per_subject=MAX_USAGE_REPORTS_PER_TASK, refers=_names_its_task,
         test="tests/e2e/test_usage.py::test_a_forged_usage_report_counts_nowhere_and_stops_no_worker"),
    Rule("usage.budget", ("usage.budget",), (), "", frozenset({ANY_AGENT}),
         "a budget reached (a worker says so)", "moves nothing",
         test="tests/e2e/test_authority.py::test_every_rule_flags_what_a_hostile_member_writes_and_moves_nothing"),
)
