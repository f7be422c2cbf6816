"""Measuring pairs, shared by the stages that measure (sweep, active sweep, tune): what a
sweep works on (its plan), pairs cut into the backend's batches, each batch appended to a
dataset as it completes, and progress with rate and ETA."""

from __future__ import annotations

import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ckheur.stages import StageError, plain


class Progress:
    """Progress of a long job (measured pairs, scored problems): tqdm's bar (rate, ETA; terminals and notebooks) when ``mode`` is
    ``bar`` (``auto`` on a terminal or in a Jupyter kernel), plain lines every ``every_s`` seconds
    for logs (``log``: what CI logs and cluster job files want), or nothing (``none``)."""

    def __init__(self, total: int, mode: str = "auto", every_s: float = 10.0, stream: Any = None,
                 prefix: str = "sweep", unit: str = "pair") -> None:
        self.prefix, self.unit = prefix, unit
        self.stream = stream or sys.stderr
        mode = str(mode)
        if mode == "auto":
            mode = "bar" if self.stream.isatty() or "ipykernel" in sys.modules else "log"
        self.mode, self.total, self.every_s = mode, total, every_s
        self.done, self.t0, self.last = 0, time.perf_counter(), 0.0
        self.bar = None
        if mode == "bar":
            from tqdm.auto import tqdm

            self.bar = tqdm(total=total, desc=prefix, unit=unit, file=self.stream, dynamic_ncols=True)

    def update(self, n: int, note: str = "") -> None:
        """Count ``n`` more pairs done; ``note`` says what the last batch gave."""
        self.done += n
        if self.bar is not None:
            self.bar.set_postfix_str(note, refresh=False)
            self.bar.update(n)
            if self.done >= self.total:
                self.close()
            return
        now = time.perf_counter()
        if self.mode == "none" or (now - self.last < self.every_s and self.done < self.total):
            return
        self.last = now
        el = now - self.t0
        rate = self.done / el if el > 0 else 0.0
        eta = (self.total - self.done) / rate if rate > 0 else float("inf")
        frac = self.done / self.total if self.total else 1.0
        self.stream.write(f"{self.prefix}: {self.done}/{self.total} {self.unit}s ({100 * frac:.0f}%) {rate:,.0f}/s "
                          f"ETA {eta:,.0f}s {note}\n")
        self.stream.flush()

    def close(self) -> None:
        """End the bar (also when the run stops early)."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def chunks(seq: Sequence[Any], size: int):
    for i in range(0, len(seq), max(1, size)):
        yield seq[i:i + size]


def measure_batches(pairs: Sequence[tuple[Any, Any]], measurer: Any) -> list[tuple[Sequence, Callable]]:
    """The pairs cut into the measurer's batch size, each with its measure call (for record_batches)."""
    return [(b, measurer.measure) for b in chunks(pairs, measurer.batch_pairs)]


def record_batches(out: Path, batches: Sequence[tuple[Sequence, Callable]], measurer: Any, op: dict, arch: dict,
                   pcols: dict, kcols: dict, progress: Progress) -> tuple[Counter, bool]:
    """Measure batches of pairs and append each as a part file of the dataset ``out``.

    Shared by sweeps and tuning: a kill loses at most the batch in flight, and Ctrl-C stops
    cleanly after saving what was measured. Returns the attempts by status and whether the
    run was interrupted. The caller owns (and closes) the measurer."""
    from ckheur.dataset import common_columns, measurement_rows, write_part

    common = common_columns(op["family"], op["direction"], op["dtype"], arch["name"], measurer.name,
                            measurer.warmup, measurer.repeat)
    statuses: Counter = Counter()
    try:
        for batch, measure in batches:
            res = measure(batch)
            write_part(out, measurement_rows(batch, res, common, pcols, kcols, measurer.clock_mhz()))
            statuses.update(res.status)
            progress.update(len(batch), f"(last batch: {dict(Counter(res.status))})")
    except KeyboardInterrupt:
        return statuses, True
    return statuses, False


@dataclass
class SweepPlan:
    """What a sweep works on: the problems, each with the pool kernels it can run, and what is done."""

    op: dict
    arch: dict
    backend: dict
    pool: Any
    problems: list
    out: Path  # the dataset folder
    done: set  # (*problem key, kernel) already in the dataset
    groups: dict  # kernel group -> its pool kernels
    masks: dict  # problem key -> which kernels of its group can run it (bool array)
    skipped: list  # (problem description, reason): no kernel can run it
    total_pairs: int  # problems x the kernels of their group (runnable or not)


def plan_sweep(cfg: Any) -> SweepPlan:
    """Pool, problems and the dataset's existing pairs for a sweep config (moves the old dataset
    aside with sweep.overwrite)."""
    from ckheur.dataset import USABLE, dataset_dir, read_dataset
    from ckheur.kernels import enumerate_pool
    from ckheur.ops import get_family
    from ckheur.problems import load_problem_set

    op, arch, bcfg, st = plain(cfg.op), plain(cfg.arch), plain(cfg.backend), cfg.sweep
    family = get_family(op["family"])
    pool = enumerate_pool(op, arch, cfg.kernels.filter)
    if not pool.kernels:
        raise StageError("the kernel pool is empty (check kernels.filter and the op's allow-lists)")
    problems = load_problem_set(plain(cfg.problems), op["family"])
    out = Path(st.output) if st.output else dataset_dir(cfg.paths.data, op, arch["name"], cfg.problems.name)
    if st.overwrite and out.exists():
        from ckheur.files import aside_name

        aside = aside_name(out)
        out.rename(aside)
        print(f"sweep.overwrite: previous dataset kept aside as {aside}")
    done: set[tuple] = set()
    old = read_dataset(out) if out.exists() else None
    if old is not None and len(old):
        old = old[(old.arch == arch["name"]) & (old.direction == op["direction"]) & (old.dtype == op["dtype"])]
        if st.retry_failed:
            old = old[old.status.isin([*USABLE, "unsupported"])]
        done = set(old[[*family.problems.FIELDS, "kernel"]].itertuples(index=False, name=None))
    groups = pool.by_group()
    support = {g: family.kernels.support_arrays(ks) for g, ks in groups.items()}
    masks, skipped, total = {}, [], 0
    for p in problems:
        ks = groups.get(p.group, [])
        mask, reason = family.kernels.support_mask(p, support[p.group], op) if ks else \
            ([], f"no kernel for its group {p.group!r} in the pool")
        if not np.any(mask):
            skipped.append((p.describe(), reason))
            continue
        total += len(ks)
        masks[p.key()] = np.asarray(mask, dtype=bool)
    return SweepPlan(op, arch, bcfg, pool, [p for p in problems if p.key() in masks], out, done, groups, masks,
                     skipped, total)


def print_skipped(skipped: list) -> None:
    """Print the problems no kernel can run (the first ten)."""
    for desc, reason in skipped[:10]:
        print(f"sweep: skipped {desc}: {reason}")
    if len(skipped) > 10:
        print(f"sweep: ... {len(skipped) - 10} more problems skipped (sweep_summary.json lists them)")
