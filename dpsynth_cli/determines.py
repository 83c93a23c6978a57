"""Declared dependencies between level columns: the schema's "determines" (issue 36).

    "determines": ["area -> district", {"zone -> region": {"Z1": "North", "Z2": "South"}}]

"a -> b" says each level of category (or boolean) column a goes with one level of b. With the
map given (an object from every declared level of a to a level of b: public data), the output
obeys it exactly by post-processing (`LevelMaps`: b is set from a), whatever the mechanism.
Without it, `--mechanism marginals` measures the pair at full resolution as a tree edge (no
selection round: the declaration is public) and learns the map as the largest cell of each row
of that noisy table (post-processing of a ledgered release, `mechanisms.pairs.learned_maps`),
then sets b from a the same way; other mechanisms cannot learn it (a notice says it was left
out). A row whose a is missing (a nullable column) keeps its b.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from dpsynth_cli.columns import ColumnSpec
from dpsynth_cli.errors import UsageError

LEVEL_KINDS = ("category", "boolean")


@dataclass(frozen=True)
class Dependency:
    """`source -> target`, with the public map (source level -> target level) if declared."""

    source: str
    target: str
    mapping: tuple[tuple[str, str], ...] | None = None

    def __str__(self) -> str:
        return f"{self.source} -> {self.target}"


def parse_determines(
    raw: object, columns: dict[str, ColumnSpec], where: str
) -> tuple[Dependency, ...]:
    """The schema's "determines" list checked against its columns (usage errors name the key)."""
    if raw is None:
        return ()
    key = f"{where}: 'determines'"
    if not isinstance(raw, list):
        raise UsageError(f'{key} must be a list such as ["area -> district"]')
    out: list[Dependency] = []
    for item in raw:
        mapping = None
        if isinstance(item, dict) and len(item) == 1:
            ((item, mapping),) = item.items()
        if not isinstance(item, str) or item.count("->") != 1:
            raise UsageError(
                f'{key}: each entry is "a -> b" or {{"a -> b": {{level of a: level of b}}}}'
            )
        source, target = (part.strip() for part in item.split("->"))
        for name in (source, target):
            if name not in columns:
                raise UsageError(f"{key}: '{item}' names '{name}', not a column of the schema")
            if columns[name].kind not in LEVEL_KINDS:
                raise UsageError(
                    f"{key}: '{item}': '{name}' is {columns[name].kind or 'float'}, not a "
                    "category or boolean column"
                )
        if source == target:
            raise UsageError(f"{key}: '{item}' names one column twice")
        if any(d.target == target for d in out):
            raise UsageError(f"{key}: '{target}' is determined twice")
        out.append(Dependency(source, target, _mapping(mapping, columns, source, target, key)))
    _check_acyclic(out, key)
    return tuple(out)


def _mapping(
    raw: object, columns: dict[str, ColumnSpec], source: str, target: str, key: str
) -> tuple[tuple[str, str], ...] | None:
    if raw is None:
        return None
    levels, to = columns[source].levels or (), set(columns[target].levels or ())
    if not isinstance(raw, dict) or set(raw) != set(levels):
        raise UsageError(
            f"{key}: the map of '{source} -> {target}' must give every level of '{source}'"
        )
    bad = [v for v in raw.values() if v not in to]
    if bad:
        raise UsageError(
            f"{key}: '{bad[0]}' in the map of '{source} -> {target}' is not a level of '{target}'"
        )
    return tuple((level, raw[level]) for level in levels)


def _check_acyclic(deps: list[Dependency], key: str) -> None:
    component: dict[str, str] = {}

    def root(name: str) -> str:
        while component.get(name, name) != name:
            name = component[name]
        return name

    for d in deps:
        a, b = root(d.source), root(d.target)
        if a == b:
            raise UsageError(f"{key}: '{d}' closes a cycle of declarations")
        component[b] = a


@dataclass(frozen=True)
class LevelMaps:
    """Post-processing on the unit cube: for each (source column, target column, map), the
    target's level set from the source's (map value -1: unchanged). A level column's unit
    value lies in its level's first slot (`Domain.to_unit`)."""

    maps: tuple[tuple[int, int, int, int, int, int, np.ndarray], ...]  # j, L, P, k, L', P', map

    def __call__(self, unit: np.ndarray) -> np.ndarray:
        unit = unit.copy()
        for j, size, slots, k, tsize, tslots, law in self.maps:
            slot = np.clip(np.floor(unit[:, j] * slots).astype(np.int64), 0, slots - 1)
            to = law[slot * size // slots]
            at = to >= 0
            unit[at, k] = (-(-to[at] * tslots // tsize) + 0.5) / tslots
        return unit


def level_maps(deps: tuple[Dependency, ...], domain) -> LevelMaps:
    """The declared public maps of these dependencies on the domain's unit cube."""
    names = [c.name for c in domain.columns]
    out = []
    for d in deps:
        if d.mapping is None:
            continue
        j, k = names.index(d.source), names.index(d.target)
        target = list(domain.columns[k].levels)
        law = np.full(domain.levels(j), -1, dtype=np.int64)
        for i, (_level, to) in enumerate(d.mapping):
            law[i] = target.index(to)
        out.append(
            (j, domain.levels(j), domain.slots(j), k, domain.levels(k), domain.slots(k), law)
        )
    return LevelMaps(tuple(out))
