"""Import layering (STYLE §2-3): palacectl never imports palaced, palace_proto stays pure, the
benchmarks (palace_bench) drive daemons as a client and are loaded only by ``palacectl bench``, and
a simple palacectl command does not pay for trio, apsw or heavy optional packages."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _imports(folder: str) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in (ROOT / folder).rglob("*.py"):
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = names
    return found


#: the store's trio adapter: AsyncStore, and the group-commit writer and WAL keeper it runs
TRIO_ADAPTER = frozenset({"aio.py", "writer.py", "wal_keeper.py"})


@pytest.mark.parametrize(("folder", "forbidden"), [
    ("palacectl", {"palaced"}),
    ("proto", {"trio", "apsw", "palaced", "palacectl", "typer", "logging", "time"}),
    ("palaced/store", {"trio"} ),
    ("benchmarks/palace_bench", {"palaced"}),
])
def test_forbidden_imports(folder, forbidden):
    for path, names in _imports(folder).items():
        if folder == "palaced/store" and path.rsplit("/", 1)[-1] in TRIO_ADAPTER:
            continue  # the store's trio adapter
        assert not (names & forbidden), f"{path} imports {sorted(names & forbidden)}"


def test_palacectl_simple_command_imports_no_trio_or_apsw():
    """Guards palacectl's start-up time: agents call it in their loops. The whole command line is
    built (every feature's command module imported), as any command but the quick path builds it."""
    code = ("import sys, palacectl.cli, palacectl.client, palacectl.watch; palacectl.cli.app; "
            "bad = [m for m in ('trio', 'apsw', 'palaced', 'cryptography', 'fastembed', 'mcp', 'palace_bench') "
            "if m in sys.modules]; "
            "print(','.join(bad))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_benchmarks_use_palacectl_as_a_client_only():
    """Guards the bench package's place below palacectl's commands: it drives its daemons through
    ``palacectl.client`` (and finds the console script with ``palacectl.service.host``), as any
    client would, and never imports a command, the MCP server or the dashboard."""
    allowed = {"palacectl.client", "palacectl.service.host"}
    for path in sorted((ROOT / "benchmarks" / "palace_bench").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
                     else [])
            for name in names:
                if name.split(".")[0] == "palacectl":
                    assert name in allowed, f"benchmarks/palace_bench/{path.name}:{node.lineno} imports {name}"


def test_palacectl_loads_the_benchmarks_only_when_a_bench_command_runs():
    """Guards palacectl's start-up (issue 44 §4): the benchmarks are a package of their own, and
    only the ``bench`` commands import it, inside the function that runs one."""
    for path in sorted((ROOT / "palacectl").rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        in_functions = {id(node) for fn in ast.walk(tree) if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef))
                        for node in ast.walk(fn)}
        for node in ast.walk(tree):
            names = ([alias.name for alias in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(name.split(".")[0] == "palace_bench" for name in names):
                where = f"{path.relative_to(ROOT)}:{node.lineno}"
                assert path == ROOT / "palacectl" / "cli" / "bench.py", f"{where} imports palace_bench"
                assert id(node) in in_functions, f"{where} imports palace_bench at module level"


def test_proto_never_reads_the_clock():
    """palace_proto takes time as an argument (``now``); datetime is allowed only for its types."""
    for path in (ROOT / "proto").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Attribute) and node.attr in {"now", "utcnow", "today", "monotonic", "time"}
                    and isinstance(node.value, (ast.Name, ast.Attribute))):
                owner = node.value.id if isinstance(node.value, ast.Name) else node.value.attr
                assert owner not in {"datetime", "date", "time"}, f"{path.name}:{node.lineno} reads the clock"


def test_every_package_is_in_the_distribution():
    """Guards the wheel: setuptools packages only what pyproject.toml lists, so a new sub-package
    (palacectl/cli, palacectl/service, palaced/handlers, ...) left out of the list works in an
    editable checkout and is missing from every real install."""
    import tomllib

    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["setuptools"]
    folders = {name: Path(folder) for name, folder in setuptools.get("package-dir", {}).items()}
    listed = set(setuptools["packages"])
    tops = {name.split(".")[0] for name in listed}
    for top in sorted(tops):
        base = ROOT / folders.get(top, Path(top))
        for init in sorted(base.rglob("__init__.py")):
            package = ".".join((top, *init.parent.relative_to(base).parts))
            assert package in listed, (f"{init.parent.relative_to(ROOT)} is not in [tool.setuptools] packages of "
                                       f"pyproject.toml: add {package!r}")


def test_palacectl_command_modules_import_no_other_command_module():
    """Guards the CLI's shape (issue 13): each command module imports ``cli.common``, never
    ``cli.root`` (the assembler, which imports them all: a cycle) nor another command module."""
    shared = {"common"}
    for path in sorted((ROOT / "palacectl" / "cli").glob("*.py")):
        if path.stem in {"__init__", "root"}:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                names = {node.module} if node.module else {alias.name for alias in node.names}
                assert names <= shared, f"palacectl/cli/{path.name}:{node.lineno} imports {sorted(names - shared)}"
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                assert not node.module.startswith("palacectl.cli"), f"palacectl/cli/{path.name}:{node.lineno}"


def test_peers_package_imports_run_one_way():
    """Guards the peer network's shape (issue 27 §3): its modules import each other without a
    cycle, and the link registry imports none of them but ``clock`` and ``link`` (the links it keeps,
    which import nothing of the package) — the parts hear of links through its change hook, so it
    never calls (or imports) them."""
    folder = ROOT / "palaced" / "peers"
    graph: dict[str, set[str]] = {}
    for path in sorted(folder.glob("*.py")):
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level == 1:
                deps |= {node.module.split(".")[0]} if node.module else {alias.name for alias in node.names}
        graph[path.stem] = deps
    assert graph["registry"] <= {"clock", "link"}, f"palaced/peers/registry.py imports {sorted(graph['registry'])}"
    assert not graph["link"], f"palaced/peers/link.py imports {sorted(graph['link'])}"
    done: set[str] = set()

    def visit(module: str, path: tuple[str, ...]) -> None:
        assert module not in path, f"import cycle in palaced/peers: {' -> '.join((*path, module))}"
        if module in done:
            return
        for dep in graph.get(module, ()):
            visit(dep, (*path, module))
        done.add(module)

    for module in sorted(graph):
        visit(module, ())


#: the daemon's layers, lowest first: a module imports (type-only imports included) from its own
#: layer or a lower one, never a higher one. The longest prefix places a module.
DAEMON_LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("the ground: files, keys, TLS, limits", ("palaced", "palaced.files", "palaced.limits", "palaced.recent_errors",
                                               "palaced.interfaces", "palaced.identity", "palaced.membership",
                                               "palaced.tls_stream", "palaced.tls", "palaced.models")),
    ("settings", ("palaced.config", "palaced.notify.settings", "palaced.notify.triggers")),
    ("the store", ("palaced.store",)),
    ("the bus and the member directory", ("palaced.bus", "palaced.members")),
    ("the network", ("palaced.discovery", "palaced.enrolment", "palaced.peers")),
    ("the core's handlers and what a feature is", ("palaced.handlers", "palaced.feature")),
    ("the features and the notifier", ("palaced.features", "palaced.notify")),
    ("the local API", ("palaced.api",)),
    ("the wiring", ("palaced.app", "palaced.__main__")),
)


def _layer_of(module: str) -> int | None:
    placed = [(len(prefix), index) for index, (_, prefixes) in enumerate(DAEMON_LAYERS) for prefix in prefixes
              if module == prefix or module.startswith(prefix + ".")]
    return max(placed)[1] if placed else None


def test_the_daemon_imports_only_downwards():
    """Guards the daemon's layer order (STYLE §2): store → bus → network → handlers → features →
    api → app, with the ground and the settings below them all — checked for every module and every
    import, type-only ones too (a type-only import upwards is a cycle waiting for its first call)."""
    from tests.test_structure import _imported, _module_name

    modules = {_module_name(path): path for path in sorted((ROOT / "palaced").rglob("*.py"))
               if "__pycache__" not in path.parts}
    upwards, unplaced = [], []
    for module, path in modules.items():
        own = _layer_of(module)
        if own is None:
            unplaced.append(module)
            continue
        for imported in _imported(path, ast.parse(path.read_text(encoding="utf-8"))):
            target = imported
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if not target.startswith("palaced"):
                continue
            layer = _layer_of(target)
            if layer is not None and layer > own:
                upwards.append(f"{module} ({DAEMON_LAYERS[own][0]}) imports {target} ({DAEMON_LAYERS[layer][0]})")
    assert not unplaced, f"modules in no layer of DAEMON_LAYERS: {unplaced}"
    assert not upwards, upwards


def test_the_daemon_reads_the_time_of_day_in_one_place():
    """Guards issue 44 §4: four clock helpers and seven inline readings of the wall clock are
    ``palaced/clock.py`` now; intervals (``time.monotonic``, trio's clock) are not the time of day."""
    readings = {("time", "time"), ("time", "time_ns"), ("datetime", "now"), ("datetime", "utcnow"),
                ("date", "today"), ("datetime", "today")}
    found = []
    for path in sorted((ROOT / "palaced").rglob("*.py")):
        if path == ROOT / "palaced" / "clock.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and isinstance(node.value, (ast.Name, ast.Attribute)):
                owner = node.value.id if isinstance(node.value, ast.Name) else node.value.attr
                if (owner, node.attr) in readings:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    assert not found, f"read the clock through palaced.clock: {found}"


def test_the_store_state_is_its_bottom():
    """Guards issue 44 §4: 14 modules of the store imported ``WriteContext`` from batch.py (type-only)
    while batch.py imported them to forward to them: one circle. The state objects are state.py
    now, which imports no module of the store at run time; the only cycle left is type-only,
    state.py naming the registry's and the parts' classes as its attributes' types."""
    from tests.test_structure import _imported, _module_name

    modules = {_module_name(path): path for path in sorted((ROOT / "palaced" / "store").glob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        deps = set()
        for imported in _imported(path, ast.parse(path.read_text(encoding="utf-8"))):
            while imported and imported not in modules:
                imported = imported.rpartition(".")[0]
            if imported and imported not in (module, "palaced.store"):
                deps.add(imported)
        graph[module] = deps
    state_source = ast.parse(modules["palaced.store.state"].read_text(encoding="utf-8"))
    runtime = [node for node in state_source.body if isinstance(node, ast.ImportFrom) and node.level]
    assert not runtime, "state.py imports a module of the store at run time"

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(dep == goal or (dep not in seen and not seen.add(dep) and reaches(dep, goal, seen))
                   for dep in graph[start])

    cyclic = {module for module in graph if reaches(module, module, set())}
    assert cyclic <= {"palaced.store.state", "palaced.store.identity", "palaced.store.parts"}, sorted(cyclic)
