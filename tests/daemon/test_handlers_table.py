"""The op table (palaced/handlers/__init__.py and palaced/feature.py): every operation of the
protocol answered exactly once — by the core or by one feature — bound to the daemon's one
context, plus what the API layer answers itself (hello) and how an unexpected exception becomes a
reply; and the core never imports a feature."""

from __future__ import annotations

import ast
import types
from pathlib import Path

import pytest

from palace_proto.errors import ApiError, NotFound, ValidationError
from palace_proto.features import OPS
from palace_proto.validation import Limits
from palaced import handlers
from palaced.feature import Feature, Features
from palaced.features import FEATURES, features
from palaced.handlers import API_LAYER_OPS, CORE_OPS, api_error_for, hello_result, merge_ops, op_table
from tests.daemon.handler_context import note, open_context


def test_every_protocol_operation_has_exactly_one_handler():
    assert API_LAYER_OPS == {"hello", "subscribe"}
    assert set(features().ops) == OPS - API_LAYER_OPS
    names = [name for module in handlers.MODULES for name in module.OPS]
    names += [name for feature in FEATURES for name in feature.ops]
    assert len(names) == len(set(names))


def _module(name: str, **ops: object) -> types.ModuleType:
    module = types.ModuleType(name)
    module.OPS = ops  # type: ignore[attr-defined]
    return module


def test_an_operation_defined_twice_is_refused():
    """Guards the explicit table: a second module claiming a name must not silently win."""
    first, second = _module("first", ping=object()), _module("second", ping=object())
    with pytest.raises(ValueError, match="'ping' is defined twice: in first and in second"):
        merge_ops([first, second])
    twice = Feature(name="twice", ops={"ping": object()})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="'ping' is answered twice: by the core and by feature twice"):
        Features([twice], CORE_OPS, OPS - API_LAYER_OPS)


def test_an_unanswered_or_unknown_operation_or_a_missing_feature_is_refused():
    """A feature declares everything it needs: its operations answer the protocol's, and the
    features it builds on are there."""
    with pytest.raises(ValueError, match=r"unanswered \['room_close', 'room_list', 'room_open'"):
        Features([f for f in FEATURES if f.name != "rooms"], CORE_OPS, OPS - API_LAYER_OPS)
    extra = Feature(name="extra", ops={"pong": object()})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match=r"not in the protocol \['pong'\]"):
        Features([*FEATURES, extra], CORE_OPS, OPS - API_LAYER_OPS)
    with pytest.raises(ValueError, match=r"feature tasks builds on \['questions'\]"):
        Features([f for f in FEATURES if f.name != "questions"], CORE_OPS, OPS - API_LAYER_OPS)


async def test_the_table_is_bound_to_one_context(tmp_path):
    async with open_context(tmp_path) as ctx:
        ops = op_table(ctx)
        assert set(ops) == OPS - API_LAYER_OPS
        assert await ops["ping"]({}) == {"pong": True}
        event = await ops["append"](note())
        assert (await ops["get_event"]({"event_id": event["id"]}))["id"] == event["id"]
        assert (await ops["status"]({}))["events"] == 1


async def test_hello_reports_the_versions_origin_and_this_daemons_limits(tmp_path):
    limits = Limits(max_body_bytes=1000, max_metadata_bytes=2000, max_artifact_bytes=3000)
    async with open_context(tmp_path, limits=limits) as ctx:
        hello = hello_result(ctx)
        assert hello["version"] == 1 and hello["origin"] == ctx.store.origin_id
        assert hello["limits"] == {"max_body_bytes": 1000, "max_metadata_bytes": 2000, "max_artifact_bytes": 3000,
                                   "max_frame_bytes": ctx.config.max_frame_bytes}


def test_an_unexpected_exception_becomes_an_internal_error_and_an_api_error_stays():
    error = api_error_for(RuntimeError("boom"))
    assert (error.code, error.message) == ("internal", "internal error: RuntimeError: boom")
    not_found = NotFound("event 'x' not found")
    assert api_error_for(not_found) is not_found
    assert isinstance(error, ApiError)


def test_the_core_never_imports_a_feature():
    """Issue 44: the core asks ``ctx.features``; it never imports palaced/features (which imports it)."""
    for path in Path(handlers.__file__).parent.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                module = node.module or ""
                assert not (node.level == 2 and module.startswith("features")), f"{path.name}: {module}"
                assert not module.startswith("palaced.features"), f"{path.name}: {module}"


def test_the_handlers_never_import_the_api_or_the_app():
    """Guards the one-way layering (palaced/__init__.py): api.py and app.py import the handlers."""
    for path in Path(handlers.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                package = ["palaced", "handlers"][: 2 - node.level + 1] if node.level else []
                base = ".".join([*package, *([node.module] if node.module else [])])
                imported = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            else:
                continue
            for name in imported:
                assert name.split(".")[:2] not in (["palaced", "api"], ["palaced", "app"]), f"{path.name}: {name}"


def test_a_features_config_section_and_notification_kinds_are_read_from_its_declaration(tmp_path):
    """config.toml's feature sections and a person's kinds of notification are the features' own:
    a toy feature's section is read by its ``read`` (and its bad value refused in one line naming the
    key), its trigger's kind is one a person may ask for; two features declaring one section are
    refused."""
    from palaced.config import ConfigError, Section, load_config
    from palaced.notify.triggers import Trigger

    def read(values):
        if values.get("colour", "red") not in ("red", "blue"):
            raise ValidationError("toy.colour must be red or blue", field="toy.colour")
        return values.get("colour", "red")

    toy = Feature(name="toy", section=Section("toy", {"colour": str}, read),
                  triggers=(Trigger("toy_thing", lambda e: e.get("type") == "toy.thing", lambda e: "A toy thing"),))
    daemon = features((toy,))
    assert "toy_thing" in daemon.notify_kinds and daemon.triggers[-1].kind == "message"  # the core's row last
    (tmp_path / "config.toml").write_text('[toy]\ncolour = "blue"\n[tasks]\nstall_after = "2h"\n'
                                          '[notify.people.ana]\nchannels = ["d"]\non = ["toy_thing"]\n'
                                          '[notify.channels.d]\nkind = "desktop"\n')
    config = load_config(tmp_path, daemon.config_extensions)
    assert config.section("toy", None) == "blue" and config.section("tasks", None).stall_after_s == 7200
    assert config.notify.people["human:ana"].on == frozenset({"toy_thing"})
    with pytest.raises(ConfigError, match=r"unknown section \[toy\]"):
        load_config(tmp_path, features().config_extensions)  # a daemon without the feature knows no [toy]
    (tmp_path / "config.toml").write_text('[toy]\ncolour = "green"\n')
    with pytest.raises(ConfigError, match=r"config.toml: toy.colour must be red or blue$"):
        load_config(tmp_path, daemon.config_extensions)
    with pytest.raises(ValueError, match="config sections declared twice"):
        features((toy, Feature(name="toy2", section=toy.section)))
