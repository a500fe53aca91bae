"""palace's features as the protocol core declares them, put together in one place.

Owns: ``FEATURES`` — each feature's module, in the order the protocol shows them — and what they
declare assembled and checked once, at import: ``RULES`` (the authority table: the core's rows —
the log's, the identity's registry and the membership's revocation — then each feature's, the agents' own
words last), ``NAMESPACES`` (the type prefixes palace owns:
a type in one must be named by a row before anything writes it) and ``OPS`` (every operation of
the local API: the core's, then each feature's). A feature module declares its own ``OPS``,
``NAMESPACE`` and ``RULES`` beside its event types and derivations; adding a feature is adding
its module and naming it here. Pure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType, ModuleType
from typing import Final

from . import agents, artifacts, fleet, identity, leases, memory, pki, questions, rooms, tasks, usage
from .authority import CORE_NAMESPACES, CORE_RULES, Rule
from .control import CORE_OPS

__all__ = ["APPEND_CHECKS", "FEATURES", "NAMESPACES", "OPS", "RULES", "STORED_CHECKS", "Check", "assemble", "checks"]

#: a check of one event's content, ``check(type, body, metadata_json)``: raises ``ValidationError``
#: naming the part that is wrong
Check = Callable[[str, "str | None", str], None]

#: every feature's module, in the order the protocol (and the authority table) shows them
FEATURES: Final[tuple[ModuleType, ...]] = (tasks, usage, questions, rooms, leases, agents, fleet, memory, artifacts)


def assemble(features: tuple[ModuleType, ...]) -> tuple[tuple[Rule, ...], tuple[str, ...], frozenset[str]]:
    """The table's rows, the namespaces and the operations of the core and ``features``.

    Raises:
        ValueError: a feature declares no ``OPS``, ``NAMESPACE`` or ``RULES``, a rule, an operation or
            a namespace is declared twice, a rule names a type outside every namespace but words, or
            a rule is written by an operation nobody declares.
    """
    # The core's rows first — authority's own and the identity's (the registry: every event is
    # judged by who holds its writer's id) — but the core's last row (words) comes last of all.
    rules: list[Rule] = [*CORE_RULES[:-1], *identity.RULES, *pki.RULES]
    namespaces: list[str] = [*CORE_NAMESPACES, identity.NAMESPACE, pki.NAMESPACE]
    ops: set[str] = set(CORE_OPS)
    for feature in features:
        name = feature.__name__.rsplit(".", 1)[-1]
        missing = [attr for attr in ("OPS", "NAMESPACE", "RULES") if not hasattr(feature, attr)]
        if missing:
            raise ValueError(f"feature {name} declares no {', '.join(missing)}")
        twice = ops & feature.OPS
        if twice:
            raise ValueError(f"feature {name} declares operations declared already: {sorted(twice)}")
        ops |= feature.OPS
        if feature.NAMESPACE is not None:
            if feature.NAMESPACE in namespaces:
                raise ValueError(f"feature {name} declares namespace {feature.NAMESPACE!r} declared already")
            namespaces.append(feature.NAMESPACE)
        rules.extend(feature.RULES)
    rules.append(CORE_RULES[-1])
    names = [rule.name for rule in rules]
    doubles = sorted({n for n in names if names.count(n) > 1})
    if doubles:
        raise ValueError(f"rules named twice: {doubles}")
    for rule in rules:
        outside = [t for t in rule.types if not t.startswith(tuple(namespaces))]
        if outside and rule.name != "words":
            raise ValueError(f"rule {rule.name} names types outside palace's namespaces: {outside}")
        writer = rule.written_by.split()[0]
        if writer not in ("append", "palaced") and writer not in ops:
            raise ValueError(f"rule {rule.name} is written by {writer!r}, an operation nobody declares")
    return tuple(rules), tuple(namespaces), frozenset(ops)


def checks(features: tuple[ModuleType, ...], name: str) -> Mapping[str, Check]:
    """Every feature's content checks called ``name`` (``APPEND_CHECKS``, ``STORED_CHECKS``: an
    optional mapping of its types to their check), by type.

    Raises:
        ValueError: two checks of one type.
    """
    found: dict[str, Check] = {}
    for feature in features:
        for kind, check in getattr(feature, name, {}).items():
            if kind in found:
                raise ValueError(f"{name}: type {kind!r} is checked twice")
            found[kind] = check
    return MappingProxyType(found)


RULES, NAMESPACES, OPS = assemble(FEATURES)
#: what a client's ``append`` of a type must hold besides the event's rules (a usage report's figures)
APPEND_CHECKS: Final = checks(FEATURES, "APPEND_CHECKS")
#: what an event of a type must hold to be stored at all, from a peer or a file (memory's shapes):
#: one that breaks it is refused where it arrives
STORED_CHECKS: Final = checks(FEATURES, "STORED_CHECKS")
