"""Exporting a bundle as the C99 package and proving it: built, run and compared with the Python
selector on seeded random problems (and the problems it remembers)."""

from __future__ import annotations

import csv
import io
import subprocess
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ckheur.learn.forest import ExportError


def problems_csv(problems: Sequence[Any], fields: Sequence[str]) -> str:
    """Problems as CSV with the family's field names (the input of ckheur_select)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(fields)
    for p in problems:
        w.writerow([getattr(p, f) for f in fields])
    return buf.getvalue()


def compare_with_python(selector: Any, problems: Sequence[Any], binary: Path, fields: Sequence[str]) -> dict:
    """Run ckheur_select on the problems and compare its top-1 kernels and scores with the selector's."""
    from ckheur.families.problem_base import ProblemError

    r = subprocess.run([str(binary), "--k", "1"], input=problems_csv(problems, fields), capture_output=True,
                       text=True, timeout=600)
    if r.returncode not in (0, 1):
        raise ExportError(f"{binary} failed (exit {r.returncode}): {r.stderr[-500:]}")
    c_rows = {int(row["row"]): (row["kernel"], float(row["score"])) for row in csv.DictReader(io.StringIO(r.stdout))}
    same = both_invalid = 0
    worst, mismatches = 0.0, []
    for i, p in enumerate(problems):
        try:
            ks, scores, _ = selector.scores(p)
        except ProblemError:
            both_invalid += i not in c_rows
            if i in c_rows:
                mismatches.append(f"{p.describe()}: Python rejects it, C ranks it")
            continue
        j = int(scores.argmax())
        if i not in c_rows:
            mismatches.append(f"{p.describe()}: C rejects it, Python ranks it")
            continue
        name, score = c_rows[i]
        worst = max(worst, abs(score - scores[j]) / max(abs(scores[j]), 1e-12))
        if name == ks[j].name:
            same += 1
        else:
            mismatches.append(f"{p.describe()}: C picks {name}, Python {ks[j].name}")
    return {"problems": len(problems), "same_top1": same, "both_invalid": both_invalid,
            "max_rel_score_diff": worst, "mismatches": mismatches}


def problems_to_check(selector: Any, count: int, seed: int) -> list:
    """Seeded random problems of the groups the bundle's kernels serve; half of them from the
    family's ``generate_varied`` where it has one (MIOpen: every layout, group and filter kind,
    strides, pads, dilations and bias, which its applicability rules tell apart)."""
    from ckheur.problems import random_problems

    groups = sorted({k.group for k in selector.kernels}, key=str)
    varied = getattr(selector.family.problems, "generate_varied", None)
    if varied is None:
        return random_problems(selector.family, groups, count, seed)
    return random_problems(selector.family, groups, count - count // 2, seed) + varied(seed, count // 2)


def export_c_package(model_dir: str | Path, output: str | Path, *, name: str | None = None, overwrite: bool = False,
                     build: bool = True, check_problems: int = 1000, seed: int = 0,
                     log: Callable[[str], None] = print, applicability: str | None = None,
                     listed: Mapping[str, Any] | None = None, available: Any = None) -> dict:
    """Write the bundle's C99 package into ``output``; with a C compiler (and ``build``), build
    ckheur_select in a private folder, check it against the Python selector on ``check_problems``
    seeded random problems and copy it into the package. An ExportError when C disagrees.
    ``applicability``, ``listed`` and ``available`` replace the bundle's (MIOpen: which solvers are
    ranked), in the package and the Python selector it is checked against alike."""
    from ckheur.files import private_folder, write_file
    from ckheur.c_export.compiled import build as build_package
    from ckheur.c_export.compiled import compile_command, find_compiler, op_settings
    from ckheur.c_export.generate import export_bundle
    from ckheur.selection.selector import Selector

    model_dir, out = Path(model_dir), Path(output)
    t0 = time.perf_counter()
    op = op_settings(applicability, listed, available=available)
    res = export_bundle(model_dir, out, name, overwrite=overwrite, **op)
    t_export = time.perf_counter() - t0
    log(f"export: {model_dir} -> {out}/ ({res.num_kernels} kernels, {res.num_trees} trees, "
        f"{res.source_bytes / 1e6:.2f} MB of source, {t_export:.1f} s)")
    for note in res.notes:
        log(f"export: NOTE {note}; the package says so")
    for f in res.files:
        log(f"  {f}")
    summary: dict = {"output": str(out), "name": res.name, "source_bytes": res.source_bytes,
                     "export_s": round(t_export, 2), "notes": res.notes}
    cc = find_compiler()
    srcs = [out / f"{res.name}.c", out / "ckheur_select.c"]
    command = " ".join(compile_command(cc or "cc", srcs, out / "ckheur_select", shared=False))
    if not build or cc is None:
        log(f"export: not built ({'export.build=false' if cc else 'no C compiler found'}); build with:\n  {command}")
        return summary
    selector = Selector.load(model_dir, **op)
    probs = problems_to_check(selector, check_problems, seed)
    remembered = _remembered_problems(selector, check_problems, seed)  # the remembered answers are checked too
    probs += remembered
    # The check runs a binary built in a private folder from the sources just written, never one
    # another user could have swapped in the output folder; the program is then copied there.
    t0 = time.perf_counter()
    with private_folder("ckheur-export-") as tmp:
        for src in srcs + [out / f"{res.name}.h", out / "ckheur_abi.h"]:
            write_file(tmp / src.name, src.read_bytes())
        built = build_package(tmp, res.name, cc, shared=False)
        t_build = time.perf_counter() - t0
        check = compare_with_python(selector, probs, built, list(selector.family.problems.FIELDS))
        binary = write_file(out / "ckheur_select", built.read_bytes(), mode=0o755)
    log(f"export: built {binary} in {t_build:.1f} s ({command})")
    log(f"export: check against the Python selector on {check['problems']} seeded random problems"
        + (f" ({len(remembered)} of them remembered training problems)" if remembered else "") + ": "
        f"same top-1 kernel {check['same_top1']}/{check['problems'] - check['both_invalid']}, "
        f"max relative score difference {check['max_rel_score_diff']:.1e} "
        f"({check['both_invalid']} rejected by both)")
    summary.update(build_s=round(t_build, 2), check=check)
    if check["mismatches"]:
        raise ExportError("the compiled selector disagrees with Python:\n  " + "\n  ".join(check["mismatches"][:10]))
    return summary


def _remembered_problems(selector: Any, count: int, seed: int) -> list:
    """Up to ``count`` seeded problems the bundle remembers (train.remember), as problems."""
    import numpy as np

    keys = sorted(selector.answers, key=str)
    if not keys or count < 1:
        return []
    pick = np.random.default_rng(seed).choice(len(keys), size=min(count, len(keys)), replace=False)
    fields = list(selector.family.problems.FIELDS)
    return [selector.family.problems.problem_from_dict(dict(zip(fields, keys[i]))) for i in sorted(pick)]
