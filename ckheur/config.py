"""Dataclass schemas for every config group, registered with Hydra's ConfigStore.

Each YAML option starts with ``defaults: [/schema/<group>@_here_: <name>, _self_]`` so a
typo in a key or a value of the wrong type fails at composition, naming the key.
Enum fields make OmegaConf reject unknown values with the list of allowed ones.
"""

from __future__ import annotations

import copy
import functools
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional

from omegaconf import MISSING, OmegaConf

CONF_DIR = Path(__file__).resolve().parent / "conf"
if not CONF_DIR.is_dir():  # source checkout: conf/ sits at the repository root
    CONF_DIR = Path(__file__).resolve().parent.parent / "conf"


def plain(node: Any) -> Any:
    """A config node as plain Python containers (enums as strings, interpolations resolved)."""
    return OmegaConf.to_container(node, resolve=True, enum_to_str=True)


def known_archs() -> list[str]:
    """The names of the shipped arch configs (``conf/arch/*.yaml``), sorted."""
    return sorted(p.stem for p in (CONF_DIR / "arch").glob("*.yaml"))


def load_arch(name: str) -> dict:
    """A shipped arch config (``conf/arch/<name>.yaml``) checked against its schema, as a plain dict."""
    from ckheur.errors import UserError

    known = known_archs()
    if name not in known:
        raise UserError(f"arch {name!r}: no conf/arch/{name}.yaml; known archs: {', '.join(known)} (an arch config "
                        "of your own, through hydra.searchpath, is read only as the job's arch=)")
    st = (CONF_DIR / "arch" / f"{name}.yaml").stat()
    return copy.deepcopy(_checked_arch(name, st.st_mtime_ns, st.st_size))


@functools.lru_cache(maxsize=32)
def _checked_arch(name: str, mtime_ns: int, size: int) -> dict:
    """An arch config checked against its schema once per version of its file (~25 ms each)."""
    return plain(OmegaConf.merge(OmegaConf.structured(ArchSchema), load_option(f"arch/{name}")))


def resolve_device(arch: Mapping[str, Any], num_cus: int | None = None) -> dict:
    """The arch config of one device: the arch's own figures, or those of its ``devices`` entry
    whose num_cus is ``num_cus`` (default the config's num_cus, so ``arch.num_cus=64`` on gfx906
    is MI60), without the devices list. A CU count no entry names keeps the arch's figures with
    that count, and the arch's name for its product (a 61-CU gfx906 is no MI50). UserError names a
    figure that is not positive."""
    out = {k: v for k, v in arch.items() if k != "devices"}
    cus = int(out["num_cus"] if num_cus is None else num_cus)
    for dev in arch.get("devices") or []:
        if int(dev.get("num_cus", -1)) == cus:
            out.update({k: v for k, v in dict(dev).items()})
    out["num_cus"] = cus
    if cus not in _named_counts(arch):
        out["product"] = out["name"]
    _check_figures(out)
    return out


def _named_counts(arch: Mapping[str, Any]) -> set[int]:
    """The CU counts an arch's config names a product for: its own and its ``devices`` entries'. For
    a shipped arch, its file's (an ``arch.num_cus=`` override replaces the config's own count)."""
    base = load_arch(str(arch["name"])) if str(arch["name"]) in known_archs() else arch
    return {int(base["num_cus"]), *(int(d.get("num_cus", -1)) for d in base.get("devices") or [])}


# The figures a device's config must give as positive numbers (descriptors take their logarithms,
# the simulator divides by them); l3_bytes may be 0.
POSITIVE_FIGURES = ("num_cus", "simds_per_cu", "shader_engines", "max_clock_mhz", "max_waves_per_cu", "wavefront_size",
                    "lds_bytes", "l1_bytes", "l2_bytes", "num_xcds", "hbm_bandwidth_gbps")


def _check_figures(arch: Mapping[str, Any]) -> None:
    """UserError naming the first figure of a device's config that is not a positive number."""
    from ckheur.errors import UserError

    figures = [(k, arch[k], False) for k in POSITIVE_FIGURES if k in arch]
    figures += [(f"peak_tflops.{k}", v, False) for k, v in dict(arch.get("peak_tflops") or {}).items()]
    figures += [("l3_bytes", arch["l3_bytes"], True)] if "l3_bytes" in arch else []
    for key, value, zero in figures:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not number or value < 0 or (value == 0 and not zero):
            raise UserError(f"arch.{key}={value}: must be a {'non-negative' if zero else 'positive'} number "
                            f"(arch {arch.get('name')})")


def find_db_device(arch: Mapping[str, Any], cus: int) -> dict | None:
    """The device of an arch config that a find-db name's CU count ``cus`` names (the arch's own,
    counted as MIOpen does where ``find_db_cus`` says so, or a ``devices`` entry); None for another count."""
    if cus == arch.get("find_db_cus") or cus == arch["num_cus"]:
        return resolve_device(arch, int(arch["num_cus"]))
    if any(int(d.get("num_cus", -1)) == cus for d in arch.get("devices") or []):
        return resolve_device(arch, cus)
    return None


def find_db_name_device(name: str, known: Any) -> tuple[str, int] | None:
    """(arch, CU count) a MIOpen find-db file name says (``gfx942130``: gfx942, 0x130 = 304 CUs;
    ``gfx906_60``: gfx906, 60), or None when it is not such a name of an arch of ``known``."""
    import re

    for arch in sorted(known, key=len, reverse=True):  # system (.fdb.txt) or user (.<MIOpen version>.ufdb.txt)
        m = re.match(rf"^{re.escape(arch)}(?:_([0-9]+)|([0-9a-f]+))\.HIP\.(?:[^/]*\.u)?fdb\.txt(?:\.bz2|\.gz)?$", name)
        if m:
            return arch, int(m.group(1)) if m.group(1) else int(m.group(2), 16)
    return None


def load_option(option: str) -> dict:
    """A shipped config option as a plain dict, e.g. ``load_option("arch/gfx950")``.

    The file alone: its defaults list is dropped and interpolations are left as written; use
    Hydra's compose for a composed job config.
    """
    return load_yaml(CONF_DIR / f"{option}.yaml")


def load_yaml(path: str | Path) -> dict:
    """A YAML file of ckheur's (a config option, a MIOpen solver table) as a plain dict without its
    defaults list, parsed once per version of the file; each caller gets its own copy."""
    import copy

    st = Path(path).stat()
    return copy.deepcopy(_parsed_option(str(path), st.st_mtime_ns, st.st_size))


@functools.lru_cache(maxsize=64)
def _parsed_option(path: str, mtime_ns: int, size: int) -> dict:
    """A YAML file parsed once per version (its path, modification time and size): the MIOpen
    solver tables are read for every problem, and parsing their YAML is most of that. Parsed by
    libyaml with OmegaConf's rules (``parsed_yaml``: the three solver tables ~0.2 s, not ~0.5 s), else
    by OmegaConf's own reader."""
    obj = _parsed_yaml(path)
    if isinstance(obj, dict) and _plain(obj):  # what OmegaConf's config of it gives back, as it is
        node = obj
    else:
        node = OmegaConf.to_container(read_config(path))
    node.pop("defaults", None)
    return node


def _parsed_yaml(path: str | Path) -> Any:
    """A YAML file read with libyaml on OmegaConf's rules (``parsed_yaml``); None where it cannot."""
    from ckheur.yaml_rules import parsed_yaml

    try:
        return parsed_yaml(Path(path).read_text(encoding="utf-8"))
    except UnicodeDecodeError:  # OmegaConf's reader says so
        return None


def read_config(path: str | Path) -> Any:
    """``OmegaConf.load(path)``, the file parsed by libyaml where it can (the same config, several
    times faster); what it cannot read is OmegaConf's own to read and report."""
    obj = _parsed_yaml(path)
    return OmegaConf.create(obj) if isinstance(obj, (dict, list)) else OmegaConf.load(path)


def _plain(obj: Any) -> bool:
    """Whether a parsed YAML object is one OmegaConf takes as it is: dicts with text keys, lists,
    and text without interpolations (``${``, which OmegaConf parses), numbers, booleans or null;
    ``OmegaConf.to_container(OmegaConf.create(obj))`` then equals it."""
    if isinstance(obj, dict):
        return all(type(k) is str and _plain(v) for k, v in obj.items())
    if isinstance(obj, list):
        return all(map(_plain, obj))
    if isinstance(obj, str):
        return "${" not in obj
    return obj is None or type(obj) in (int, float, bool)


class _Choice(Enum):
    """Enum whose str() is its value, so ``${op.dtype}`` interpolates as ``bf16``."""

    def __str__(self) -> str:
        return str(self.value)


class Direction(_Choice):
    fwd = "fwd"
    bwd_data = "bwd_data"
    bwd_weight = "bwd_weight"


class DType(_Choice):
    fp16 = "fp16"
    bf16 = "bf16"
    fp8 = "fp8"
    fp32 = "fp32"


class Applicability(_Choice):
    none = "none"
    rules = "rules"
    listed = "listed"
    both = "both"


class Pipeline(_Choice):
    mem = "mem"
    compv3 = "compv3"
    compv4 = "compv4"
    compv5 = "compv5"
    compv6 = "compv6"
    comp_async = "comp_async"


class Scheduler(_Choice):
    intrawave = "intrawave"
    interwave = "interwave"


class Epilogue(_Choice):
    default = "default"
    cshuffle = "cshuffle"


class Layout(_Choice):
    rcr = "rcr"
    rrr = "rrr"
    crr = "crr"
    ccr = "ccr"


class TileSpace(_Choice):
    production = "production"  # the op's curated tile list (CK's production set)
    generated = "generated"  # cartesian product of generated_tiles, for exploration


class Objective(_Choice):
    regression_log = "regression_log"  # log1p(TFLOPS) regression (CK's method)
    relative = "relative"  # TFLOPS / best TFLOPS of the problem, regression
    lambdarank = "lambdarank"  # rank each problem's kernels


class SourceKind(_Choice):
    inline = "inline"
    generate = "generate"
    driver_lines = "driver_lines"  # a text file of MIOpenDriver command lines (convolutions)
    csv = "csv"
    dataset = "dataset"  # the problems of a dataset folder, Parquet file or CK CSV
    set = "set"
    miopen_log = "miopen_log"  # the convolution commands of a log written with MIOPEN_ENABLE_LOGGING_CMD=1
    onnx = "onnx"  # the Conv / ConvTranspose nodes of an ONNX model (the onnx extra)
    torch = "torch"  # the convolutions a PyTorch module's forward pass runs (the torch extra)


class SweepStrategy(_Choice):
    full = "full"  # every legal kernel on every problem of the set
    active = "active"  # rounds chosen by a model ensemble's uncertainty and distance
    random = "random"  # problems drawn at random (a baseline at the same budget)
    stratified = "stratified"  # problems drawn evenly over shape clusters (a baseline)


class ProgressMode(_Choice):
    auto = "auto"  # a bar on a terminal or in a notebook, log lines otherwise
    bar = "bar"
    log = "log"  # a line every log_every_s seconds (CI logs, cluster job files)
    none = "none"


class Acquisition(_Choice):
    combined = "combined"  # predicted regret and distance from measured shapes, normalized and summed
    regret = "regret"  # the ensemble's expected loss of its consensus pick
    disagreement = "disagreement"  # share of ensemble members whose top-1 differs from the consensus
    distance = "distance"  # distance from measured shapes in log problem space (no model)


class Prior(_Choice):
    none = "none"  # the trees alone
    analytic = "analytic"  # start from the simulator's ranking; the trees learn corrections (models.prior)


class SelectBy(_Choice):
    cluster_cv = "cluster_cv"  # seed-averaged leave-cluster-out CV (how models fare on new workloads)
    grouped_cv = "grouped_cv"  # seed-averaged grouped CV (neighbours of the training shapes)


class SimCalibration(_Choice):
    fold = "fold"  # each CV fold calibrates the simulator on its training problems: honest, choosable
    shipped = "shipped"  # CV uses conf/backend/sim.yaml's params; on their calibration data: marked leaky, never chosen


class PartialTarget(_Choice):
    naive = "naive"  # relative to the best measured kernel, as if it were the oracle (chosen on real data)
    pairwise = "pairwise"  # only score differences among measured kernels; no level (loses on real data)
    drop = "drop"  # train on fully measured problems only


# ---------------------------------------------------------------- arch
@dataclass
class ArchCodegenSchema:
    """Code-generation constraints of an architecture."""

    wave_layouts: List[List[int]] = MISSING  # allowed [wave_m, wave_n, wave_k]
    warp_tiles: Dict[str, List[List[int]]] = MISSING  # dtype -> allowed [m, n, k] MFMA warp tiles
    lds_budget_fraction: Dict[str, float] = field(default_factory=dict)  # pipeline -> fraction of LDS
    default_lds_budget_fraction: float = 1.0
    intrawave_only_pipelines: List[str] = field(default_factory=list)
    max_waves_per_block: int = 16


@dataclass
class ArchSchema:
    """Hardware profile of one GPU architecture (single source of truth)."""

    name: str = MISSING
    product: str = MISSING
    num_cus: int = MISSING
    simds_per_cu: int = 4
    shader_engines: int = MISSING
    max_clock_mhz: int = MISSING
    max_waves_per_cu: int = 32
    wavefront_size: int = 64
    lds_bytes: int = MISSING
    l1_bytes: int = MISSING
    l2_bytes: int = MISSING
    l3_bytes: int = 0
    num_xcds: int = 1
    peak_tflops: Dict[str, float] = MISSING  # dense matrix peak per dtype
    hbm_bandwidth_gbps: float = MISSING
    matrix_cores: bool = True  # MFMA units (CDNA); GCN5 and RDNA2 have none: their peaks are the vector ALUs'
    find_db_cus: Optional[int] = None  # the CU count MIOpen's find-db names carry, where it counts otherwise
    # Other devices of the arch (another CU count: MI60 beside MI50): each entry's num_cus names it and
    # its figures replace the arch's (resolve_device); arch=<name> arch.num_cus=<n> picks one.
    devices: List[Dict[str, Any]] = field(default_factory=list)
    codegen: ArchCodegenSchema = field(default_factory=ArchCodegenSchema)


# ---------------------------------------------------------------- op
# ---------------------------------------------------------------- problems
@dataclass
class ProblemSourceSchema:
    """One source of problems; which fields matter depends on ``kind``."""

    kind: SourceKind = MISSING
    family: str = "grouped_conv"  # operator family of these problems (grouped_conv, gemm, miopen)
    problems: List[Dict[str, Any]] = field(default_factory=list)  # inline
    path: Optional[str] = None  # miopen / csv: absolute, or relative to conf/ then the cwd
    name: Optional[str] = None  # set: another shipped problem set
    batch: List[int] = field(default_factory=list)  # one copy per batch size (conv: N; GEMM: M, tokens)
    # generate:
    seed: int = 0
    count: int = 0
    ndim: int = 2
    shapes: Dict[str, float] = field(default_factory=dict)  # shape kind -> sampling weight (generate)
    max_gflop: float = 20000.0
    # miopen_log / onnx / torch (repeats are the layer's weight; the op's direction picks what runs in it):
    dtype: Optional[DType] = None  # miopen_log: take lines of this dtype (default the op's); onnx/torch: rank as this
    training: bool = False  # onnx / torch: every layer in every direction (a training step), not inference only
    module: Optional[str] = None  # torch: package.module:attribute, an nn.Module or a callable returning one
    input_shape: List[int] = field(default_factory=list)  # torch: the input's shape (N, C, spatial...)


@dataclass
class ShardSchema:
    index: int = 0
    count: int = 1
    seed: Optional[int] = None  # None: every count-th problem; a seed: a seeded hash of the problem


@dataclass
class DataShardSchema:
    """Keep the problems of one part of a seeded hash split (the same split as problems.shard with that seed)."""

    index: int = 0
    count: int = 1  # 1: every problem
    seed: int = 0


@dataclass
class ProblemSetSchema:
    name: str = MISSING
    description: str = ""
    sources: List[ProblemSourceSchema] = MISSING
    exclude: List[str] = field(default_factory=list)  # shipped sets whose problems are removed
    dedupe: bool = True
    shard: ShardSchema = field(default_factory=ShardSchema)


# ---------------------------------------------------------------- stages, paths, kernels
@dataclass
class StageSchema:
    name: str = MISSING  # which stage runs; its options live in the top-level node of that name


@dataclass
class ListSchema:
    count_only: bool = False
    max_rows: int = 40  # rows printed per table; -1 prints all


@dataclass
class ActiveSchema:
    """Rounds of an active (or random / stratified) sweep; budgets are fractions of sweep.budget."""

    first_round: float = 0.25  # share of the budget for the seeded, diverse first round
    round_size: float = 0.125  # share of the budget per later round
    acquisition: Acquisition = Acquisition.combined
    ensemble: int = 5  # bootstrap models (over measured problems) whose disagreement is the uncertainty
    trees: int = 100  # trees per ensemble model
    ensemble_model: str = "relative"  # conf/model option whose tree settings the members use (never a prior)
    # Kernels timed per chosen problem: the ensemble's `top` best plus `explore` drawn at random from
    # the rest (null: floor(sqrt(n)) and half that rounded up, n = the kernels that can run it). On
    # the real data this beats timing every kernel of fewer shapes; all_kernels_max > 0 times every
    # kernel of problems with at most that many. Once every problem is measured, active rounds time
    # the (problem, kernel) pairs with the largest expected improvement.
    top: Optional[int] = None
    explore: Optional[int] = None
    all_kernels_max: int = 0
    seed: int = 0
    # A bundle that ranks a problem's kernels before the ensemble exists, instead of the analytic
    # model; for MIOpen's solvers (no analytic model), its top and explore are timed instead of every
    # runnable solver (a new GPU's bring-up: the model across the other GPUs). served: the bundle
    # stage=predict serves the sweep's device (sweeping.rounds.served_ranker). null: none.
    ranker: Optional[str] = None


@dataclass
class SweepSchema:
    strategy: SweepStrategy = SweepStrategy.full
    budget: Optional[float] = None  # active/random/stratified: pairs (> 1) or a fraction of the pairs (<= 1)
    min_gain: float = 0.0  # stop when a round's estimated gain in mean efficiency is below this (0: spend the budget)
    active: ActiveSchema = field(default_factory=ActiveSchema)
    overwrite: bool = False  # start fresh: the old dataset folder is kept aside, never deleted
    retry_failed: bool = False  # measure again pairs whose earlier attempt did not succeed
    output: Optional[str] = None  # dataset folder; default {paths.data}/{op}_{dtype}_{arch}/{problems}.parquet
    progress: ProgressMode = ProgressMode.auto  # bar on a terminal, log lines otherwise, or none
    log_every_s: float = 10.0


@dataclass
class TuneSchema:
    top_k: int = 3  # kernels timed per problem: the model's k best
    db: Optional[str] = None  # a folder or database URL; default db.url (an existing {paths.tuning}/{op slug} folder)
    model_dir: Optional[str] = None  # default: as stage=predict (real model, else simulated, else analytic)
    progress: ProgressMode = ProgressMode.auto  # bar on a terminal, log lines otherwise, or none
    log_every_s: float = 10.0
    claim_poll_s: float = 0.5  # when every open problem is claimed by another run: how often to look again


class ExportFormat(_Choice):
    c = "c"  # a dependency-free C99 package (library, CLI, CMake)
    ck = "ck"  # CK's dispatcher model folder (bundles trained with features.engine=ck)
    miopen_find_db = "miopen_find_db"  # the tuning database's measurements into a MIOpen user find-db (op=miopen/...)
    dataset = "dataset"  # a campaign of a database tuning database as a dataset folder (Parquet)


@dataclass
class ExportSchema:
    format: ExportFormat = ExportFormat.c
    # c: exports/{op.model_name}; ck: exports/ck/grouped_conv_{direction}_{dtype}_{arch}; miopen_find_db: required,
    # the user find-db file <arch><CUs>.HIP.<MIOpen version>.ufdb.txt; dataset: required, a new or empty folder
    output: Optional[str] = None
    model_dir: Optional[str] = None  # default: as stage=predict (the op's shipped bundle, else a simulated one)
    name: Optional[str] = None  # C name of the model (functions ckheur_<name>_*); default: the bundle's folder name
    build: bool = True  # with a C compiler: build ckheur_select and check it against the Python selector
    check_problems: int = 1000  # seeded random problems of the check
    seed: int = 0
    overwrite: bool = False  # write into a folder holding anything but an earlier export of the same model
    tuning_db: Optional[str] = None  # miopen_find_db, dataset: the tuning database; default as stage=tune's
    merge: bool = False  # miopen_find_db: merge into an existing user find-db (its old text is kept as a .bak)


@dataclass
class ImportSchema:
    # a CK tile_engine CSV or a MIOpen find-db (<arch><CUs>.HIP.fdb.txt[.bz2]); or a dataset folder (a Parquet
    # tuning database, a sweep's output), loaded into the database tuning_db
    path: Optional[str] = None
    dataset: Optional[str] = None  # dataset name; default: the file name up to its first dot
    arch: Optional[str] = None  # find-db: the arch, when the file name does not say it
    overwrite: bool = False  # replace an earlier import of another file of the same name (kept aside)
    tuning_db: Optional[str] = None  # a dataset folder's database URL; default db.url


# ---------------------------------------------------------------- backends
@dataclass
class SimBackendSchema:
    name: str = "sim"
    seed: int = 0
    batch_pairs: int = 20000
    calibration_sha256: List[str] = field(default_factory=list)
    params: Dict[str, Any] = MISSING


@dataclass
class ReplayBackendSchema:
    name: str = "replay"
    paths: List[str] = field(default_factory=list)  # datasets or CK CSVs to serve
    batch_pairs: int = 5000


@dataclass
class HipBackendSchema:
    name: str = "hip"
    # Builds one kernel's shared library; fields: {kernel}, {out} (the .so path), {arch},
    # {dtype}, {direction}, {ndim}, {tile_m}.., {pipeline}, {scheduler}, {src}.
    build_command: str = MISSING
    lib_dir: str = "build/kernels"  # cache: one <kernel>.so per kernel name
    library: Optional[str] = None  # one prebuilt library exporting every kernel (skips building)
    batch_pairs: int = 20  # kernels per worker batch
    timeout_s: float = 30.0  # per kernel; a hang is killed and recorded as timeout
    warmup: int = 5
    warmup_ms: float = 0.0  # also warm up until this much time has passed
    repeat: int = 20
    flush_l2: bool = True  # rotate input buffers between runs so L2 is cold
    check: bool = True  # compare against a reference on small problems; non-zero fraction on all
    check_max_gflop: float = 0.05
    memory: str = "hip"  # hip (device memory through hip-python) or host (tests, no GPU)


@dataclass
class CommandBackendSchema:
    name: str = "command"
    # Shell-free argv template with {problem fields}, {kernel}, {miopen} (MIOpenDriver line), ...
    template: str = MISSING
    regex: str = MISSING  # first group: the time
    workspace_regex: Optional[str] = None  # first group: the workspace bytes the run used (MIOpen find-dbs need it)
    kernel_regex: Optional[str] = None  # first group: the kernel the run says it ran; another than the asked one fails
    time_unit: str = "ms"  # ms or us or s
    timeout_s: float = 60.0
    batch_pairs: int = 20


# ---------------------------------------------------------------- learning
@dataclass
class ModelSchema:
    """LightGBM objective and hyperparameters (conf/model/*.yaml)."""

    objective: Objective = MISSING
    num_leaves: int = 15
    learning_rate: float = 0.15
    max_trees: int = 1000  # upper bound; CV early stopping chooses the count
    early_stopping_rounds: int = 50
    min_data_in_leaf: int = 10
    feature_fraction: float = 0.9
    subsample: float = 0.8  # bagging: really on, with subsample_freq
    subsample_freq: int = 1
    lambda_l2: float = 0.0
    rank_label_power: float = 8.0  # lambdarank relevance = round(30 * relative_tflops ** power)
    companion_trees: int = 100  # log-TFLOPS regressor that gives ranking models their TFLOPS estimate
    companion_leaves: int = 15  # its leaves: it only scales the ranking's TFLOPS figures, so kept small
    threads: int = 0  # LightGBM threads for training and scoring; 0: ckheur.threads' policy (usable CPUs, one for small work)
    prior: Prior = Prior.none  # analytic: the simulator's ranking as init score (families with an analytic model)
    prior_scale: float = 0.5  # weight of the prior, on the scale of the objective's label
    bagging_seeds: int = 1  # > 1: that many models of different seeds (bagging), averaged into one
    distill_trees: int = 0  # > 0: the model (a bag, a large recipe) is replaced by a student of this many trees
    distill_problems: int = 3200  # new problems, drawn from the training problems' span, the student also learns on
    distill_leaves: int = 15  # the student's leaves per tree


class FeatureSet(_Choice):
    native = "native"  # the op family's feature engine (ckheur.families.engines.<family>)
    ck = "ck"  # CK's dispatcher features (grouped convolution): a model CK's predictor runs unchanged


class ChoiceRule(_Choice):
    simpler = "simpler"  # the candidate with fewer inputs unless another wins beyond its seed spread on both CVs
    best = "best"  # the highest mean (then P10) by train.select_by


@dataclass
class FeaturesSchema:
    analytic: bool = False  # add the simulator's predicted TFLOPS as features
    engine: FeatureSet = FeatureSet.native  # ck: CK's dispatcher features (export.format=ck writes CK's model folder)
    hardware: bool = False  # train: GPU descriptors as features, on every arch in the data (one model across GPUs)


@dataclass
class DataSchema:
    paths: List[str] = field(default_factory=list)  # train: datasets / CK CSVs; default: this op's sweep
    eval_paths: List[str] = field(default_factory=list)  # evaluate: default: the sweep of evaluate.problems
    shard: DataShardSchema = field(default_factory=DataShardSchema)  # use one part of the problems
    exclude_suspect: bool = False  # leave rows with status suspect out of training and the oracle
    mix_simulated: bool = False  # train: allow simulated (backend sim) rows beside measured ones


@dataclass
class TrainSchema:
    folds: int = 5
    inner_valid_fraction: float = 0.15  # groups of the training folds held out for early stopping
    compare: List[str] = field(default_factory=list)  # candidates "objective[+analytic][+prior]"
    warm_start: Optional[str] = None  # model dir to add trees to
    warm_start_trees: int = 100
    output: Optional[str] = None  # default: {paths.models}/{model_name}; sim data: {paths.sim_models}/...
    partial: PartialTarget = PartialTarget.naive  # target for problems where only some kernels were measured
    pairwise_weight: float = 1.0  # weight of the pairwise loss against the squared error of full problems
    cluster_cv: bool = True  # also a leave-cluster-out CV (folds of clustered problems)
    shape_clusters: int = 5  # clusters in log problem space (at least train.folds); 5: leave one cluster out
    regime_cv: List[str] = field(default_factory=list)  # also hold out size regimes a third at a time: flops, output_size
    select_by: SelectBy = SelectBy.cluster_cv  # how train.compare chooses (cluster_cv falls back to grouped_cv
    # when there are fewer than 10 problems per shape cluster)
    seeds: int = 3  # seeds averaged when train.compare compares candidates
    choice: ChoiceRule = ChoiceRule.simpler  # how train.compare chooses among candidates
    sim_calibration: SimCalibration = SimCalibration.fold  # leakage guard for simulator-based candidates on the
    # simulator's own calibration data (models.fold_calibration)
    calibration_iterations: int = 2000  # search steps of each fold's calibration
    remember: bool = False  # miopen ops: keep each training problem's fastest solver, ranked first for it
    # > 0: the chosen model is cut at the fewest trees (of models.training.TREE_BUDGETS) whose grouped-CV
    # mean efficiency is within this many points of the uncut model's (selection time follows the trees)
    budget_loss_pts: float = 0.0
    # choose a screen for the trained model (ckheur.selection.screening): its first trees rank every
    # candidate, the whole model the best few, where that keeps the top-1 (selection time follows the trees)
    screen: bool = False
    # features.hardware: how much each row of the job's arch weighs against another GPU's row (a few of
    # the new GPU's measurements beside every other GPU's: the bring-up of a GPU); null: 20 there
    target_weight: Optional[float] = None
    # one model for any GPU without a bundle of its own: features.hardware over every device of the data,
    # the union of their solver tables, every row weighed alike; written to <op>_<direction>_<dtype>_gpus
    across_gpus: bool = False
    overwrite: bool = False  # replace a bundle already in the output folder (otherwise refused)


@dataclass
class EvaluateSchema:
    model_dir: Optional[str] = None  # default: the bundle train writes for this op/dtype/arch and data kind
    problems: str = "holdout"  # default evaluation set (its sweep dataset) when data.eval_paths is empty
    baseline: Optional[str] = None  # model dir: acceptance gate against it
    gate_mean_pts: float = 0.5
    gate_median_pts: float = 0.5
    gate_p10_pts: float = 2.0
    gate_max_loss_pts: float = 10.0
    plots: bool = True
    cascade: bool = True  # large pools: analytic pre-rank, model on the top 256 (false: model on all)
    top_k: List[int] = field(default_factory=list)  # hybrid: efficiency when the model's top-k are measured
    tie_tolerance: float = 0.02  # tie-aware top-1: a pick within this fraction of the oracle counts
    ck_models: List[str] = field(default_factory=list)  # CK dispatcher model folders scored beside the model
    tunanet: Optional[str] = None  # miopen ops: MIOpen's TunaNet (folder of <arch>.tn.model) scored beside the model
    # the bundle of the nearest other GPU with one (by hardware descriptors), as it is, scored beside the model:
    # what this GPU would get without a model of its own
    nearest_gpu: bool = True
    progress: ProgressMode = ProgressMode.auto  # bar on a terminal, log lines otherwise, or none
    log_every_s: float = 10.0


@dataclass
class PredictSchema:
    k: int = 5  # top-k kernels printed
    model_dir: Optional[str] = None  # default: {paths.models}/{model_name}; none: analytic fallback
    output: Optional[str] = None  # problems=<set>: CSV or JSON path; default predictions.csv in the run dir
    tuning_db: Optional[str] = None  # a tuning database: its exact hits win (the tier used is printed)
    find_db: Optional[str] = None  # miopen ops: MIOpen's find-db (<arch><CUs>.HIP.fdb.txt[.bz2]) answers next
    explain: bool = False  # one problem: every candidate with score, times, whether it applies, the deciding tier
    progress: ProgressMode = ProgressMode.auto  # bar on a terminal, log lines otherwise, or none
    log_every_s: float = 10.0


@dataclass
class ReportSchema:
    """stage=report: a network's layers, picks, MIOpen's answers and a tuning plan."""

    model_dir: Optional[str] = None  # default: as stage=predict (real model, else simulated, else analytic)
    tuning_db: Optional[str] = None  # a tuning database: its exact hits win (tier tuning_db)
    find_db: Optional[str] = None  # miopen ops: MIOpen's system find-db; its answers are MIOpen's (and a tier)
    tunanet: Optional[str] = None  # miopen ops: folder of <arch>.tn.model; MIOpen's answer where no find-db lists it
    candidates: int = 3  # plan: kernels measured per layer (the model's best)
    repeats: int = 10  # plan: runs per kernel
    overhead_s: float = 1.0  # plan: seconds per driver run besides the kernel (process start, kernel load)
    assumed_efficiency: float = 0.9  # plan: the model's mean efficiency when its bundle has no CV metrics


@dataclass
class SearchSchema:
    method: str = "de"  # de (discrete differential evolution) or random (random top-k)
    budget: int = 500  # model evaluations
    top_k: int = 5
    population: int = 24
    mutation: float = 0.6  # DE differential weight F
    crossover: float = 0.7  # DE crossover rate CR
    seed: int = 0
    model_dir: Optional[str] = None  # default: as stage=predict (real model, else simulated, else analytic)
    full_pool_max: int = 50000  # also score the whole legal pool when it is at most this large


@dataclass
class ProblemSchema:
    """A single problem for stage=predict: the op family's field names, or a MIOpenDriver line."""

    driver_line: Optional[str] = None  # problem="<MIOpenDriver line>" on the command line lands here
    M: Optional[int] = None  # GEMM fields: M, N, K, split_k, layout
    split_k: Optional[int] = None
    layout: Optional[str] = None
    N: Optional[int] = None
    C: Optional[int] = None
    K: Optional[int] = None
    G: Optional[int] = None
    Di: Optional[int] = None
    Hi: Optional[int] = None
    Wi: Optional[int] = None
    Z: Optional[int] = None
    Y: Optional[int] = None
    X: Optional[int] = None
    stride_d: Optional[int] = None
    stride_h: Optional[int] = None
    stride_w: Optional[int] = None
    pad_d: Optional[int] = None
    pad_h: Optional[int] = None
    pad_w: Optional[int] = None
    dilation_d: Optional[int] = None
    dilation_h: Optional[int] = None
    dilation_w: Optional[int] = None


@dataclass
class PathsSchema:
    data: str = "data"
    models: str = "models"  # models trained on real measurements (the shipped ones are here)
    sim_models: str = "outputs/sim_models"  # models trained on simulated data (never in models/)
    tuning: str = "tuning"  # tuning databases written by stage=tune


@dataclass
class DatabaseSchema:
    """conf/db: the database behind tuning databases (``ckheur.data.database``)."""

    url: str = MISSING  # sqlite:///<path>.db or postgresql://<user>@<host>:<port>/<database> (no password)
    lease_s: float = 60.0  # a claimed job is held this long, renewed while measuring; then it returns to the queue
    max_attempts: int = 3  # claims of a job before it is given up (its last error kept)


@dataclass
class KernelsSchema:
    filter: Optional[str] = None  # e.g. "tile_n >= 128 and pipeline == 'compv5'"
    explain: bool = False  # print rejected trait combinations with the reason


@dataclass
class Config:
    """Top level: the group nodes are validated by their own schemas."""

    stage: Any = MISSING
    arch: Any = MISSING
    op: Any = MISSING
    problems: Any = MISSING
    backend: Any = MISSING
    model: Any = MISSING
    paths: Any = MISSING
    db: Any = MISSING
    kernels: KernelsSchema = field(default_factory=KernelsSchema)
    list: ListSchema = field(default_factory=ListSchema)
    sweep: SweepSchema = field(default_factory=SweepSchema)
    tune: TuneSchema = field(default_factory=TuneSchema)
    export: ExportSchema = field(default_factory=ExportSchema)
    features: FeaturesSchema = field(default_factory=FeaturesSchema)
    data: DataSchema = field(default_factory=DataSchema)
    train: TrainSchema = field(default_factory=TrainSchema)
    evaluate: EvaluateSchema = field(default_factory=EvaluateSchema)
    predict: PredictSchema = field(default_factory=PredictSchema)
    report: ReportSchema = field(default_factory=ReportSchema)
    search: SearchSchema = field(default_factory=SearchSchema)
    problem: ProblemSchema = field(default_factory=ProblemSchema)
    seed: int = 0


# `import` is a Python keyword: that node is added by name, without the generated __init__,
# __repr__ and __eq__ (OmegaConf reads only the fields).
Config = dataclass(init=False, repr=False, eq=False)(type("Config", (Config,), {"__annotations__": {"import": ImportSchema},
                                                                                     "import": field(default_factory=ImportSchema)}))


SCHEMAS = {
    "arch": {"arch": ArchSchema},
    "problems": {"problems": ProblemSetSchema},
    "stage": {"stage": StageSchema},
    "backend": {"sim": SimBackendSchema, "replay": ReplayBackendSchema, "hip": HipBackendSchema,
                "command": CommandBackendSchema},
    "paths": {"paths": PathsSchema},
    "db": {"db": DatabaseSchema},
    "model": {"model": ModelSchema},
}


# (group, name) -> (schema, the ConfigStore entry made from it): what register_configs stored.
_STORED: dict[tuple[str, str], tuple[Any, Any]] = {}


def _store_entry(cs: Any, group: str, name: str) -> Any:
    """The ConfigStore's entry for group/name, or None."""
    cur = cs.repo
    for part in filter(None, group.split("/")):
        cur = cur.get(part)
        if not isinstance(cur, dict):
            return None
    return cur.get(f"{name}.yaml")


def register_configs(more: Mapping[str, Mapping[str, Any]] | None = None) -> None:
    """Register the schemas with Hydra's ConfigStore (idempotent); ``more``: groups whose schemas
    live elsewhere (the op schemas, each in its family's folder: ``ckheur.families.op_schemas``).
    A schema whose entry is still the one stored from it is not converted again (Hydra only reads
    entries, through deep copies; converting every schema costs ~45 ms per composition)."""
    from hydra.core.config_store import ConfigStore

    from ckheur.conf_source import register

    register()  # the packaged YAML read with libyaml's parser (ckheur/conf_source.py)
    cs = ConfigStore.instance()
    entries = [("", "config_schema", Config)]
    entries += [(f"schema/{group}", name, node) for group, options in {**SCHEMAS, **(more or {})}.items()
                for name, node in options.items()]
    for group, name, node in entries:
        done = _STORED.get((group, name))
        if done is not None and done[0] is node and _store_entry(cs, group, name) is done[1]:
            continue
        cs.store(group=group or None, name=name, node=node)
        _STORED[(group, name)] = (node, _store_entry(cs, group, name))


# Free-text values that Hydra's override grammar cannot take unquoted (operators, quotes).
_FREE_TEXT_KEYS = ("kernels.filter=", "problem=", "backend.template=", "backend.regex=",
                   "backend.build_command=", "backend.workspace_regex=", "backend.kernel_regex=")


def quote_free_text(args: list[str]) -> list[str]:
    """Quote free-text override values so ``kernels.filter=tile_n >= 128 and x == 'y'`` works."""
    out = []
    for a in args:
        key = next((k for k in _FREE_TEXT_KEYS if a.lstrip("+~").startswith(k)), None)
        if key:
            head, val = a.split("=", 1)
            if key == "problem=":  # problem="convbfp16 -n ..." is the MIOpenDriver form, quoted for Hydra or not
                head = head.replace("problem", "problem.driver_line", 1)
            if val and val[0] not in "'\"" and val != "null":
                q = '"' if '"' not in val else "'"
                if q not in val:
                    val = f"{q}{val}{q}"
            a = f"{head}={val}"
        out.append(a)
    return out


def unquoted_line_error(args: list[str]) -> str | None:
    """The one-line error for a MIOpenDriver line the shell split (``problem=convbfp16 -n 16 ...``
    unquoted: Hydra would read ``-n``, ``-c`` as its own flags), or None."""
    for i, a in enumerate(args[:-1]):
        key = next((k for k in _FREE_TEXT_KEYS if a.lstrip("+~").startswith(k)), None)
        nxt = args[i + 1]
        # A value with a space was quoted; a long option (--cfg job) or -m after it is Hydra's.
        if key and " " not in a and nxt.startswith("-") and not nxt.startswith("--") and nxt != "-m":
            rest = []
            for b in args[i + 1:]:
                if "=" in b and not b.startswith("-"):
                    break
                rest.append(b)
            head, val = a.split("=", 1)
            return (f"{head}= takes one value, but the shell split it at the spaces ({val} {' '.join(rest)}): quote it, "
                    f"as in {head}=\"{val} {' '.join(rest)}\"")
    return None
