"""palacectl's features (palacectl/feature.py, palacectl/features/): each declared once, in its own
package, and the core — the command line's root, the MCP server, tool_sets, light, the loop, the
dashboard — putting together whatever the features declare (issue 44 §1).

The toy feature (tests/ctl/toy_feature/) is a test's: a command group, an MCP tool, a light verb,
a quick command and a dashboard page, all in its own package, served by palacectl with nothing
else changed."""

from __future__ import annotations

import ast
import json
from pathlib import Path
from typing import Any

import pytest

from palace_proto.features import FEATURES as PROTOCOL_FEATURES
from palacectl.aclient import AsyncDaemon
from palacectl.cli.root import build_app
from palacectl.feature import Feature, Features, Page, Quick
from palacectl.features import FEATURES, features
from palacectl.light import read_light_call, tables
from palacectl.loop import run_quick
from palacectl.mcp_adapter import PalaceMCP
from palacectl.mcp_tools import build_registry
from palacectl.tool_sets import tool_sets
from palacectl.ui.app import Dashboard
from palacectl.ui.security import Gate
from tests.ctl.fake_client import FakeClient, invoke
from tests.ctl.toy_feature import FEATURE as TOY

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "palacectl"
SECRET = "0123456789abcdef0123456789abcdef"
PORT = 4000


def test_the_daemons_features_keep_the_protocols_names_and_palacectls_own_take_none_of_them():
    """Guards the one vocabulary of features (issue 44 §1): palacectl's declarations of the
    protocol's features carry its names, and a feature of palacectl's own never takes one."""
    protocol = {module.__name__.rpartition(".")[2] for module in PROTOCOL_FEATURES}
    names = [feature.name for feature in FEATURES]
    assert protocol <= set(names), sorted(protocol - set(names))
    assert len(names) == len(set(names))
    for feature in FEATURES:
        assert set(feature.builds_on) <= set(names), feature


def _imports(path: Path) -> set[str]:
    """Every palacectl module ``path`` imports (relative imports resolved), at any depth."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join([*parts[: len(parts) - node.level + 1], *([node.module] if node.module else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name.startswith("palacectl.")}


def test_the_core_imports_no_feature_only_the_registry():
    """Guards the core's side of issue 44 §1: no module outside a feature's package imports one
    (only the registry, ``palacectl.features``, names them); a feature imports only the ones it
    builds on."""
    folders = {f.name: PACKAGE / "service" if f.name == "service" else PACKAGE / "features" / f.name for f in FEATURES}
    modules = {name: "palacectl." + ".".join(folder.relative_to(PACKAGE).parts) for name, folder in folders.items()}
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == PACKAGE / "features" / "__init__.py":
            continue
        owner = next((name for name, folder in folders.items() if folder in path.parents), None)
        allowed = {owner, *FEATURES[[f.name for f in FEATURES].index(owner)].builds_on} if owner else set()
        for name in _imports(path):
            named = {feature for feature, module in modules.items() if name == module or name.startswith(module + ".")}
            assert named <= allowed, f"{path.relative_to(ROOT)} imports {name} ({sorted(named - allowed)})"


def test_two_features_claiming_one_thing_fail_where_it_is_put_together():
    """Guards the import-time cross-checks: a name, a command, a tool, a light verb or a page
    claimed twice is refused (at import for palacectl's own: each is put together then)."""
    with pytest.raises(ValueError, match="two features are named 'toy'"):
        Features([TOY, TOY])
    with pytest.raises(ValueError, match="builds on nowhere: not a feature here"):
        Features([TOY._replace(builds_on=("nowhere",))])
    with pytest.raises(ValueError, match="both declare the page 'toys'"):
        Features([TOY, TOY._replace(name="toy2", quick={})])
    twice = Feature(name="toy2", quick={("toy", "count"): TOY.quick[("toy", "count")]})
    with pytest.raises(ValueError, match="both declare the quick command 'toy count'"):
        Features([TOY, twice])
    with pytest.raises(ValueError, match="the core and feature toy2 both declare the command 'status'"):
        build_app(Features([Feature(name="toy2", cli="tests.ctl.toy_feature.twice")]))
    with pytest.raises(ValueError, match="the core and feature toy2 both declare the tool mempalace_inbox"):
        tool_sets(Features([Feature(name="toy2", tools={"toys": ("mempalace_inbox",)})]))
    with pytest.raises(ValueError, match="the core and feature toy2 both declare the light word EVENT"):
        tables(Features([Feature(name="toy2", light="tests.ctl.toy_feature.twice")]))
    misfiled = TOY._replace(tools={"other": ("mempalace_toy_count",)})
    with pytest.raises(TypeError, match=r"mempalace_toy_count \(tests.ctl.toy_feature.tools\) is not in feature "
                                        r"toy's tools\['toys'\]"):
        build_registry(Features([misfiled]))
    with pytest.raises(TypeError, match=r"its declared tools and tests.ctl.toy_feature.tools's differ"):
        build_registry(Features([TOY._replace(tools={"toys": ("mempalace_toy_count", "mempalace_toy_lost")})]))


class ToyDaemon:
    """The daemon's answer to the toy's operation (and to ``status``, for the MCP server)."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, dict[str, Any]]] = []

    async def call(self, op: str, **args: Any) -> Any:
        self.asked.append((op, args))
        if op == "status":
            return {"palace": {"role": "member"}}
        assert op == "toy_count"
        return {"box": args["box"], "count": 3}


async def test_a_feature_is_its_package_alone(fake: FakeClient, tmp_path: Path, capsys):
    """Guards issue 44 §1's done-when for palacectl: the toy feature's package is all it takes —
    ``features(extra=…)`` — for a command, a quick command, an MCP tool (and its light verb) and a
    dashboard page (its route, its nav entry, its script); palacectl's own features know none of it."""
    with_toy = features(extra=(TOY,))
    assert features() is features() and TOY.name not in features()

    # The command line: its group, listed after palacectl's, run through the same main().
    fake.answers["toy_count"] = lambda args: {"box": args["box"], "count": 3}
    app = build_app(with_toy)
    result = invoke("toy", "count", "--box", "attic", "--json", app=app)
    assert result.returncode == 0, result
    assert result.json() == {"box": "attic", "count": 3}
    assert invoke("toy", "count", "--box", "attic", app=app).stdout == "3 toys in attic\n"
    assert invoke("--help", app=app).stdout.rstrip().splitlines()[-1].split()[0] == "toy"
    assert invoke("toy", "count", "--box", "attic").returncode == 64  # palacectl's own: no such command

    # The loop's quick path: the same body, without typer; unknown to palacectl's own.
    assert run_quick(["toy", "count", "--box", "cellar", "--json"], with_toy) == 0
    assert json.loads(capsys.readouterr().out) == {"box": "cellar", "count": 3}
    assert run_quick(["toy", "count", "--box", "cellar"]) is None
    assert [op for op, _ in fake.requests] == ["toy_count"] * 3

    # MCP: its group, its tool listed and called, and its light verb routed to it.
    server = PalaceMCP(tmp_path, "agent-x", tools="toys,palace_coordinate", features=with_toy)
    server.daemon = ToyDaemon()
    # (A group the registry's order does not name is listed after those it names.)
    assert [t["name"] for t in server.answer_static("tools/list", {})["tools"]] == ["palace_coordinate",
                                                                                    "mempalace_toy_count"]
    called = await server.answer("tools/call", {"name": "mempalace_toy_count", "arguments": {"box": "attic"}})
    assert called["structuredContent"] == {"box": "attic", "count": 3}
    routed = await server.answer("tools/call", {"name": "palace_coordinate",
                                                "arguments": {"command": "TOY COUNT box: shed"}})
    assert routed["structuredContent"] == {"box": "shed", "count": 3}  # a read's shape: the routed tool's
    assert read_light_call("palace_coordinate", {"box": "shed"}, with_toy).tool == "mempalace_toy_count"
    assert "'TOY COUNT box:'" in server.tools["palace_coordinate"].description
    assert "mempalace_toy_count" not in PalaceMCP(tmp_path, "agent-x", tools="all").tools

    # The dashboard: its nav entry and script written into the page, its script and its route served.
    dashboard = Dashboard(AsyncDaemon(tmp_path / "no-daemon"), Gate(SECRET, PORT), human="human:ana",
                          features=with_toy)
    dashboard.views.daemon = ToyDaemon()  # type: ignore[assignment]
    page = dashboard.page.decode()
    assert '<a href="#/toys" data-page="toys">Toys</a>' in page
    assert page.index('data-page="memory"') < page.index("#/toys")  # after the pages the nav's order names
    assert '<script src="/static/toy.js" defer></script>' in page
    status, _, body = await get(dashboard, "/static/toy.js")
    assert status == 200 and b'page("toys", pageToys);' in body
    status, _, body = await get(dashboard, "/api/toys", query=b"box=attic")
    assert (status, json.loads(body)) == (200, {"box": "attic", "count": 3})
    plain = Dashboard(AsyncDaemon(tmp_path / "no-daemon"), Gate(SECRET, PORT), human="human:ana")
    assert b"#/toys" not in plain.page and (await get(plain, "/api/toys"))[0] == 404


async def get(app: Dashboard, path: str, *, query: bytes = b"") -> tuple[int, dict[bytes, bytes], bytes]:
    sent: list[dict[str, Any]] = []
    scope = {"type": "http", "method": "GET", "path": path, "query_string": query,
             "headers": [(b"host", f"127.0.0.1:{PORT}".encode()), (b"authorization", f"Bearer {SECRET}".encode())]}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent[0]["status"], dict(sent[0]["headers"]), b"".join(m.get("body", b"") for m in sent[1:])


def test_the_orders_people_and_models_see_are_the_registrys():
    """Guards what the move kept: ``--help``'s order (the registry's ``HELP_ORDER``), the nav's
    (``NAV_ORDER``), and the MCP groups' (``TOOL_GROUPS``), with the default set first."""
    registry = features()
    assert [page.name for _, page in registry.pages()] == ["now", "timeline", "tasks", "merge", "fleet", "leases",
                                                            "usage", "rooms", "memory"]
    assert list(tool_sets().groups) == ["core", "log", "memory", "leases", "people", "rooms", "light", "approvals"]
    assert Features.ordered(["b", "x", "a"], ("a", "b")) == ["a", "b", "x"]
    assert Page("toys", "Toys") in TOY.pages and isinstance(TOY.quick[("toy", "count")], Quick)
