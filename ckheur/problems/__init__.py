"""Problems: problem types per operator family and named problem sets.

A problem set's sources each name an operator family (default grouped_conv), so one set
(smoke, holdout) can hold problems of several operators; loading keeps the requested family.
"""

from __future__ import annotations

import functools
from typing import Any, Mapping

from ckheur.families.grouped_conv.problems import CONV_FIELDS, DIRECTIONS, ConvProblem, ProblemError, from_driver_line, problem_from_dict
from ckheur.config import CONF_DIR, plain
from ckheur.families import Family
from ckheur.problems.sources import dedupe, load_source, shard

__all__ = [
    "CONV_FIELDS", "DIRECTIONS", "ConvProblem", "ProblemError", "problem_from_dict",
    "from_driver_line", "load_problem_set", "load_weighted_set", "layer_names", "load_named_set", "set_node", "shipped_sets", "random_problems",
]


def shipped_sets() -> list[str]:
    """Names of the problem sets shipped in conf/problems/."""
    return sorted(p.stem for p in (CONF_DIR / "problems").glob("*.yaml"))


def set_node(name: str) -> Any:
    """The validated config node of a shipped set (same schema as composition)."""
    from omegaconf import OmegaConf

    from ckheur.config import ProblemSetSchema, read_config

    path = CONF_DIR / "problems" / f"{name}.yaml"
    if not path.exists():
        raise ProblemError(f"problem set {name!r} not found; shipped sets: {', '.join(shipped_sets())}")
    raw = read_config(path)
    raw.pop("defaults", None)
    return OmegaConf.merge(OmegaConf.structured(ProblemSetSchema), raw)


def load_named_set(name: str, family: Family, _stack: tuple[str, ...] = (),
                   direction: str | None = None, dtype: str | None = None) -> list:
    """All problems of a family in a shipped set (no sharding)."""
    if name in _stack:
        raise ProblemError(f"problem set {name!r} includes itself via {' -> '.join(_stack)}")
    return _build(_plain_set_node(name), family, _stack + (name,), apply_shard=False, op=(direction, dtype))


def _plain_set_node(name: str) -> dict:
    """``plain(set_node(name))``, validated once per version of the set's file (a set excluding the
    training sets, holdout, reads seven of them each time it is loaded); each caller gets its own copy."""
    import copy

    path = CONF_DIR / "problems" / f"{name}.yaml"
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError):  # set_node says what is wrong
        return plain(set_node(name))
    return copy.deepcopy(_validated_set(name, text))


@functools.lru_cache(maxsize=64)
def _validated_set(name: str, text: str) -> dict:
    """The plain validated node of a shipped set, by name and file text: a changed file is validated anew."""
    return plain(set_node(name))


def _has_family(name: str, family: Family) -> bool:
    """Whether a shipped set has a source of ``family``'s problems: of its name, or of the op's family
    where it is a network's convolutions (onnx, miopen_log) and ``family``'s problems are convolutions."""
    import yaml

    from ckheur.problems.sources import NETWORK_KINDS

    try:
        sources = (yaml.safe_load((CONF_DIR / "problems" / f"{name}.yaml").read_text()) or {}).get("sources") or []
    except (OSError, yaml.YAMLError):
        return False
    convolutions = set(CONV_FIELDS) <= set(family.problems.FIELDS)
    return any(str(src.get("family", "grouped_conv")) == family.name
               or (str(src.get("kind")) in NETWORK_KINDS and convolutions) for src in sources if isinstance(src, dict))


def load_problem_set(node: Mapping[str, Any], family: Family, direction: str | None = None,
                     dtype: str | None = None) -> list:
    """Problems of a family in a composed ``problems`` node: sources, exclusions, dedupe, shard;
    ``direction`` and ``dtype`` (the op's) select what network sources (logs, models) give."""
    probs = _build(node, family, (str(node.get("name")),), apply_shard=True, op=(direction, dtype))
    if not probs and not any(str(s.get("family", "grouped_conv")) == family.name for s in node.get("sources") or []):
        families = sorted({str(s.get("family", "grouped_conv")) for s in node.get("sources") or []})
        having = [n for n in shipped_sets() if _has_family(n, family)]
        raise ProblemError(f"problem set {node.get('name')!r} has no {family.name} problems (it has: "
                           f"{', '.join(families)}); shipped sets with {family.name} problems: "
                           f"{', '.join(having) or 'none'}")
    return probs


def load_weighted_set(node: Mapping[str, Any], family: Family, direction: str | None = None,
                      dtype: str | None = None) -> list[tuple[Any, int]]:
    """The distinct problems of ``load_problem_set`` with their weights: how often each occurs in the
    sources before dedupe (a network's repeated layers, a log's repeated commands)."""
    from collections import Counter

    probs = load_problem_set(node, family, direction, dtype)
    counts = Counter(p.key() for p in _build(node, family, (str(node.get("name")),), apply_shard=False,
                                             op=(direction, dtype), keep_repeats=True))
    return [(p, counts[p.key()]) for p in dedupe(probs)]


def layer_names(node: Mapping[str, Any], family: Family, direction: str | None = None,
                dtype: str | None = None) -> dict[tuple, list[str]]:
    """The names of the network layers (sources of kind onnx, torch) behind each problem key."""
    from ckheur.problems.sources import named_layers

    names: dict[tuple, list[str]] = {}
    for src in node.get("sources") or []:
        if src.get("kind") in ("onnx", "torch") and str(src.get("family", "grouped_conv")) == family.name:
            for name, p in named_layers(src, family, direction, dtype):
                names.setdefault(p.key(), []).append(name)
    return names


def _build(node: Mapping[str, Any], family: Family, stack: tuple[str, ...], apply_shard: bool,
           op: tuple = (None, None), keep_repeats: bool = False) -> list:
    def load_set(n: str) -> list:
        return load_named_set(n, family, stack, *op)

    probs: list = []
    for src in node.get("sources") or []:
        if str(src.get("family", "grouped_conv")) == family.name or src.get("kind") == "set":
            probs.extend(load_source(src, load_set, family, *op))
    if keep_repeats:
        return probs
    if node.get("dedupe", True):
        probs = dedupe(probs)
    excluded = {p.key() for n in node.get("exclude") or [] for p in load_set(str(n))}
    if excluded:
        probs = [p for p in probs if p.key() not in excluded]
    if apply_shard:
        sh = node.get("shard") or {}
        seed = sh.get("seed")
        probs = shard(probs, int(sh.get("index", 0)), int(sh.get("count", 1)), None if seed is None else int(seed))
    return probs


def random_problems(family: Family, groups: list, count: int, seed: int) -> list:
    """Seeded random valid problems of an op family spread over kernel groups (conv: 2D/3D; GEMM:
    layouts; "all", where every kernel is a candidate: the family's default generator)."""
    per = max(1, count // max(1, len(groups)))
    out = []
    for i, g in enumerate(groups):
        out += family.problems.generate_group(seed + i, per, g)
    return out
