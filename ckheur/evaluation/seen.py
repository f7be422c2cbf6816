"""Seen and unseen problems: which evaluated problems a bundle was trained on, and the figures of each part.

A bundle knows its training problems two ways: the problems it remembers (MIOpen bundles,
answers.json.xz) and the datasets its train_manifest.json lists by path and sha256 (their
problems count only when a file with that content is found: at the recorded path, among the
shipped measurements, or among the evaluated datasets)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np


def manifest_datasets(model_dir: Path) -> list[dict]:
    """The training datasets a bundle's train_manifest.json lists (path and sha256), [] when none."""
    try:
        listed = json.loads((Path(model_dir) / "train_manifest.json").read_text()).get("datasets", [])
    except (OSError, ValueError, AttributeError, RecursionError):
        return []
    return [d for d in listed if isinstance(d, dict) and d.get("sha256")] if isinstance(listed, list) else []


def training_datasets(model_dir: Path, candidates: Sequence[Path] = ()) -> list[Path]:
    """The bundle's training datasets found by content: each train_manifest.json entry's recorded
    path (or shipped ``measurements/`` copy) or one of ``candidates`` with the same sha256."""
    from ckheur.measurements import resolve
    from ckheur.parts import sha256_of

    found = []
    for entry in manifest_datasets(model_dir):
        for path in [resolve(entry.get("path", "")), *map(Path, candidates)]:
            if path.exists() and str(path) != "." and sha256_of(path) == entry["sha256"]:
                found.append(path)
                break
    return found


def training_keys(model_dir: Path, family: Any, remembered: Iterable[tuple] = (),
                  candidates: Sequence[Path] = (), arch: str | None = None) -> tuple[set, list[str]]:
    """Problem keys the bundle was trained on (its remembered keys and its training datasets' problems,
    where found) and what they came from. With ``arch``, only that GPU's rows count: a model
    trained across GPUs has not seen a problem that only another GPU measured."""
    from ckheur.data.dataset import problem_keys, read_dataset

    keys, sources = set(remembered), []
    if keys:
        sources.append(f"{len(keys)} remembered problems (the bundle's answers)")
    fields = list(family.problems.FIELDS)
    for path in training_datasets(model_dir, candidates):
        df = read_dataset(path, columns=[*fields, "arch"])
        mine = df[df.arch == arch] if arch is not None else df
        found = problem_keys(mine[fields].drop_duplicates())
        keys.update(found)
        # across GPUs only the evaluated GPU's rows count: say how many problems that leaves of each file
        sources.append(f"training dataset {path}" + (f" ({len(found)} problems of {arch})" if arch is not None else ""))
    return keys, sources


def seen_mask(rows: Sequence[Mapping[str, Any]], family: Any, keys: set) -> np.ndarray:
    """Per evaluated row (``Scored.rows``: the problem's fields), whether its problem key is in ``keys``."""
    fields = list(family.problems.FIELDS)
    make = family.problems.problem_from_dict
    return np.array([make({f: r[f] for f in fields}).key() in keys for r in rows], dtype=bool)


def seen_unseen(scored: Any, mask: np.ndarray, sources: list[str], tie_tolerance: float = 0.02) -> dict:
    """Problems, mean efficiency, P10 and exact top-1 of the seen and the unseen problems; on a
    find-db (censored candidates) also their open-protocol figures (ckheur.metrics.censored_choice_report)."""
    from ckheur.metrics import censored_choice_report, summarize

    out: dict = {"from": sources}
    for name, part in (("seen", mask), ("unseen", ~mask)):
        idx = np.flatnonzero(part)
        s = summarize([scored.rows[i]["efficiency"] for i in idx])
        out[name] = {"problems": int(len(idx)), "mean": s["mean"], "p10": s["p10"],
                     "top1": float(np.mean([scored.rows[i]["top1"] for i in idx])) if len(idx) else float("nan")}
        if scored.censored and len(idx):
            pid = np.concatenate([np.full(len(scored.choice[i][0]), k) for k, i in enumerate(idx)])
            sc = np.concatenate([scored.choice[i][0] for i in idx])
            times = np.concatenate([scored.choice[i][1] for i in idx])
            o = censored_choice_report(pid, sc, times, tie_tolerance)["open"]
            out[name]["open"] = {"top1": o["top1"], "efficiency": o["efficiency"]["mean"],
                                 "not_listed": o["picks_outside_listed"]}
    return out


def describe(split: Mapping[str, Any]) -> str:
    """One line: "seen: n problems, mean ..., unseen: m problems, mean ..."."""
    def part(name: str) -> str:
        s = split[name]
        if not s["problems"]:
            return f"{name}: 0 problems"
        text = f"{name}: {s['problems']} problems, mean {100 * s['mean']:.2f}%, P10 {100 * s['p10']:.2f}%, " \
               f"top-1 {100 * s['top1']:.1f}%"
        if "open" in s:
            o = s["open"]
            text += f" (find-db open protocol: top-1 {100 * o['top1']:.1f}%, efficiency {100 * o['efficiency']:.2f}%, " \
                    f"not listed {100 * o['not_listed']:.2f}%)"
        return text
    return f"{part('seen')}; {part('unseen')}"
