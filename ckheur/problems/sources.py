"""Problem-set sources declared in YAML: inline lists, seeded generators, CSV files, other
shipped sets, and family-specific kinds (MIOpenDriver lines for grouped conv); plus dedupe,
exclusion and sharding. Each source names its operator family (default grouped_conv)."""

from __future__ import annotations

import functools
import hashlib
import numbers
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ckheur.config import CONF_DIR
from ckheur.families import Family
from ckheur.families.problem_base import ProblemError

# ------------------------------------------------------------------ loading sets
def resolve_path(path: str) -> Path:
    """Absolute paths as given; relative ones against conf/ (shipped data), then the cwd."""
    from ckheur.measurements import resolve

    p = Path(path).expanduser()
    if p.is_absolute():
        return p
    for base in (CONF_DIR, Path.cwd()):
        if (base / p).exists():
            return base / p
    if resolve(p).exists():
        return resolve(p)
    raise ProblemError(f"problem source path {path!r} not found (looked in {CONF_DIR} and {Path.cwd()})")


def read_csv(path: str | Path, family: Family) -> list:
    """Problems from a CSV with problem columns (extra columns such as kernel are ignored), one per
    row; checked as every imported table is (``ckheur.csv_table``), each distinct problem once."""
    from ckheur.csv_table import TableSpec, read_csv_table
    from ckheur.parts import DatasetError

    mod = family.problems
    text = tuple(f for f in mod.FIELDS if isinstance(mod.DEFAULTS.get(f), str))
    spec = TableSpec(f"{family.name} problem CSV", tuple(f for f in mod.FIELDS if f not in mod.DEFAULTS),
                     integer=tuple(f for f in mod.FIELDS if f not in text), text=text,
                     partners=getattr(mod, "PARTNERS", ()))
    try:
        df = read_csv_table(path, spec).frame
    except DatasetError as e:
        raise ProblemError(str(e)) from None
    pid, distinct = distinct_problems(df, [c for c in mod.FIELDS if c in df.columns], mod.problem_from_dict, path)
    return [distinct[g] for g in pid]


def distinct_problems(df: Any, fields: Sequence[str], build: Callable[[dict], Any], path: Any) -> tuple[Any, list]:
    """(problem index per row, the distinct problems) of a checked table, each distinct row built
    once; an invalid one is a ProblemError naming the file line of its first occurrence."""
    import numpy as np

    from ckheur.csv_table import Table

    pid = df.groupby(list(fields), sort=False).ngroup().to_numpy()
    first = np.unique(pid, return_index=True)[1]
    distinct = []
    for i, row in zip(first, df.loc[first, list(fields)].to_dict("records")):
        try:
            distinct.append(build(row))
        except ProblemError as e:
            raise ProblemError(f"CSV {path} line {Table.line(int(i))}: {e}") from None
    return pid, distinct


def dedupe(problems: Iterable[Any]) -> list:
    """Drop repeated problems, keeping first occurrences in order."""
    seen: dict[tuple, Any] = {}
    for p in problems:
        seen.setdefault(p.key(), p)
    return list(seen.values())


def read_dataset_problems(path: str | Path, family: Family) -> list:
    """The distinct problems of a dataset folder, Parquet file or CSV, in order of appearance."""
    from ckheur.parts import DatasetError, read_parquet, read_parts

    path = Path(path)
    if path.name.endswith((".csv", ".csv.gz")):
        return dedupe(read_csv(path, family))
    mod = family.problems
    try:
        df = read_parts(path, columns=mod.FIELDS)[0] if path.is_dir() else read_parquet(path, mod.FIELDS)
    except DatasetError as e:
        raise ProblemError(str(e)) from None
    fields = [f for f in mod.FIELDS if f in df.columns]
    rows = df[fields].drop_duplicates()  # a dataset holds a row per kernel: each problem is built once
    return dedupe(mod.problem_from_dict(dict(zip(fields, r))) for r in rows.itertuples(index=False, name=None))


def shard_of(key: tuple, count: int, seed: int) -> int:
    """The part (0..count-1) of a problem key in a seeded hash split: independent of order and
    of which other problems exist, so a dataset and a problem set split alike."""
    norm = tuple(int(v) if isinstance(v, numbers.Integral) else v for v in key)  # numpy ints hash as ints
    digest = hashlib.blake2b(repr((int(seed), norm)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % count


def shard(problems: Sequence[Any], index: int, count: int, seed: int | None = None) -> list:
    """One part of a partition of the set: every count-th problem from index, or with a seed the
    problems whose seeded hash falls in part ``index`` (:func:`shard_of`)."""
    if count < 1 or not 0 <= index < count:
        raise ProblemError(f"problems.shard: need 0 <= index < count, got index={index}, count={count}")
    if seed is None:
        return [p for i, p in enumerate(problems) if i % count == index]
    return [p for p in problems if shard_of(p.key(), count, seed) == index]


def _batches(src: Mapping[str, Any]) -> list[int]:
    """A source's ``batch`` list, each a whole number >= 1 (ProblemError naming the source otherwise)."""
    batches = list(src.get("batch") or [])
    if not all(isinstance(b, int) and not isinstance(b, bool) and b >= 1 for b in batches):
        raise ProblemError(f"problem source kind={src.get('kind')}: batch={batches}: each batch size must be a "
                           "whole number >= 1")
    return batches


def _with_batches(problems: list, batches: Sequence[int], mod: Any) -> list:
    """One copy of each problem per batch size (conv: N; GEMM: M, the token count)."""
    if not batches:
        return problems
    return [mod.problem_from_dict({**p.to_dict(), mod.BATCH_FIELD: n}) for p in problems for n in batches]


NETWORK_KINDS = ("miopen_log", "onnx", "torch")  # convolutions from where users have them (problems.networks)


def load_source(src: Mapping[str, Any], load_set: Callable[[str], list], family: Family,
                direction: str | None = None, dtype: str | None = None) -> list:
    """Problems of one source node (kind: inline, generate, csv, set, a network kind, or a family-specific
    kind); network kinds keep what runs in the op's ``direction`` and ``dtype`` (None: everything)."""
    mod = family.problems
    kind = str(src.get("kind"))
    if kind == "miopen_log":
        batches = _batches(src)
        return _with_batches(_network_source(src, mod, family, direction, dtype), batches, mod)
    if kind in NETWORK_KINDS:
        return [p for _, p in named_layers(src, family, direction, dtype)]
    if kind == "inline":
        probs = []
        for i, d in enumerate(src.get("problems") or []):
            try:
                probs.append(mod.problem_from_dict(dict(d)))
            except ProblemError as e:
                raise ProblemError(f"inline problem #{i}: {e}") from None
    elif kind == "generate":
        count, max_gflop = int(src.get("count", 0)), float(src.get("max_gflop", 20000.0))
        if count < 0 or max_gflop <= 0:
            raise ProblemError(f"problem source kind=generate: count={count} must be >= 0 and "
                               f"max_gflop={max_gflop} > 0")
        probs = generated(mod, int(src.get("seed", 0)), count, int(src.get("ndim", 2)), src.get("shapes") or None,
                          max_gflop)
    elif kind == "csv":
        probs = read_csv(_source_path(src, kind), family)
    elif kind == "dataset":
        probs = read_dataset_problems(_source_path(src, kind), family)
    elif kind in mod.SOURCES:
        probs = mod.SOURCES[kind](_source_path(src, kind))
    elif kind == "set":
        if not src.get("name"):
            raise ProblemError("problem source kind=set needs a name (a shipped problem set)")
        probs = load_set(str(src["name"]))
    else:
        allowed = ["inline", "generate", "csv", "dataset", "set", *NETWORK_KINDS, *mod.SOURCES]
        raise ProblemError(f"problem source kind={kind!r} not available for {family.name}; allowed: {', '.join(allowed)}")
    return _with_batches(probs, _batches(src), mod)


def generated(mod: Any, seed: int, count: int, ndim: int, shapes: Mapping[str, Any] | None,
              max_gflop: float) -> list:
    """``mod.generate(seed, count, ndim, shapes, max_gflop)``, drawn once per process and arguments
    (the shipped sets are drawn again by every stage that loads one, and holdout draws every
    training set to exclude them). Problems are frozen: callers share them, each in a list of its own."""
    try:
        items = None if shapes is None else tuple(dict(shapes).items())
        return list(_drawn(mod, seed, count, ndim, items, max_gflop))
    except (TypeError, ValueError):  # arguments the generator refuses, or unhashable: it says why
        return mod.generate(seed, count, ndim, shapes, max_gflop)


@functools.lru_cache(maxsize=64)
def _drawn(mod: Any, seed: int, count: int, ndim: int, shapes: tuple | None, max_gflop: float) -> tuple:
    return tuple(mod.generate(seed, count, ndim, None if shapes is None else dict(shapes), max_gflop))


def _network_source(src: Mapping[str, Any], mod: Any, family: Family, direction: str | None, dtype: str | None) -> list:
    """One problem per occurrence of a convolution command in a MIOpen log."""
    from ckheur.problems import networks

    _check_conv_family(mod, family, "miopen_log")
    return networks.read_miopen_log(_source_path(src, "miopen_log"), mod.from_text, direction,
                                    dtype if src.get("dtype") is None else str(src["dtype"]))


def _check_conv_family(mod: Any, family: Family, kind: str) -> None:
    if not hasattr(mod, "from_text"):
        raise ProblemError(f"problem source kind={kind} gives convolutions: its family must be grouped_conv or "
                           f"miopen, not {family.name}")


def named_layers(src: Mapping[str, Any], family: Family, direction: str | None = None,
                 dtype: str | None = None) -> list[tuple[str, Any]]:
    """(layer name, problem) of a network source (kind onnx or torch), one per layer that runs in
    ``direction`` and per batch size of the source."""
    from ckheur.problems import networks

    mod = family.problems
    kind = str(src["kind"])
    _check_conv_family(mod, family, kind)
    where = f"problem source kind={kind} {src.get('path') or src.get('module')}"
    batches = _batches(src)
    node = {**src, "path": _source_path(src, kind)} if kind == "onnx" else src
    return [(layer.name, p) for layer in networks.network_layers(node, direction, dtype, where)
            for p in _with_batches([mod.problem_from_dict(layer.fields)], batches, mod)]


def _source_path(src: Mapping[str, Any], kind: str) -> Path:
    if not src.get("path"):
        raise ProblemError(f"problem source kind={kind} needs a path")
    path = resolve_path(str(src["path"]))
    if kind != "dataset":  # a dataset may be a folder; its files are read through checked readers
        from ckheur.files import check_regular

        check_regular(path, f"problem source kind={kind} path")
    return path
