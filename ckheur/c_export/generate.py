"""Export a model bundle as a self-contained C99 package (C standard library and libm only).

    export_bundle("models/grouped_conv_fwd_bf16_gfx950", "out/")   # -> ExportResult

Writes ``<name>.h``/``<name>.c`` (features, trees, kernel table, applicability, cascade),
``ckheur_abi.h`` (the problem structs of ckheur/backends/abi.h), ``ckheur_select.c`` (a CSV
command-line ranker), ``CMakeLists.txt`` and ``README.md``.

What cannot drift between Python and C, by construction:
- feature order and names: every C feature slot is generated from the bundle's feature spec,
  and export fails when the family's C code does not compute a feature the model uses;
- kernel-only values (kernel features, the latency model's kernel terms) are computed by the
  Python code itself and written as exact hexadecimal constants;
- what C computes (problem and problem x kernel features) is checked against Python by the
  parity tests and, when a compiler is present, by ``stage=export`` itself.

Trees become compact arrays evaluated QuickScorer-style for all candidates at once (see
c/runtime.c): a few thousand nodes stay small as data, whereas generated if-else code would grow
with every tree and cannot share work between the candidates of a problem.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ckheur.backends.abi import DIRECTION_CODES, DTYPE_CODES
from ckheur.files import make_folder, write_file
from ckheur.families.kernel_base import DTYPE_BYTES, LATENCY_FLOOR_MS
from ckheur.families.problem_base import EXACT_LIMIT, FIELD_MAX
from ckheur.c_export.package import (C_DIR, c_strings, check_output, cli_c, cmake_lists, comment_text, header_h,
                                     readme_md)
from ckheur.learn.forest import ExportError, Forest, goes_left, read_forest

ABI_H = Path(__file__).resolve().parent.parent / "backends" / "abi.h"
CHUNK = 64  # candidates evaluated together (bounds the stack use of a call)
KMASK_MAX_ENTRIES = 200_000  # kernels x trees above this: kernel-feature nodes are tested at run time
RESERVED_NAMES = ("ckheur_abi", "ckheur_select")  # <name>.c / <name>.h would replace the package's own
MAX_NAME = 100  # lib<name>.so and the C symbols stay far below the OS's 255-byte file names


@dataclass(frozen=True)
class CFamily:
    """An op family's C export (``ckheur.families.CExport``) with its names resolved: the ctypes class
    of its problem struct and the lists its text fields index."""

    struct: str
    ctype: Any
    sources: tuple[str, ...]
    enums: Mapping[str, tuple[str, ...]]
    flags: tuple[str, ...] = ()
    tiles: bool = True
    group_enum: str | None = None
    support: Any = None  # f(kernels, op) -> (defines, C tables, in words) of the kernels ranked per problem


def c_family(family: Any) -> CFamily:
    """The C description of an op family (``ckheur.families.Family``); an ExportError when it has no C code."""
    from ckheur.backends import abi
    from ckheur.families import FAMILIES

    c = family.c_export
    if c is None:
        raise ExportError(f"op family {family.name!r} has no C feature code; families with one: "
                          f"{', '.join(n for n, r in FAMILIES.items() if r.c_export)}")
    return CFamily(c.struct, getattr(abi, c.ctype), c.sources,
                   {f: tuple(getattr(family.problems, lst)) for f, lst in c.enums}, c.flags, c.tiles,
                   c.group_enum, getattr(family.kernels, c.support) if c.support else None)


@dataclass
class ExportResult:
    """The package written by ``export_bundle``."""

    path: Path
    name: str
    files: list[Path]
    family: str
    num_kernels: int
    num_trees: int
    kmask: bool
    notes: list[str] = field(default_factory=list)

    @property
    def source_bytes(self) -> int:
        return sum(f.stat().st_size for f in self.files)


MASK64 = (1 << 64) - 1


def _mix64(z: int) -> int:
    """splitmix64's finalizer (the C runtime's ckh_mix64)."""
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def key_hash(numbers: Sequence[int]) -> int:
    """A problem key's 64-bit hash, as the C runtime computes it (ckh_key_hash): each field in
    turn mixed into the state."""
    h = 0x9E3779B97F4A7C15
    for v in numbers:
        h = _mix64(h ^ (int(v) & MASK64))
    return h


def key_hashes(keys: Sequence[Sequence[int]]) -> list[int]:
    """``key_hash`` of many keys of one length at once (numpy's uint64 arithmetic wraps as C's)."""
    try:
        cols = np.array(keys, dtype=np.int64).reshape(len(keys), -1).astype(np.uint64)
    except (OverflowError, ValueError):  # a number beyond int64, or keys of differing lengths
        return [key_hash(k) for k in keys]
    h = np.full(len(keys), 0x9E3779B97F4A7C15, dtype=np.uint64)
    m1, m2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)
    s30, s27, s31 = np.uint64(30), np.uint64(27), np.uint64(31)
    for col in cols.T:
        z = h ^ col
        z = (z ^ (z >> s30)) * m1
        z = (z ^ (z >> s27)) * m2
        h = z ^ (z >> s31)
    return [int(v) for v in h]


def _answers_c(answers: Mapping[tuple, str], kernels: Sequence[Any], fields: Sequence[str],
               enums: Mapping[str, tuple]) -> str:
    """The bundle's remembered answers as C: key hashes sorted for a binary search, the kernel of
    each, and the function giving a problem's key numbers (enum fields by their index)."""
    index = {k.name: i for i, k in enumerate(kernels)}
    numbers = [[enums[f].index(v) if f in enums else int(v) for f, v in zip(fields, key)] for key in answers]
    rows = sorted(zip(key_hashes(numbers), (index[name] for name in answers.values())))
    if len({h for h, _ in rows}) < len(rows):
        raise ExportError("two remembered problems share a key hash; the C package cannot tell them apart")
    getters = "".join(f"    out[{i}] = (int64_t)p->{f};\n" for i, f in enumerate(fields))
    return (f"static const uint64_t ckh_answer_hash[] = {{\n{_rows([f'UINT64_C({h:#018x})' for h, _ in rows], 4)}\n}};\n"
            f"static const int ckh_answer_kernel[] = {{\n{_rows([str(k) for _, k in rows], 16)}\n}};\n"
            f"static void ckh_key_numbers(const ckh_problem_t* p, int64_t* out) {{\n{getters}}}\n")


def _c_name(name: str) -> str:
    """A kernel name as a C string literal: only names of SAFE_TEXT's characters (no quote, backslash,
    ``?`` or ``*``) are written; any other is an ExportError (bundles are checked on load: none arrives)."""
    from ckheur.families.kernel_base import SAFE_TEXT

    if not isinstance(name, str) or not SAFE_TEXT.fullmatch(name):
        raise ExportError(f"kernel name {str(name)[:80]!r} holds characters a C string may not be given")
    return f'"{name}"'


def c_identifier(text: str) -> str:
    """A C identifier from a model name (lower case, non-alphanumerics as underscores)."""
    out = re.sub(r"[^0-9a-zA-Z_]", "_", text).lower().strip("_")
    return out if out and not out[0].isdigit() else f"m_{out}"


# ---------------------------------------------------------------- literals
def _hex(x: float) -> str:
    """An exact C double literal."""
    x = float(x)
    if np.isnan(x):
        raise ExportError("a NaN constant cannot be exported")
    if np.isinf(x):
        return "HUGE_VAL" if x > 0 else "(-HUGE_VAL)"
    return float.hex(x)


def _hexf(x: np.float32) -> str:
    """An exact C float literal."""
    x = float(x)
    if np.isinf(x):
        return "HUGE_VALF" if x > 0 else "(-HUGE_VALF)"
    return float.hex(x) + "f"


def _float_down(thr: float) -> np.float32:
    """The largest float32 t with t <= thr: for any float x, ``x <= t`` iff ``(double)x <= thr``."""
    with np.errstate(over="ignore"):
        t = np.float32(thr)
    if float(t) > thr:
        t = np.nextafter(t, np.float32(-np.inf))
    return t


def _rows(items: Sequence[str], per_line: int = 8, indent: str = "    ") -> str:
    return ",\n".join(indent + ", ".join(items[i:i + per_line]) for i in range(0, len(items), per_line))


def _forest_c(tag: str, forest: Forest, feat_class: Sequence[str], slot: Sequence[int],
              kernel_values: np.ndarray, use_kmask: bool, kmask_type: str) -> str:
    """C arrays and the ckh_forest of one model (main or companion)."""
    pnodes, cnodes = [], []
    scan: list[tuple[int, float, int, int]] = []  # (slot, threshold, tree, left leaves) of plain problem splits
    cat_words: list[int] = []
    cat_ofs = [0]
    nk = kernel_values.shape[0]
    kmask = np.full((nk, max(forest.ntree, 1)), np.uint64((1 << 64) - 1), dtype=np.uint64)
    full = (1 << 64) - 1
    for t, n, left, right in forest.nodes:
        f = int(n["split_feature"])
        cls = feat_class[f]
        if cls == "K" and use_kmask:
            to_left = goes_left(kernel_values[:, slot[f]], n)
            kmask[to_left, t] &= np.uint64(~right & full)
            kmask[~to_left, t] &= np.uint64(~left & full)
            continue
        cat = -1
        if n["decision_type"] == "==":
            cats = sorted({int(c) for c in str(n["threshold"]).split("||")})
            words = [0] * (max(cats) // 32 + 1)
            for c in cats:
                words[c // 32] |= 1 << (c % 32)
            cat = len(cat_ofs) - 1
            cat_words.extend(words)
            cat_ofs.append(len(cat_words))
            kind, thr = 3, np.float32(0.0)
        else:
            kind = {"None": 0, "Zero": 1, "NaN": 2}[n["missing_type"]]
            thr = _float_down(float(n["threshold"]))
        src = 1 if cls == "K" else 0
        zero_left = int(kind == 0 and 0.0 <= float(thr))
        if cls == "P" and kind == 0:  # tested by the sorted scan: only the nodes a problem sends right act
            scan.append((slot[f], float(thr), t, left))
            continue
        row = (f"{{{_hexf(thr)}, {t}, {slot[f]}, {kind}, {int(bool(n['default_left']))}, {src}, {zero_left}, {cat}, "
               f"UINT64_C({left:#x}), UINT64_C({right:#x})}}")
        (pnodes if cls == "P" else cnodes).append((t, row))
    cofs = [0] * (forest.ntree + 1)
    for t, _ in cnodes:
        cofs[t + 1] += 1
    for t in range(forest.ntree):
        cofs[t + 1] += cofs[t]
    leaf_vals = [v for vals in forest.leaves for v in vals]
    leaf_ofs = np.cumsum([0] + [len(v) for v in forest.leaves])[:-1].tolist() or [0]
    none = "{0.0f, 0, 0, 0, 0, 0, 0, -1, 0, 0}"
    scan.sort()
    nslots = max([s for s, _, _, _ in scan], default=-1) + 1
    sofs = np.searchsorted([s for s, _, _, _ in scan], np.arange(nslots + 1)).tolist() if scan else [0]
    out = [
        f"static const ckh_node ckh_{tag}_pnodes[] = {{\n{_rows([r for _, r in pnodes], 1) or '    ' + none}\n}};",
        f"static const ckh_node ckh_{tag}_cnodes[] = {{\n{_rows([r for _, r in cnodes], 1) or '    ' + none}\n}};",
        f"static const int32_t ckh_{tag}_cofs[] = {{\n{_rows([str(x) for x in cofs], 16)}\n}};",
        f"static const float ckh_{tag}_scan_thr[] = {{\n{_rows([_hexf(np.float32(x)) for _, x, _, _ in scan], 6) or '    0.0f'}\n}};",
        f"static const uint64_t ckh_{tag}_scan_clear[] = {{\n{_rows([f'UINT64_C({x:#x})' for _, _, _, x in scan], 4) or '    0'}\n}};",
        f"static const uint16_t ckh_{tag}_scan_tree[] = {{\n{_rows([str(x) for _, _, x, _ in scan], 16) or '    0'}\n}};",
        f"static const int32_t ckh_{tag}_scan_ofs[] = {{\n{_rows([str(x) for x in sofs], 16)}\n}};",
        f"static const double ckh_{tag}_leaf[] = {{\n{_rows([_hex(v) for v in leaf_vals], 4)}\n}};",
        f"static const int32_t ckh_{tag}_leaf_ofs[] = {{\n{_rows([str(x) for x in leaf_ofs], 16)}\n}};",
        f"static const uint32_t ckh_{tag}_cat_bits[] = {{\n{_rows([f'{w:#x}u' for w in cat_words], 8) or '    0u'}\n}};",
        f"static const int32_t ckh_{tag}_cat_ofs[] = {{\n{_rows([str(x) for x in cat_ofs], 16)}\n}};",
    ]
    if use_kmask:
        bits = {"uint16_t": 16, "uint32_t": 32, "uint64_t": 64}[kmask_type]
        lim = (1 << bits) - 1
        vals = [f"{int(v) & lim:#x}u" for v in kmask.T.reshape(-1)]  # tree-major: a tree's kernels side by side
        out.append(f"static const CKH_KMASK_T ckh_{tag}_kmask[] = {{\n{_rows(vals, 12)}\n}};")
    out.append(
        f"static const ckh_forest ckh_forest_{tag} = {{{forest.ntree}, ckh_{tag}_pnodes, {len(pnodes)}, "
        f"ckh_{tag}_scan_thr, ckh_{tag}_scan_clear, ckh_{tag}_scan_tree, ckh_{tag}_scan_ofs, {nslots}, "
        f"ckh_{tag}_cnodes, ckh_{tag}_cofs, ckh_{tag}_leaf, ckh_{tag}_leaf_ofs, ckh_{tag}_cat_bits, "
        f"ckh_{tag}_cat_ofs, {f'ckh_{tag}_kmask' if use_kmask else 'NULL'}}};")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- features and kernels
def _classify(engine: Any, names: Sequence[str]) -> list[str]:
    """Each feature's class: P (problem only), K (kernel or hardware only), I (problem x kernel)."""
    problem = set(engine.PROBLEM_FEATURES)
    kernel = set(engine.KERNEL_FEATURES) | set(engine.HARDWARE_FEATURES)
    return ["P" if n in problem else "K" if n in kernel else "I" for n in names]


def _check_classes(X: np.ndarray, n_problems: int, n_kernels: int, classes: Sequence[str],
                   names: Sequence[str]) -> None:
    """Kernel-only columns must not vary with the problem, problem-only ones not with the kernel."""
    Y = X.reshape(n_problems, n_kernels, -1)
    for j, (c, n) in enumerate(zip(classes, names)):
        col = Y[:, :, j]
        if c == "K" and not np.array_equal(col, np.broadcast_to(col[:1], col.shape), equal_nan=True):
            raise ExportError(f"feature {n} is declared kernel-only but varies with the problem")
        if c == "P" and not np.array_equal(col, np.broadcast_to(col[:, :1], col.shape), equal_nan=True):
            raise ExportError(f"feature {n} is declared problem-only but varies with the kernel")


def _probe_problems(family: Any, kernels: Sequence[Any]) -> list:
    """Two valid problems of the first kernel's group (features are probed on them)."""
    from ckheur.problems import random_problems

    return random_problems(family, [kernels[0].group], 2, 0)


def _template_names(text: str, macro: str) -> set[str]:
    return set(re.findall(rf"\b{macro}\((\w+),", text))


def _sim_c(tag: str, kernels: Sequence[Any], arch: Mapping[str, Any], params: Mapping[str, Any]) -> str:
    """The latency model's kernel terms and constants for one parameter set."""
    from ckheur.sim import kernel_arrays, kernel_terms

    terms = kernel_terms(kernel_arrays(kernels), arch, params)
    cols = ("occ", "slots", "mfma_cycles", "load_cycles", "prologue_iters", "epilogue_cycles", "overhead", "effect",
            "tm", "tn", "tk", "dtype_bytes")
    rows = ["{" + ", ".join(_hex(terms[c][i]) for c in cols) + "}" for i in range(len(kernels))]
    consts = [float(arch["num_cus"]), float(arch["max_clock_mhz"]) * 1e6, float(params.get("layout_penalty", 0.0)),
              float(params["gather_penalty"]), float(params["overlap_loss"]), float(params["l2_reuse"]),
              float(arch["hbm_bandwidth_gbps"]) * 1e9 * float(params["hbm_eff"]), float(params["launch_us"]) * 1e-6]
    return (f"static const ckh_sim_kernel ckh_sim_{tag}[] = {{\n{_rows(rows, 1)}\n}};\n"
            f"static const ckh_sim_params ckh_simp_{tag} = {{{', '.join(_hex(c) for c in consts)}}};\n")


def _errors(family: Any) -> list[tuple[str, int, str]]:
    """(macro, code, message) of every error the exported library can return."""
    cf = c_family(family)
    errs = [
        ("NULL", -1, "a pointer argument is NULL"),
        ("K", -2, "k must be >= 1"),
        ("DIRECTION", -3, "the problem's direction is not the model's"),
        ("DTYPE", -4, "the problem's dtype is not the model's"),
        ("C_GROUPS", -5, "invalid problem: C must be divisible by G"),
        ("K_GROUPS", -6, "invalid problem: K must be divisible by G"),
        ("EMPTY_OUTPUT", -7, "invalid problem: an output size (Do, Ho or Wo) is < 1 (input too small for "
                             "filter/dilation/padding)"),
        ("UNSUPPORTED", -8, "unsupported problem: no kernel of the pool can run it (e.g. " + (
            "MIOpen's applicability rules reject every solver of the table: op.applicability)" if cf.support else
            "no kernel of its spatial dimensionality or layout, or none pads its sizes)")),
        ("TOO_LARGE", -9, "unsupported problem: FLOPs or tensor elements reach 2^53"),
        ("CAPACITY", -10, "cap is smaller than the number of candidate kernels (use num_kernels())"),
        ("SPLIT_K", -11, "invalid problem: split_k must be <= K"),
        ("LAYOUT", -12, "invalid problem: layout must be "
                        + (", ".join(f"{i} ({x})" for i, x in enumerate(cf.enums.get("layout", ())))
                           or "absent (the family's problems have no layout)")),
        ("CONTIGUOUS", -13, "unsupported problem: a contiguous dimension is below the elements vector loads "
                            "need (op.min_contiguous_elems)"),
        ("BIAS", -14, "invalid problem: bias must be 0 or 1"),
        ("LAYOUT_DIMS", -15, "invalid problem: a 2D layout (NCHW, NHWC) with depth fields set: use NCDHW or NDHWC"),
    ]
    for i, f in enumerate(family.problems.FIELDS):
        if f in cf.enums or f in cf.flags:
            continue
        lo = _field_min(family, f)
        errs.append((f"FIELD_{f}", -100 - i, f"invalid problem field {f}: must be >= {lo}"))
        errs.append((f"FIELD_LARGE_{f}", -200 - i, f"invalid problem field {f}: must be <= {FIELD_MAX}"))
    return errs


def _field_min(family: Any, f: str) -> int:
    return family.problems.FIELD_MIN[f]


# ---------------------------------------------------------------- package
def export_bundle(model_dir: str | Path, output: str | Path, name: str | None = None,
                  sim_params: Mapping[str, Any] | None = None, overwrite: bool = False,
                  applicability: str | None = None, listed: Mapping[str, Any] | None = None,
                  screen: bool = True, available: Any = None) -> ExportResult:
    """Write the C package of a model bundle into ``output``: a new or empty folder, or one holding
    an earlier export of the same model and name (anything else is refused unless ``overwrite``).
    ``applicability`` and ``listed`` replace the bundle's ``op.applicability`` / ``op.listed``, as
    ``Selector.load`` takes them (MIOpen: which solvers are ranked per problem); ``screen=False``:
    the whole model scores every candidate, where the bundle has a screen."""
    from ckheur.families.tile_features import coverage_occupancy
    from ckheur.learn.bundle import SCREEN_OFFSET, load_bundle, margin_of, remembered_bar, screen_of, spec_engine
    from ckheur.families import C_SOURCES, FAMILIES
    from ckheur.sim import CASCADE_THRESHOLD, CASCADE_TOP, load_params

    b = load_bundle(model_dir)
    spec = b.spec
    if spec["engine"] not in FAMILIES or FAMILIES[spec["engine"]].c_export is None:
        hint = ("retrain it with the family's own features (without the +kinds candidate in train.compare)"
                if spec["engine"].startswith("miopen") else
                "a bundle on CK's features exports to CK's dispatcher format (export.format=ck)")
        raise ExportError(f"{b.path}: its {spec['engine']} features have no C implementation; {hint}")
    family = b.family
    cf = c_family(family)
    # A model across GPUs (features.hardware) takes its arch's descriptors: constants of the bundle's
    # arch, so kernel-only columns whose values the engine computes here, like the kernels' own.
    engine = spec_engine(spec)
    arch, direction, dtype = spec["arch"], spec["op"]["direction"], spec["op"]["dtype"]
    op_cfg = dict(spec.get("op_config") or spec["op"])
    if applicability is not None:
        op_cfg["applicability"] = applicability
    if listed is not None:
        op_cfg["listed"] = dict(listed)
    if available is not None:
        op_cfg["available"] = available
    kernels, answers = b.kernels, b.answers or {}
    if not kernels:
        raise ExportError(f"{b.path}: the bundle has no kernels")
    shipped = getattr(family.kernels, "available_of", lambda op: None)({**op_cfg, "direction": direction})
    if shipped is not None:  # MIOpen's op.available: only the solvers the user's MIOpen ships, as Python ranks
        kernels = [k for k in kernels if k.name in shipped]
        if not kernels:
            raise ExportError(f"{b.path}: op.available keeps none of its {len(b.kernels)} solvers")
        answers = {key: name for key, name in answers.items() if name in shipped}
        op_cfg["available"] = sorted(shipped)
    kernel_dtypes = {getattr(k, "dtype", dtype) for k in kernels}  # solvers serve the op's dtype
    if kernel_dtypes != {dtype}:
        raise ExportError(f"{b.path}: kernels of dtypes {sorted(kernel_dtypes)}, model dtype {dtype}")
    # Which kernels are ranked per problem beyond their group (MIOpen: op.applicability), as Python ranks them.
    support_defines, support_tables, ranked = cf.support(kernels, {**op_cfg, "direction": direction, "dtype": dtype}) \
        if cf.support else ({}, "", None)
    name = c_identifier(name or b.path.name)
    if name in RESERVED_NAMES:
        raise ExportError(f"export.name={name}: the package's own {name} files have that name; choose another")
    if len(name) > MAX_NAME:
        raise ExportError(f"export.name: {len(name)} characters ({name[:40]}...); at most {MAX_NAME}")
    out = Path(output)
    check_output(out, name, b.path, overwrite)
    prefix = f"ckheur_{name}"
    names = list(spec["feature_names"])
    classes = _classify(engine, names)
    analytic = {**spec["analytic_params"], "dtype": dtype} if spec.get("analytic") else None
    prior = spec.get("prior")
    if prior is not None and not family.analytic:
        raise ExportError(f"the bundle has an analytic prior but the {family.name} family has no analytic model")

    # Kernel-only feature values, computed by the Python engine itself.
    probes = _probe_problems(family, kernels)
    kfeat = engine.kernel_arrays(kernels)
    X = engine.features(engine.problem_arrays(probes, direction), kfeat, arch, direction, analytic)
    _check_classes(X, len(probes), len(kernels), classes, names)
    X = X.reshape(len(probes), len(kernels), -1)[0]
    slot, counters = [], {"P": 0, "K": 0, "I": 0}
    for c in classes:
        slot.append(counters[c])
        counters[c] += 1
    kcols = [j for j, c in enumerate(classes) if c == "K"]
    kernel_values = X[:, kcols] if kcols else np.zeros((len(kernels), 1), dtype=np.float32)

    template = "\n".join((C_SOURCES / f).read_text() for f in cf.sources)
    for macro, cls in (("SETP", "P"), ("SETI", "I")):
        missing = [n for n, c in zip(names, classes) if c == cls and n not in _template_names(template, macro)]
        if missing:
            raise ExportError(f"the C feature code of {family.name} does not compute {', '.join(missing)} "
                              f"(ckheur/families/{cf.sources[-1]})")

    forest = read_forest(b.booster)
    companion = read_forest(b.tflops_booster) if b.tflops_booster is not None else None
    trees_total = forest.ntree + (companion.ntree if companion else 0)
    use_kmask = len(kernels) * trees_total <= KMASK_MAX_ENTRIES
    max_leaves = max(forest.max_leaves, companion.max_leaves if companion else 1)
    kmask_type = "uint16_t" if max_leaves <= 16 else "uint32_t" if max_leaves <= 32 else "uint64_t"

    groups: dict[Any, int] = {}
    for k in kernels:
        groups[k.group] = groups.get(k.group, 0) + 1
    max_cand = max(min(n, max(CASCADE_THRESHOLD, CASCADE_TOP)) if n > CASCADE_THRESHOLD else n
                   for n in groups.values())
    cascade = any(n > CASCADE_THRESHOLD for n in groups.values())
    sim_params = {**(sim_params or load_params()), "dtype": dtype}

    group_names = getattr(family.problems, cf.group_enum) if cf.group_enum else None

    def group_code(g: Any) -> int:  # conv: ndim; GEMM: layout index; every kernel a candidate: 0
        return group_names.index(g) if group_names else 0 if g == "all" else int(g)

    occupancy = coverage_occupancy(kfeat, arch) if cf.tiles else np.zeros(len(kernels))
    kern_rows = []
    for k, occ in zip(kernels, occupancy):
        tile = [getattr(k, f"tile_{d}", 1) for d in "mnk"]
        kern_rows.append("{" + ", ".join([*map(_hex, tile), _hex(occ)]) + ", "
                         + ", ".join(str(int(v)) for v in (group_code(k.group), getattr(k, "pad_m", 0),
                                                           getattr(k, "pad_n", 0), getattr(k, "pad_k", 0))) + "}")
    # The latency model's tables per parameter set; the prior reads the features' simulator pass
    # when its parameters give the same tables (one pass per query instead of two).
    sims = {tag: _sim_c(tag, kernels, arch, params) for tag, params in (
        ("cascade", sim_params if cascade else None), ("feature", analytic), ("prior", prior and prior["params"]))
        if params is not None}
    prior_from_features = "prior" in sims and sims["prior"] == sims.get("feature", "").replace("_feature", "_prior")
    if prior_from_features:
        del sims["prior"]
    errors = _errors(family)
    remember_log, remember_bar = remembered_bar(spec["objective"], margin_of(op_cfg))
    screened = screen_of(spec) if screen else None
    fields = list(family.problems.FIELDS)
    numeric_fields = [f for f in fields if f not in cf.enums and f not in cf.flags]
    defines = {
        "CKH_PREFIX": prefix, "CKH_NKERN": len(kernels), "CKH_NTREE": max(forest.ntree, 1),
        "CKH_NTREE2": companion.ntree if companion else 0, "CKH_NPS": counters["P"], "CKH_NIS": counters["I"],
        "CKH_NKS": counters["K"], "CKH_CHUNK": CHUNK, "CKH_MAX_CAND": max_cand,
        "CKH_ANALYTIC_FEATURES": int(analytic is not None),
        "CKH_PRIOR": int(prior is not None), "CKH_PRIOR_SCALE": _hex(float(prior["scale"]) if prior else 0.0),
        "CKH_PRIOR_LOG": int(spec["objective"] == "regression_log"),
        "CKH_PRIOR_FROM_FEATURES": int(prior_from_features),
        "CKH_CASCADE_THRESHOLD": CASCADE_THRESHOLD, "CKH_CASCADE_TOP": CASCADE_TOP if cascade else 0,
        "CKH_RELATIVE_TFLOPS": int(spec["objective"] == "relative" and companion is not None),
        "CKH_BWD_WEIGHT": int(direction == "bwd_weight"), "CKH_DIRECTION": DIRECTION_CODES[direction],
        "CKH_DTYPE": DTYPE_CODES[dtype], "CKH_DTYPE_BYTES": _hex(float(DTYPE_BYTES[dtype])),
        # the bytes per element the features assume (an engine may fix it: one model per dtype)
        "CKH_ENGINE_BYTES": _hex(float(getattr(engine, "DTYPE_BYTES", DTYPE_BYTES[dtype]))),
        "CKH_NUM_CUS": _hex(float(arch["num_cus"])), "CKH_NFIELDS": len(numeric_fields),
        "CKH_FIELD_MAX": f"INT64_C({FIELD_MAX})", "CKH_EXACT_LIMIT": f"{float(EXACT_LIMIT)!r}",
        "CKH_LATENCY_FLOOR_S": repr(LATENCY_FLOOR_MS * 1e-3),
        "CKH_MIN_CONTIGUOUS": int(op_cfg.get("min_contiguous_elems", 2)),
        "CKH_E_FIELD": -100, "CKH_E_FIELD_LARGE": -200, "CKH_KMASK_T": kmask_type,
        "CKH_MASK_T": "uint32_t" if max_leaves <= 32 else "uint64_t",
        "CKH_ANSWERS": len(answers), "CKH_KEY_FIELDS": len(fields),
        # a remembered answer stays first unless the model's pick beats it by the bundle's margin
        "CKH_REMEMBER_LOG": int(remember_log), "CKH_REMEMBER_BAR": _hex(remember_bar),
        # the screen: the first trees score every candidate, the whole model the best CKH_SCREEN_TOP
        "CKH_SCREEN_TREES": screened[0] if screened else 0, "CKH_SCREEN_TOP": screened[1] if screened else 0,
        "CKH_SCREEN_OFFSET": repr(SCREEN_OFFSET),
        "CKH_TILES": int(cf.tiles),  # the family's kernels are tiles (the coverage code is compiled)
        "CKH_ALLOWED": 0,  # 1: the family's code keeps a per-problem set of the kernels it ranks
        **support_defines,
    }
    for macro, code, _ in errors:
        if not macro.startswith("FIELD"):
            defines[f"CKH_E_{macro}"] = code
    lines = [f"#define {k} {v}" for k, v in defines.items()]
    lines.append(f"typedef {cf.struct} ckh_problem_t;")
    # Feature slots of the family code: the model's slot, or -1 where the model does not use it.
    for macro, cls in (("SETP", "P"), ("SETI", "I")):
        used = {n: slot[j] for j, n in enumerate(names) if classes[j] == cls}
        for n in sorted(_template_names(template, macro)):
            lines.append(f"#define {cls}_{n} {used.get(n, -1)}")
    config = "\n".join(lines) + "\n"
    tables = ""
    # The C API returns kernel names: each written from the validated traits, of C-safe characters only.
    tables += f"static const char* const ckh_kernel_names[] = {{\n{_rows([_c_name(k.name) for k in kernels], 1)}\n}};\n"
    tables += f"static const ckh_kernel ckh_kernels[] = {{\n{_rows(kern_rows, 1)}\n}};\n"
    if group_names:  # the C code names groups (GEMM: its layouts)
        tables += f"static const char* const ckh_{cf.group_enum.lower()}[] = {c_strings(group_names)};\n"
    tables += ("static const int64_t ckh_field_min[] = {"
               + ", ".join(str(_field_min(family, f)) for f in numeric_fields) + "};\n")
    tables += ("static const struct { int code; const char* message; } ckh_errors[] = {\n"
               + _rows([f"{{{c}, {json.dumps(m)}}}" for _, c, m in errors], 1) + "\n};\n")
    if use_kmask or not kcols:
        tables += "static float ckh_kernel_feature(int k, int slot) { (void)k; (void)slot; return 0.0f; }\n"
    else:
        # As LightGBM reads them: values within 1e-35 of zero are zero (the runtime tests them as is).
        clean = np.where(np.abs(kernel_values) <= np.float32(1e-35), np.float32(0), kernel_values)
        krows = ["{" + ", ".join(_hexf(v) for v in row) + "}" for row in clean]
        tables += (f"static const float ckh_kfeat[][{len(kcols)}] = {{\n{_rows(krows, 1)}\n}};\n"
                   "static float ckh_kernel_feature(int k, int slot) { return ckh_kfeat[k][slot]; }\n")
    tables += support_tables
    tables += "".join(sims.values())
    if answers:
        tables += _answers_c(answers, kernels, fields, cf.enums)
    tables += _forest_c("main", forest, classes, slot, kernel_values, use_kmask, kmask_type)
    if companion:
        tables += _forest_c("tflops", companion, classes, slot, kernel_values, use_kmask, kmask_type)
    runtime = (C_DIR / "runtime.c").read_text()
    source = (f"/* {prefix}: generated by ckheur from {comment_text(b.path.name)}; do not edit. */\n"
              f"#include \"{name}.h\"\n" + runtime.replace("/*@CONFIG@*/", config).replace("/*@TABLES@*/", tables).replace("/*@FAMILY@*/", template))

    make_folder(out, "export.output")
    kind = b.manifest.get("data_kind", "unknown")
    info = {"name": name, "prefix": prefix, "family": family.name, "direction": direction, "dtype": dtype,
            "struct": cf.struct, "enums": {f: list(v) for f, v in cf.enums.items()},
            "arch": arch["name"], "objective": spec["objective"], "data_kind": kind, "bundle": str(b.path),
            "kernels": len(kernels), "kernel_names": [k.name for k in kernels],  # checked: Selector.load compares
            "trees": forest.ntree, "companion_trees": companion.ntree if companion else 0,
            "cascade": cascade, "screen": list(screened) if screened else None,
            "analytic_features": analytic is not None, "prior": prior is not None,
            "remembered_problems": len(answers), "ranked": ranked,
            "fields": fields, "direction_field": "direction" in dict(cf.ctype._fields_),
            "example": family.problems.generate(0, 1)[0].to_dict(),
            "defaults": {f: family.problems.DEFAULTS.get(f) for f in fields}}
    files = {
        f"{name}.c": source,
        f"{name}.h": header_h(info, errors),
        "ckheur_abi.h": ABI_H.read_text(),
        "ckheur_select.c": cli_c(info),
        "CMakeLists.txt": cmake_lists(name),
        "README.md": readme_md(info),
        "export.json": json.dumps(info, indent=2) + "\n",
    }
    written = []
    for fname, text in files.items():
        write_file(out / fname, text)
        written.append(out / fname)
    notes = [] if kind == "real" else [f"the model was trained on {kind} data"]
    return ExportResult(out, name, written, family.name, len(kernels), trees_total, use_kmask, notes)


