"""Problems: the grouped-convolution problem type and named problem sets."""

from __future__ import annotations

from typing import Any, Mapping

from ckheur.problems.conv import CONV_FIELDS, DIRECTIONS, ConvProblem, ProblemError, problem_from_dict
from ckheur.problems.sources import CONF_DIR, dedupe, load_source, parse_miopen, shard

__all__ = [
    "CONV_FIELDS", "DIRECTIONS", "ConvProblem", "ProblemError", "problem_from_dict",
    "parse_miopen", "load_problem_set", "load_named_set", "shipped_sets",
]


def shipped_sets() -> list[str]:
    """Names of the problem sets shipped in conf/problems/."""
    return sorted(p.stem for p in (CONF_DIR / "problems").glob("*.yaml"))


def _set_node(name: str) -> Any:
    """The validated config node of a shipped set (same schema as composition)."""
    from omegaconf import OmegaConf

    from ckheur.config import ProblemSetSchema

    path = CONF_DIR / "problems" / f"{name}.yaml"
    if not path.exists():
        raise ProblemError(f"problem set {name!r} not found; shipped sets: {', '.join(shipped_sets())}")
    raw = OmegaConf.load(path)
    raw.pop("defaults", None)
    return OmegaConf.merge(OmegaConf.structured(ProblemSetSchema), raw)


def load_named_set(name: str, _stack: tuple[str, ...] = ()) -> list[ConvProblem]:
    """All problems of a shipped set (no sharding)."""
    if name in _stack:
        raise ProblemError(f"problem set {name!r} includes itself via {' -> '.join(_stack)}")
    node = _set_node(name)
    return _build(node, _stack + (name,), apply_shard=False)


def load_problem_set(node: Mapping[str, Any]) -> list[ConvProblem]:
    """Problems of a composed ``problems`` config node: sources, exclusions, dedupe, shard."""
    return _build(node, (str(node.get("name")),), apply_shard=True)


def _build(node: Mapping[str, Any], stack: tuple[str, ...], apply_shard: bool) -> list[ConvProblem]:
    def load_set(n: str) -> list[ConvProblem]:
        return load_named_set(n, stack)

    probs: list[ConvProblem] = []
    for src in node.get("sources") or []:
        probs.extend(load_source(src, load_set))
    if node.get("dedupe", True):
        probs = dedupe(probs)
    excluded = {p.key() for n in node.get("exclude") or [] for p in load_set(str(n))}
    if excluded:
        probs = [p for p in probs if p.key() not in excluded]
    if apply_shard:
        sh = node.get("shard") or {}
        probs = shard(probs, int(sh.get("index", 0)), int(sh.get("count", 1)))
    return probs
