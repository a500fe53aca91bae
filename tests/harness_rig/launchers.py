"""Each harness set up as the README says, pointed at a scripted model, and run headless offline.

``Harness`` knows, for one of the four, the provider API it speaks, how it is told where its model
is (an environment variable, or a provider entry in its own config file: the rig's additions,
written after the README's), its headless command, and the prefix of the call ids the rig makes
for it. ``configure`` writes the README's files and runs its commands and ``palacectl rules``
(``--hooks`` where palace has a session-start hook for that harness); ``User`` is one HOME with
a palace on its default home, where the harnesses are configured; ``Rig`` is one harness run:
its network namespace, its model server and the harness process.

What each harness needed beyond the README, found by running it against the rig:

* Claude Code: ``ANTHROPIC_BASE_URL`` and ``ANTHROPIC_API_KEY``.
* Codex: ``model`` / ``model_provider`` and a ``[model_providers.rig]`` with ``wire_api =
  "responses"`` and ``env_key`` in ``config.toml``. It groups MCP tools in a Responses
  ``namespace`` (``mcp__palace``). It runs a hooks.json hook only once a person trusted it (0.149+;
  silently skipped otherwise): the headless run passes ``--dangerously-bypass-hook-trust``, as
  docs/coordination.md tells a user who starts one.
* Gemini CLI: ``GEMINI_API_KEY`` and ``GOOGLE_GEMINI_BASE_URL``, plus ``security.auth.selectedType
  = "gemini-api-key"`` in settings.json: with only the base URL set, 0.61 picks its "gateway" auth
  type and then refuses it ("Invalid auth method selected.", exit 41).
* OpenCode: a provider with ``"npm": "@ai-sdk/openai-compatible"`` and ``options.baseURL`` in
  opencode.json and ``"model": "rig/scripted"``. 1.18 bundles that package: it downloads nothing
  (its models.dev fetch fails offline and is only logged).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from palacectl.hooks import HOOK_HARNESSES
from tests.helpers import PYTHON, init_repo, run_ctl_process

from .dialects import Anthropic, ChatCompletions, Dialect, Gemini, Responses
from .install import QUIET
from .netns import Netns
from .readme import HarnessSetup, harness_setups
from .script import Script
from .server import ModelServer

__all__ = ["HARNESSES", "Harness", "Rig", "User", "configure", "deep_merge"]

RIG_KEY = "rig-test-key"  # the API key every harness sends the rig (checked by nobody)


def deep_merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """``base`` with ``extra`` merged in, objects key by key (the later value wins otherwise)."""
    out = dict(base)
    for key, value in extra.items():
        out[key] = deep_merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@dataclass(frozen=True)
class Harness:
    name: str
    dialect: type[Dialect]
    #: the call ids the rig makes (Claude Code keeps Anthropic's ``toolu_`` form)
    id_prefix: str
    #: the instruction file ``palacectl rules`` writes for it
    rules_file: str

    def headless(self, prompt: str) -> list[str]:
        """The one-prompt, non-interactive run (the runner ``task launch`` uses is its own)."""
        # Codex runs palace's hook only once trusted; a headless run passes the bypass, as
        # docs/coordination.md says (without it the hook is skipped without a word).
        return {"claude": ["claude", "-p", prompt], "codex": ["codex", "exec", "--dangerously-bypass-hook-trust", prompt],
                "gemini": ["gemini", "--skip-trust", "-p", prompt], "opencode": ["opencode", "run", prompt]}[self.name]

    def model_env(self, url: str) -> dict[str, str]:
        return {"claude": {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": RIG_KEY},
                "codex": {"RIG_API_KEY": RIG_KEY},
                "gemini": {"GEMINI_API_KEY": RIG_KEY, "GOOGLE_GEMINI_BASE_URL": url},
                "opencode": {}}[self.name]

    def point_at(self, user: Path, url: str) -> None:
        """Add the rig's model to the harness's config files (after the README's own lines)."""
        if self.name == "codex":
            config = user / ".codex" / "config.toml"
            config.write_text('model = "scripted"\nmodel_provider = "rig"\n\n' + config.read_text()
                              + f'\n[model_providers.rig]\nname = "rig"\nbase_url = "{url}/v1"\n'
                              'env_key = "RIG_API_KEY"\nwire_api = "responses"\n')
        elif self.name == "gemini":
            _merge_json(user / ".gemini" / "settings.json", {"security": {"auth": {"selectedType": "gemini-api-key"}}})
        elif self.name == "opencode":
            _merge_json(user / ".config" / "opencode" / "opencode.json", {
                "provider": {"rig": {"npm": "@ai-sdk/openai-compatible", "name": "rig",
                                     "options": {"baseURL": f"{url}/v1", "apiKey": RIG_KEY},
                                     "models": {"scripted": {"name": "scripted", "tool_call": True}}}},
                "model": "rig/scripted"})

    @property
    def has_hook(self) -> bool:
        return self.name in HOOK_HARNESSES


HARNESSES: dict[str, Harness] = {h.name: h for h in (
    Harness("claude", Anthropic, "toolu_rig_", "~/.claude/CLAUDE.md"),
    Harness("codex", Responses, "call_rig_", "~/.codex/AGENTS.md"),
    Harness("gemini", Gemini, "call_rig_", "~/.gemini/GEMINI.md"),
    Harness("opencode", ChatCompletions, "call_rig_", "~/.config/opencode/AGENTS.md"),
)}


def _merge_json(path: Path, extra: dict[str, Any]) -> None:
    current = json.loads(path.read_text()) if path.exists() else {}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(deep_merge(current, extra), indent=2))


def expand(user: Path, path: str) -> Path:
    return user / path.removeprefix("~/")


def user_env(user: Path, bin_dir: Path, palacectl: str) -> dict[str, str]:
    """The environment of a user whose HOME is ``user``: the harnesses and palacectl on PATH, the
    default palace home (no PALACE_HOME: the README's commands name none), quiet."""
    env = {k: v for k, v in os.environ.items() if k not in ("PALACE_HOME", "PALACE_AGENT")}
    env.update(HOME=str(user), **QUIET)
    env["PATH"] = os.pathsep.join([str(bin_dir), str(Path(palacectl).parent), env["PATH"]])
    return env


def configure(setup: HarnessSetup, user: Path, env: dict[str, str], run_ctl: Any) -> list[str]:
    """Configure ``setup.harness`` in ``user`` exactly as the README's blocks say: its files, its
    commands (run offline), then its rules (``--hooks`` too where palace has a hook for it).
    ``run_ctl(*args)`` runs palacectl as the user; it must succeed.

    Returns what went differently from the README: ``rules --hooks`` refuses a settings file laid
    out as the README prints it (palace writes such files back byte for byte and cannot keep that
    layout); the rig then does what its message says — the file saved once in the harnesses' own
    two-space layout — and tries again."""
    deviations = []
    for path, (lang, text) in setup.files.items():
        target = expand(user, path)
        target.parent.mkdir(parents=True, exist_ok=True)
        if lang == "json" and target.exists():  # a file the harness or palace wrote already: merged
            target.write_text(json.dumps(deep_merge(json.loads(target.read_text()), json.loads(text)), indent=2))
        else:
            target.write_text(text)
    with Netns() as ns:
        for command in setup.commands:
            done = subprocess.run(ns.command(command), check=False, env=env, cwd=user, capture_output=True, text=True,
                                  timeout=120, stdin=subprocess.DEVNULL)
            assert done.returncode == 0, (command, done.stdout, done.stderr)
    hooks = ["--hooks"] if HARNESSES[setup.harness].has_hook else []
    result = run_ctl(*setup.rules, *hooks)
    if result.returncode != 0 and "laid out in a way palace would change" in result.stderr:
        deviations.append(f"`palacectl {' '.join(setup.rules + hooks)}` refused the README's layout: "
                          f"{result.stderr.strip()}")
        for path, (lang, _) in setup.files.items():
            if lang == "json":
                target = expand(user, path)
                target.write_text(json.dumps(json.loads(target.read_text()), indent=2) + "\n")
        result = run_ctl(*setup.rules, *hooks)
    assert result.returncode == 0, (setup.rules, result)
    return deviations


class User:
    """One user (one HOME) with a palace daemon on its default home and the four harnesses."""

    def __init__(self, root: Path, home: Path, bin_dir: Path, readme: Path) -> None:
        self.root = root
        self.home = home
        palacectl = Path(PYTHON).parent / "palacectl"
        if not palacectl.exists():
            pytest.skip("the palacectl console script is not installed beside this Python (pip install -e .)")
        self.palacectl = str(palacectl)
        self.env = user_env(root, bin_dir, self.palacectl)
        self.setups = harness_setups(readme.read_text(), self.palacectl)

    def __repr__(self) -> str:
        return f"<User {self.root} palace={self.home}>"

    def ctl(self, *args: str) -> Any:
        return run_ctl_process(self.home, *args, env=self.env)

    def configure(self, name: str) -> tuple[str, Path, list[str]]:
        """The harness configured as the README says: its agent id, a project (a git repo) for it,
        and what did not go as the README says (``launchers.configure``)."""
        setup = self.setups[name]
        deviations = configure(setup, self.root, self.env, self.ctl)
        project = self.root / f"project-{name}"
        init_repo(project)
        return setup.agent, project, deviations


class Rig:
    """One harness run: a network namespace, a model server in it speaking the harness's API and
    replaying ``script``, and the harness started in it (``start``), in ``cwd``."""

    def __init__(self, harness: Harness, script: Script, user: Path, env: dict[str, str], cwd: Path,
                 log_dir: Path) -> None:
        self.harness = harness
        self.script = script
        self.user = user
        self.cwd = cwd
        self.netns = Netns()
        self.server = ModelServer(harness.dialect(), script, self.netns.listen()).__enter__()
        self.env = {**env, **harness.model_env(self.server.url)}
        harness.point_at(user, self.server.url)
        self.stdout_path = log_dir / f"{harness.name}.out"
        self.stderr_path = log_dir / f"{harness.name}.err"
        self.proc: subprocess.Popen[bytes] | None = None
        self.started_at = self.ended_at = 0.0

    def __repr__(self) -> str:
        state = "not started" if self.proc is None else f"rc={self.proc.poll()}"
        return f"<Rig {self.harness.name} {state} {self.server!r}>"

    def start(self, argv: list[str]) -> Rig:
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.started_at = time.monotonic()
            self.proc = subprocess.Popen(self.netns.command(argv), env=self.env, cwd=self.cwd, stdout=out, stderr=err,
                                         stdin=subprocess.DEVNULL, start_new_session=True)
        return self

    def wait(self, timeout: float) -> int | None:
        """The exit code, or None if it had to be killed after ``timeout`` seconds."""
        assert self.proc is not None
        try:
            code: int | None = self.proc.wait(max(0.0, timeout))
        except subprocess.TimeoutExpired:
            code = None
        self.ended_at = time.monotonic()
        self.stop()
        return code

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        try:  # whatever it left running in its session (an MCP server, a shell)
            if self.proc is not None:
                os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def output(self, limit: int = 4000) -> str:
        out = self.stdout_path.read_text(errors="replace") if self.stdout_path.exists() else ""
        err = self.stderr_path.read_text(errors="replace") if self.stderr_path.exists() else ""
        return f"stdout: {out[-limit:]}\nstderr: {err[-limit:]}"

    def report(self) -> str:
        """Everything a failed assertion should show about this run."""
        return f"{self!r}\n{self.server.summary()}\n{self.output()}"

    def close(self) -> None:
        self.stop()
        self.server.__exit__(None, None, None)
        self.netns.close()
