"""palace's features as the protocol core declares them, put together in one place.

Owns: ``FEATURES`` — each feature's module, in the order the protocol shows them — and what they
declare assembled and checked once, at import: ``RULES`` (the authority table: the core's rows —
the log's and the identity's registry — then each feature's, the agents' own words last), ``NAMESPACES`` (the type prefixes palace owns:
a type in one must be named by a row before anything writes it) and ``OPS`` (every operation of
the local API: the core's, then each feature's). A feature module declares its own ``OPS``,
``NAMESPACE`` and ``RULES`` beside its event types and derivations; adding a feature is adding
its module and naming it here. Pure.
"""

from __future__ import annotations

from types import ModuleType
from typing import Final

from . import agents, artifacts, fleet, identity, leases, memory, questions, rooms, tasks, usage
from .authority import CORE_NAMESPACES, CORE_RULES, Rule
from .control import CORE_OPS

__all__ = ["FEATURES", "NAMESPACES", "OPS", "RULES", "assemble"]

#: every feature's module, in the order the protocol (and the authority table) shows them
FEATURES: Final[tuple[ModuleType, ...]] = (tasks, usage, questions, rooms, leases, agents, fleet, memory, artifacts)


def assemble(features: tuple[ModuleType, ...]) -> tuple[tuple[Rule, ...], tuple[str, ...], frozenset[str]]:
    """The table's rows, the namespaces and the operations of the core and ``features``.

    Raises:
        ValueError: a feature declares no ``OPS``, ``NAMESPACE`` or ``RULES``, a rule, an operation or
            a namespace is declared twice, or a rule names a type outside every namespace but words.
    """
    # The core's rows first — authority's own and the identity's (the registry: every event is
    # judged by who holds its writer's id) — but the core's last row (words) comes last of all.
    rules: list[Rule] = [*CORE_RULES[:-1], *identity.RULES]
    namespaces: list[str] = [*CORE_NAMESPACES, identity.NAMESPACE]
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
    return tuple(rules), tuple(namespaces), frozenset(ops)


RULES, NAMESPACES, OPS = assemble(FEATURES)
