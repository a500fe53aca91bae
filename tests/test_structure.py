"""The shape of the code, counted with ``ast`` so that it stays as a restructuring left it."""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: the sans-IO planners a link is made of: the link machine composes them, the shell holds only it
LINK_PARTS = frozenset({"PeerSession", "ServePlan", "PullPlan", "LinkOutbox", "LinkMachine"})


def _class(path: Path, name: str) -> ast.ClassDef:
    (node,) = [n for n in ast.parse(path.read_text(encoding="utf-8")).body if isinstance(n, ast.ClassDef)
               and n.name == name]
    return node


def test_the_peer_link_is_a_thin_shell_over_one_protocol_machine():
    """Guards issue 44 §2: ``PeerLink`` had grown to 719 lines and 58 methods, held the session and
    three planners and decided which to ask and when. It lives in ``palaced/peers/``, holds one
    ``LinkMachine`` (palace_proto.link, where every rule of what to send next is tested without
    trio), and stays within 300 lines and 25 methods."""
    assert not (ROOT / "palaced" / "replication.py").exists()
    path = ROOT / "palaced" / "peers" / "link.py"
    link = _class(path, "PeerLink")
    lines = link.end_lineno - link.lineno + 1  # type: ignore[operator]
    methods = [n.name for n in link.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    assert lines <= 300, f"PeerLink is {lines} lines"
    assert len(methods) <= 25, f"PeerLink has {len(methods)} methods: {methods}"
    held = [(target.attr, node.value.func.id) for node in ast.walk(link) if isinstance(node, ast.Assign)
            and isinstance(node.value, ast.Call) and isinstance(node.value.func, ast.Name)
            and node.value.func.id in LINK_PARTS for target in node.targets if isinstance(target, ast.Attribute)]
    assert held == [("machine", "LinkMachine")], held
    imported = {alias.name for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
                if isinstance(node, ast.ImportFrom) for alias in node.names}
    assert imported & LINK_PARTS == {"LinkMachine"}, "the shell drives the machine, never a part of it"


# -- issue 44 §1: a feature in its own slice ----------------------------------------------------

#: the packages a feature has a part in, by folder, and the name each is imported as
PACKAGES = {"proto": "palace_proto", "palaced": "palaced", "palacectl": "palacectl"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    parts[0] = PACKAGES[parts[0]]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _sources() -> dict[Path, ast.Module]:
    return {path: ast.parse(path.read_text(encoding="utf-8")) for folder in PACKAGES
            for path in sorted((ROOT / folder).rglob("*.py")) if "__pycache__" not in path.parts}


def _imported(path: Path, tree: ast.Module) -> set[str]:
    """Every module ``path`` imports (relative imports resolved), and each ``from m import n`` as ``m.n``."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, *([node.module] if node.module else [])])
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def _strings(tree: ast.Module) -> set[str]:
    return {node.value for node in ast.walk(tree) if isinstance(node, ast.Constant) and isinstance(node.value, str)}


def feature_of(path: Path, names: list[str]) -> str | None:
    """The feature whose slice ``path`` is in: a folder or a module named after it (``rooms/``,
    ``rooms.py``), or a module named for a part of it (``task_threads.py``, ``memory_views.py``)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    for name in names:
        single = name[:-1] if name.endswith("s") else name
        if name in parts[1:] or parts[-1].startswith((f"{name}_", f"{single}_")):
            return name
    return None


def feature_names(feature: Any) -> set[str]:
    """What names a feature where it is used: its event types (those in its namespace: a claim is
    the core's ``event.ack``), and its operations named by more than one word (``room_open``; a
    one-word operation, ``ask`` or ``search``, is a word other code uses for itself)."""
    types = {t for rule in feature.RULES for t in rule.types}
    return {t for t in types if feature.NAMESPACE and t.startswith(feature.NAMESPACE)} | {
        op for op in feature.OPS if "_" in op}


def _slices() -> tuple[list[str], dict[str, set[str]], dict[Path, ast.Module], dict[Path, str | None],
                      dict[str, set[str]]]:
    """The features' slices: (every feature's name, what each builds on, the sources, the feature
    whose slice each source is in, each feature's module names)."""
    from palace_proto.features import FEATURES
    from palacectl.features import FEATURES as CLIENT_FEATURES
    from palaced.features import features

    protocol = [module.__name__.rpartition(".")[2] for module in FEATURES]
    # palacectl's own features (the worker, approvals, the dashboard...) have slices too
    names = protocol + [f.name for f in CLIENT_FEATURES if f.name not in protocol]
    builds_on: dict[str, set[str]] = {}
    for feature in (*features(), *CLIENT_FEATURES):
        builds_on.setdefault(feature.name, set()).update(feature.builds_on)
    sources = _sources()
    slice_of = {path: feature_of(path, names) for path in sources}
    modules = {name: {_module_name(p) for p, f in slice_of.items() if f == name} for name in names}
    return names, builds_on, sources, slice_of, modules


def names_outside_slices() -> dict[str, list[str]]:
    """For each feature, the source files outside its slice, and outside the slices of the features
    that build on it, that import one of its modules or name one of its types or operations."""
    from palace_proto.features import FEATURES

    _names, builds_on, sources, slice_of, modules = _slices()
    found: dict[str, list[str]] = {}
    for module in FEATURES:
        name = module.__name__.rpartition(".")[2]
        words = feature_names(module)
        allowed = {name} | {other for other, bases in builds_on.items() if name in bases}
        found[name] = sorted(str(path.relative_to(ROOT)) for path, tree in sources.items()
                             if slice_of[path] not in allowed
                             and (_imported(path, tree) & modules[name] or _strings(tree) & words))
    return found


def test_the_handlers_hold_one_store_and_never_hand_it_a_function_to_read():
    """Guards issue 44 §1: handlers held both ``ctx.store`` and ``ctx.astore``, reads were written
    twice (in ``Reads`` and again as a forwarder) and 17 passed the store a bare function. The
    context holds one store, whose reads are declared once (``StoreRead``) and take data only."""
    import dataclasses
    import inspect

    from palaced.handlers.context import Context
    from palaced.store.aio import AsyncStore
    from palaced.store.reads import StoreRead

    stores = [f.name for f in dataclasses.fields(Context) if "Store" in str(f.type)]
    assert stores == ["store"], stores
    takes_a_function = []
    for name, member in inspect.getmembers(AsyncStore):
        if name.startswith("_") or isinstance(inspect.getattr_static(AsyncStore, name), StoreRead):
            continue
        if callable(member) and "Callable" in str(inspect.signature(member)):
            takes_a_function.append(name)
    # (``write``, the writer's, takes the job to do in the writing transaction: a write, not a read.)
    assert takes_a_function == [], takes_a_function
    for path, tree in _sources().items():
        if path.is_relative_to(ROOT / "palaced" / "store"):
            continue
        reads = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute)
                 and (node.attr == "memory_read" or (node.attr == "read" and "store" in ast.unparse(node.value)))]
        assert not reads, f"{path.relative_to(ROOT)}:{reads} hands the store a function to read"


#: the one registry of each package: the only files outside a feature's slice that may name it
REGISTRIES = frozenset({"proto/features.py", "palaced/features/__init__.py", "palacectl/features/__init__.py"})


def test_a_feature_is_named_only_in_its_slice_and_the_three_registries():
    """Guards issue 44 §1: adding rooms touched 21 source files, 5 of them its own (registration
    lists, and feature logic inside shared modules). A feature's names now appear, outside its
    slice and the slices of the features that build on it, only in each package's registry."""
    found = names_outside_slices()
    assert found, "no feature counted"
    for feature, files in found.items():
        assert len(files) <= 3 and set(files) <= REGISTRIES, f"{feature} is named in {files}"


def test_a_slice_that_uses_another_feature_says_it_builds_on_it():
    """What a feature uses of another is declared (``builds_on``, which the registries check is
    there), so the counting above never hides a dependency nobody wrote down."""
    names, builds_on, sources, slice_of, modules = _slices()
    undeclared = []
    for path, tree in sources.items():
        user = slice_of[path]
        if user is None:
            continue
        imported = _imported(path, tree)
        undeclared += [f"{path.relative_to(ROOT)}: {user} uses {used}" for used in names
                       if used != user and imported & modules[used] and used not in builds_on.get(user, set())]
    assert not undeclared, undeclared


def test_the_core_modules_the_issue_named_import_no_feature():
    """``handlers/log.py`` called the task rules on every append and built the rooms' wake rule,
    ``handlers/session.py`` and ``store/inbox.py`` knew about rooms, and ``app.py`` started each
    feature's service by name: each asks the features now (ctx.features, the store's parts)."""
    from palace_proto.features import FEATURES

    features = {module.__name__.rpartition(".")[2] for module in FEATURES}
    for relative in ("palaced/handlers/log.py", "palaced/handlers/session.py", "palaced/store/inbox.py",
                     "palaced/app.py", "palaced/api.py", "palaced/config.py", "palaced/handlers/context.py"):
        path = ROOT / relative
        imported = _imported(path, ast.parse(path.read_text(encoding="utf-8")))
        named = sorted(m for m in imported if feature_of(ROOT / (m.replace(".", "/") + ".py"), sorted(features))
                       or any(m.startswith(f"palaced.features.{f}") for f in features))
        assert not named, f"{relative} imports {named}"
