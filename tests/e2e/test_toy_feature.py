"""A feature is one folder per package (issue 44 §1): a toy feature — an event type with its row of
the authority table, two operations, a command group, an MCP tool, a dashboard page — written into
a copy of palace's three packages, one folder each (``palace_proto/``, ``palaced/features/``,
``palacectl/features/``: the feature's modules and a line in each registry), works end to end: a
real daemon and real palacectl processes run from that copy, the CLI puts a toy in a box, the MCP
tool puts another, ``append`` cannot write the type (its row says an operation writes it), and the
dashboard lists the box on the toy's page, linked from the nav.

Nothing else of the copy changes: the test checks which files differ from the packages it copied.
"""

from __future__ import annotations

import filecmp
import json
import shutil
from pathlib import Path
from typing import Any

import trio
from mcp import Client
from mcp.client.stdio import StdioServerParameters

from tests.dashboard import DashboardProcess
from tests.helpers import PYTHON, Daemon, run_ctl_process

ROOT = Path(__file__).resolve().parents[2]
#: palace's packages as the copy holds them (the import name, the folder it is in here)
PACKAGES = {"palace_proto": ROOT / "proto", "palaced": ROOT / "palaced", "palacectl": ROOT / "palacectl",
            "palace_rules": ROOT / "rules"}
#: where a feature lives in each package: the only folder the toy may touch
FEATURE_FOLDERS = {"palace_proto": "palace_proto", "palaced": "palaced/features", "palacectl": "palacectl/features"}
TEST = "tests/e2e/test_toy_feature.py::test_a_feature_is_one_folder_per_package_and_works_end_to_end"

TOY_PROTO = f'''"""A toy feature, a test's: a toy put in a box (``toy.put``). Pure."""

from __future__ import annotations

from typing import Final

from .authority import ANY_AGENT, Rule

OPS: Final = frozenset({{"toy_put", "toy_box"}})
NAMESPACE: Final = "toy."
RULES: Final[tuple[Rule, ...]] = (
    Rule("toy.put", ("toy.put",), (), "", frozenset({{ANY_AGENT}}), "a box and a toy", "toys pile up",
         written_by="toy_put (palacectl toy put)", test="{TEST}"),
)
'''

TOY_DAEMON = '''"""A toy feature, a test's: ``toy_put`` puts a toy in a box, ``toy_box`` says what a box holds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from palace_proto.validation import AppendRequest, ListQuery, clean_required

from ..feature import Feature
from ..handlers.context import Context
from ..store import append_event


async def toy_put(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    ctx.require_writer()
    box, toy, agent = (clean_required(key, args.get(key)) for key in ("box", "toy", "agent"))
    request = AppendRequest.from_wire({"type": "toy.put", "stream": "toys", "room": box, "from_agent": agent,
                                       "body": toy}, ctx.limits)
    return {"event": await ctx.store.write(lambda w: append_event(w, request))}


async def toy_box(ctx: Context, args: Mapping[str, Any]) -> dict[str, Any]:
    box = clean_required("box", args.get("box"))
    events = await ctx.store.list_events(ListQuery.from_wire({"types": ["toy.put"], "rooms": [box], "limit": 500}))
    return {"box": box, "toys": [event["body"] for event in events], "count": len(events)}


FEATURE: Final = Feature(name="toy", ops={"toy_put": toy_put, "toy_box": toy_box})
'''

TOY_CTL = {
    "__init__.py": '''"""A toy feature, a test's: toys in boxes. Standard library only, as every declaration."""

from __future__ import annotations

from typing import Final

from ...feature import Feature, Page

FEATURE: Final = Feature(
    name="toy", cli=f"{__name__}.cli", tools={"toys": ("mempalace_toy_put",)}, tools_module=f"{__name__}.tools",
    ui=f"{__name__}.page", script=f"{__name__}:page.js", pages=(Page("toys", "Toys"),))
''',
    "cli.py": '''"""The toy feature's commands: ``palacectl toy put`` and ``palacectl toy box``."""

from __future__ import annotations

from typing import Annotated, Final

import typer

from ...cli.common import JsonOpt, current_home
from ...loop import call
from ...output import EXIT_OK, emit

toy_app = typer.Typer(no_args_is_help=True, help="Toys in boxes.")


@toy_app.command("put")
def put(box: Annotated[str, typer.Option("--box")], toy: Annotated[str, typer.Option("--toy")],
        agent: Annotated[str, typer.Option("--agent")], json_: JsonOpt = False) -> None:
    """Put a toy in a box."""
    result = call(current_home(), "toy_put", box=box, toy=toy, agent=agent)
    emit(result, json_, f"Put {toy} in {box}")
    raise typer.Exit(EXIT_OK)


@toy_app.command("box")
def box(box: Annotated[str, typer.Option("--box")], json_: JsonOpt = False) -> None:
    """What a box holds."""
    result = call(current_home(), "toy_box", box=box)
    emit(result, json_, f"{result['count']} toys in {box}: {', '.join(result['toys'])}")
    raise typer.Exit(EXIT_OK)


COMMANDS: Final = {}
GROUPS: Final = {"toy": toy_app}
''',
    "tools.py": '''"""The toy feature's MCP tool (``--tools toys``)."""

from __future__ import annotations

from ...mcp_tools import Palace, Result, tool


@tool("toys", mutating=True, returns={"event": "object"}, description="Put a toy in a box. Returns {event}.")
async def mempalace_toy_put(palace: Palace, /, box: str, toy: str) -> Result:
    return await palace.daemon.call("toy_put", box=box, toy=toy, agent=palace.speaks_as("agent", None))
''',
    "page.py": '''"""The toy feature's dashboard part: ``GET /api/toys?box=NAME``."""

from __future__ import annotations

from typing import Any, Final

from ...ui.http import Request
from ...ui.views import Route, Views


async def toys(views: Views, request: Request) -> dict[str, Any]:
    return await views.call("toy_box", box=request.one("box") or "attic")


ROUTES: Final = (Route("GET", r"^/api/toys$", toys),)
''',
    "page.js": '''// The toy feature's page: what the attic holds.
"use strict";

async function pageToys(page) {
  const data = await api("/api/toys");
  page.append(h("h1", {}, "Toys"), h("p", { id: "toys" }, `${data.count} toys in ${data.box}`));
}

page("toys", pageToys);
''',
}


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text(encoding="utf-8")
    assert text.count(old) == 1, f"{path}: the registry changed shape ({old!r}); update this test"
    path.write_text(text.replace(old, new), encoding="utf-8")


def _copy_with_toy(src: Path) -> None:
    """palace's packages copied into ``src``, and the toy added as a person adding a feature would."""
    for name, folder in PACKAGES.items():
        shutil.copytree(folder, src / name, ignore=shutil.ignore_patterns("__pycache__"))
    (src / "palace_proto" / "toy.py").write_text(TOY_PROTO, encoding="utf-8")
    _edit(src / "palace_proto" / "features.py", "from . import agents, artifacts,",
          "from . import toy\nfrom . import agents, artifacts,")
    _edit(src / "palace_proto" / "features.py", "FEATURES: Final[tuple[ModuleType, ...]] = (",
          "FEATURES: Final[tuple[ModuleType, ...]] = (toy, ")
    (src / "palaced" / "features" / "toy.py").write_text(TOY_DAEMON, encoding="utf-8")
    _edit(src / "palaced" / "features" / "__init__.py", "from . import agents, artifacts,",
          "from . import toy\nfrom . import agents, artifacts,")
    _edit(src / "palaced" / "features" / "__init__.py", "FEATURES: Final[tuple[Feature, ...]] = (",
          "FEATURES: Final[tuple[Feature, ...]] = (toy.FEATURE, ")
    package = src / "palacectl" / "features" / "toy"
    package.mkdir()
    for name, text in TOY_CTL.items():
        (package / name).write_text(text, encoding="utf-8")
    _edit(src / "palacectl" / "features" / "__init__.py", "from . import (\n    agents,\n    approvals,",
          "from . import toy\nfrom . import (\n    agents,\n    approvals,")
    _edit(src / "palacectl" / "features" / "__init__.py", "FEATURES: Final[tuple[Feature, ...]] = (",
          "FEATURES: Final[tuple[Feature, ...]] = (toy.FEATURE, ")


def _touched(src: Path) -> list[str]:
    """The files of the copy that differ from palace's: added, changed or gone."""
    changed: list[str] = []

    def walk(compare: filecmp.dircmp[str], prefix: str) -> None:
        changed.extend(f"{prefix}/{name}" for name in (*compare.left_only, *compare.right_only, *compare.diff_files)
                       if name != "__pycache__")
        for name, sub in compare.subdirs.items():
            if name != "__pycache__":
                walk(sub, f"{prefix}/{name}")

    for name, folder in PACKAGES.items():
        walk(filecmp.dircmp(str(src / name), str(folder), ignore=["__pycache__"]), name)
    return sorted(changed)


def test_a_feature_is_one_folder_per_package_and_works_end_to_end(short_tmp: Path) -> None:
    src = short_tmp / "src"
    _copy_with_toy(src)
    touched = _touched(src)
    for path in touched:  # each in its package's feature folder (its own modules, and the registry)
        package = path.split("/", 1)[0]
        assert package in FEATURE_FOLDERS and path.rpartition("/")[0].startswith(FEATURE_FOLDERS[package]), path
    assert {path.split("/", 1)[0] for path in touched} == set(FEATURE_FOLDERS)
    env = {"PYTHONPATH": str(src)}
    home = short_tmp / "home"
    # Run from the copy (``python -m`` puts the working directory first on the path).
    daemon = Daemon(home, prefix=["env", "-C", str(src), f"PYTHONPATH={src}"]).start()
    try:
        def ctl(*args: str) -> Any:
            result = run_ctl_process(home, *args, env=env, cwd=src)
            assert result.returncode == 0, result
            return result

        put = json.loads(ctl("toy", "put", "--box", "attic", "--toy", "bear", "--agent", "alice", "--json").stdout)
        assert put["event"]["type"] == "toy.put" and put["event"]["room"] == "attic"
        listed = json.loads(ctl("list", "--type", "toy.put", "--json").stdout)["events"]
        assert [(e["from_agent"], e["body"]) for e in listed] == [("alice", "bear")]
        # The toy's row of the authority table says its operation writes the type, not append.
        refused = run_ctl_process(home, "append", "--type", "toy.put", "--stream", "toys", "--room", "attic",
                                  "--from-agent", "alice", "--body", "doll", env=env, cwd=src)
        assert refused.returncode != 0 and "written by toy_put (palacectl toy put)" in refused.stderr, refused

        async def by_mcp() -> list[str]:
            params = StdioServerParameters(command=PYTHON, env=env, cwd=src, args=[
                "-m", "palacectl", "mcp", "--agent", "bob", "--home", str(home), "--tools", "toys"])
            async with Client(params) as client:
                listed_tools = [tool.name for tool in (await client.list_tools()).tools]
                with trio.fail_after(60):
                    result = await client.call_tool("mempalace_toy_put", {"box": "attic", "toy": "kite"})
                assert result.is_error is False, result
            return listed_tools

        assert "mempalace_toy_put" in trio.run(by_mcp)
        assert ctl("toy", "box", "--box", "attic").stdout.strip() == "2 toys in attic: bear, kite"

        dashboard = DashboardProcess(home, env=env, cwd=src)
        try:
            index = dashboard.get("/").text
            assert '<a href="#/toys" data-page="toys">Toys</a>' in index  # its nav entry
            assert '<script src="/static/toy.js" defer></script>' in index  # its page's script
            assert "page(\"toys\", pageToys)" in dashboard.get("/static/toy.js").text
            assert dashboard.get_json("/api/toys?box=attic") == {"box": "attic", "toys": ["bear", "kite"], "count": 2}
        finally:
            dashboard.stop()
    finally:
        assert daemon.stop() == 0, daemon.log()
    # palace itself knows no toy: the copy was the only place it was added
    assert run_ctl_process(home, "toy", "--help").returncode != 0
