"""Selector: ranked kernels for a problem from a model bundle, fast and without Hydra.

    from ckheur import Selector
    sel = Selector.load("models/grouped_conv_fwd_bf16_gfx950")
    problem = {"N": 16, "C": 256, "K": 128, "Hi": 28, "Wi": 28, "Y": 3, "X": 3, "pad_h": 1, "pad_w": 1}
    sel.rank(problem, k=5)           # [RankedKernel(kernel, tflops), ...] best first (k=None: all)
    sel.select(problem).kernel       # the pick, and the tier that chose it

One way to rank (``rank``) and one to pick (``select``). Hybrid selection, in tiers (every answer
says which produced it):

    sel = Selector.load("models/grouped_conv_fwd_bf16_gfx950", tuning_db="tuning/", create_tuning_db=True)
    r = sel.select(problem, measure=None, k=3)
    r.kernel, r.source       # "tuning_db" | "find_db" | "measured" | "training_data" | "model" | "analytic"

An exact hit in the tuning database wins, then (MIOpen's solvers) one in a find-db given as
``find_db=``: MIOpen's own file, answered as MIOpen answers, with its fastest listed solver; then
any other exact tier given as ``exact=[ExactTier(...)]``. Otherwise the model (or, without one,
the analytic model) ranks, and when ``measure`` is given its top-k are timed, the fastest is
chosen, and every attempt is recorded in the database, so the next select of that problem is a
hit. A bundle trained with ``train.remember`` ranks the fastest measured kernel of each of its
training problems first for that exact problem (source ``training_data``), unless the model
predicts its own pick faster by more than the measurement noise (``remember_margin``, default
``REMEMBERED_NOISE``).

Hot path: kernel features, and the feature columns that depend on kernels alone, are
precomputed per spatial dimensionality; a problem's features are one vectorized numpy pass;
LightGBM scores a float32 matrix on one thread through its C API, set up once per selector
(``threads.one_thread_predictor``); no pandas; results are cached by problem (LRU).
``compiled=True`` ranks in the exported C instead (about 15x faster per problem); it is not the
default because its first use exports and compiles the bundle (seconds to tens of seconds).
Pools larger than ``cascade_threshold`` are pre-ranked by the analytic model and only its top
``cascade_top`` are scored by the learned model. A bundle with a screen (``spec["screen"]``,
``ckheur.selection.screening``) scores every candidate with its first trees, and only their best
with the whole model; the others rank after those, in the first trees' order.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, NamedTuple, Sequence

import numpy as np

from ckheur.families import Family
from ckheur.families.kernel_base import LATENCY_FLOOR_MS
from ckheur.families.problem_base import ProblemError
from ckheur.families.tile_features import FixedColumns, analytic_log_tflops
from ckheur.learn.bundle import REMEMBERED_NOISE, SCREEN_OFFSET, margin_of, remembered_kept, screen_of
from ckheur.learn.prior import prior_from_log_tflops
from ckheur.sim import CASCADE_THRESHOLD, CASCADE_TOP, kernel_terms, predicted_tflops, problem_arrays
from ckheur.threads import one_thread_predictor


def as_problem(problem: Any, family: Family, direction: str | None = None, dtype: str | None = None) -> Any:
    """A problem object from a problem, a dict with the family's field names, or its text form
    (convolutions: a MIOpenDriver line, refused when it contradicts ``direction`` or ``dtype``)."""
    if hasattr(problem, "key") and hasattr(problem, "gemm"):
        return problem
    mod = family.problems
    if isinstance(problem, str) and hasattr(mod, "from_text"):
        return mod.from_text(problem, direction, dtype)
    if isinstance(problem, Mapping):
        return mod.problem_from_dict({k: v for k, v in problem.items() if v is not None})
    raise TypeError(f"problem must be a problem object or a dict of {family.name} fields"
                    + (" or a MIOpenDriver line" if hasattr(mod, "from_text") else "")
                    + f", not {type(problem).__name__}")


class RankedKernel(NamedTuple):
    """A kernel of a ranking and its predicted TFLOPS (a tuple: ``name, tflops = ranked``)."""

    kernel: str
    tflops: float


@dataclass(frozen=True)
class Selection:
    """A selected kernel and the tier that chose it.

    ``latency_ms`` is measured for an exact tier (``tuning_db``, ``find_db``, ...) and ``measured``,
    predicted otherwise; ``timed`` maps each kernel measured by this call to its latency (None: the run failed)."""

    kernel: str
    source: str
    latency_ms: float | None
    timed: dict = field(default_factory=dict)


def _results_of(measure: Callable, problem: Any, kernels: list) -> Any:
    """Results of a measure callable: backends give statuses; a plain callable's None is a failure."""
    from ckheur.backends import Results

    names = [k.name for k in kernels]
    if hasattr(measure, "results"):
        return measure.results(problem, names)
    got = measure(problem, names)
    if not isinstance(got, Mapping):
        raise TypeError(f"measure must return a dict {{kernel name: latency_ms or None}}, not {type(got).__name__}")
    res = Results()
    for n in names:
        lat = got.get(n)
        if lat is None or not float(lat) > 0:
            res.add(float("nan"), "failed", "measure returned no time" if lat is None else f"latency_ms={lat}")
        else:
            res.add(float(lat))
    return res


def _floored(tflops: np.ndarray, p: Any) -> np.ndarray:
    """Predicted TFLOPS capped so that no latency is below the launch floor."""
    return np.minimum(tflops, p.flops / (LATENCY_FLOOR_MS * 1e-3) / 1e12)


@dataclass(frozen=True)
class _Pool:
    """One group's kernels with what scoring needs precomputed per kernel: the feature engine's
    arrays, the simulator's kernel-only terms per parameter set (by use: ``ckheur.sim.kernel_terms``),
    and the family's support data (None in a subset: it is only read on the whole pool)."""

    kernels: list
    feats: dict | None
    terms: dict
    support: Any
    kernel_cols: dict | None = None  # the engine's kernel_columns of feats, where it has them

    def take(self, idx: np.ndarray) -> "_Pool":
        """The pool restricted to the kernels at ``idx``, in that order."""
        def sub(arrays: Mapping[str, np.ndarray]) -> dict:
            return {k: v[idx] for k, v in arrays.items()}

        def sub_col(v: Any) -> Any:
            """A kernel column ([1, K]) or the matrix block of them restricted; a scalar as is."""
            if isinstance(v, FixedColumns):
                return v._replace(values=v.values[idx])
            return v[:, idx] if np.ndim(v) == 2 else v

        cols = None if self.kernel_cols is None else {k: sub_col(v) for k, v in self.kernel_cols.items()}
        return _Pool([self.kernels[i] for i in idx], None if self.feats is None else sub(self.feats),
                     {use: sub(t) for use, t in self.terms.items()}, None, cols)


@dataclass(frozen=True)
class ExactTier:
    """A source of exact answers served before the model: ``answer(problem key)`` gives
    ``(kernel name, time ms)`` or None; ``source`` labels its selections."""

    source: str
    answer: Callable[[tuple], "tuple[str, float] | None"]


def across_gpus(spec: Mapping[str, Any], arch: Mapping[str, Any] | None = None) -> str:
    """How a label names the GPUs of a model trained across GPUs ('' for one GPU's model), and
    whether the device it ranks for (``arch``, default the bundle's) was among them."""
    from ckheur.families.hardware import device_label

    archs = spec.get("trained_archs")
    if not archs:
        return ""
    target = dict(arch or spec["arch"])
    devices = spec.get("trained_devices")  # (bundles of earlier versions name archs only)
    measured = device_label(target) in devices if devices else target["name"] in archs
    return f" of {', '.join(devices or archs)}" + ("" if measured else
                                                   unmeasured_words(device_label(target) if devices else target["name"]))


def unmeasured_words(device: str) -> str:
    """How a label of a model across GPUs says the device it ranks for was not among its training data."""
    return f"; {device} unmeasured, hardware descriptors"


class Selector:
    """Ranks an op's kernel pool for problems with a trained model (or the analytic model)."""

    def __init__(self, kernels: list, arch: Mapping[str, Any], direction: str, dtype: str, *, engine: Any = None,
                 booster: Any = None, tflops_booster: Any = None, analytic_params: Mapping[str, Any] | None = None,
                 sim_params: Mapping[str, Any] | None = None, objective: str = "regression_log",
                 cascade_threshold: int = CASCADE_THRESHOLD, cascade_top: int = CASCADE_TOP, cache_size: int = 4096,
                 label: str = "", op: Mapping[str, Any] | None = None, tuning_db: Any = None,
                 create_tuning_db: bool = False, prior: Mapping[str, Any] | None = None,
                 find_db: Any = None, exact: Sequence[ExactTier] = (), screen: tuple[int, int] | None = None) -> None:
        from ckheur.families import get_family
        from ckheur.sim import kernel_arrays as sim_kernel_arrays

        self.op = dict(op or {"family": "grouped_conv"})
        self.family = get_family(self.op["family"])
        if booster is None and not self.family.analytic:
            raise ProblemError(f"the {self.family.name} family has no analytic model to rank with: train a model "
                               f"(stage=train) and load it")
        check_op = getattr(self.family.kernels, "check_op", None)  # what the family's ranking options must hold
        if check_op is not None:
            check_op(self.op)
        available = getattr(self.family.kernels, "available_of", None)  # MIOpen: the solvers the user's MIOpen ships
        shipped = available(self.op) if available is not None else None
        if shipped is not None:
            kept = [k for k in kernels if k.name in shipped]
            if not kept:
                raise ProblemError(f"op.available keeps none of the {len(kernels)} kernels of this model "
                                   f"({', '.join(k.name for k in kernels[:3])} ...)")
            kernels = kept
            self.op["available"] = sorted(shipped)  # names, as the C export takes them
        self.arch, self.direction, self.dtype, self.engine = dict(arch), direction, dtype, engine
        self.booster, self.tflops_booster, self.objective = booster, tflops_booster, objective
        # One query's rows, scored through LightGBM's C API without the wrapper's per-call work.
        self._predict_main = None if booster is None else one_thread_predictor(booster)
        self._predict_tflops = None if tflops_booster is None else one_thread_predictor(tflops_booster)
        # (first trees, how many candidates the whole model scores): a screen, or None
        self.screen = screen if booster is not None else None
        self._predict_first, self._predict_rest = (None, None) if self.screen is None else (
            one_thread_predictor(booster, self.screen[0]), one_thread_predictor(booster, -1, self.screen[0]))
        self.analytic_params = analytic_params
        self.prior = prior  # the analytic prior the trees correct (models.prior), added to their raw scores
        # The prior and the simulator's features come from one simulator pass when their parameters agree.
        self._prior_is_feature = prior is not None and analytic_params is not None and \
            dict(prior["params"]) == dict(analytic_params)
        self.sim_params = {**(sim_params or analytic_params or {}), "dtype": dtype}
        self.cascade_threshold, self.cascade_top = cascade_threshold, cascade_top
        self.label = label
        self.compiled: Any = None  # a CompiledModel ranking in C (Selector.load(..., compiled=True))
        self.answers: dict = {}  # problem key -> kernel name the bundle remembers (train.remember)
        self.trained_devices: list = []  # the devices of its training rows (bundles of earlier versions: none)
        self.trained_archs: list = []  # a model of several GPUs (features.hardware): their archs
        self.across_gpus = False  # a model for any GPU (train.across_gpus): load it for a device
        self.remember_margin = REMEMBERED_NOISE  # how much faster the model must predict its pick to override one
        self._all_kernels = list(kernels)  # the compiled model's kernel indices point into this list
        self._kernel_names = frozenset(k.name for k in self._all_kernels)  # what an exact tier may answer
        self.tuning_db = self._open_db(tuning_db, create_tuning_db)
        self.find_db = self._open_find_db(find_db)
        # The exact tiers, in the order they answer: the tuning database, the find-db, then any given.
        self.exact: list[ExactTier] = [
            *([ExactTier("tuning_db", lambda key: self.tuning_db.best(key, self._kernel_names))] if self.tuning_db
              is not None else []),
            *([ExactTier("find_db", self.find_db.best.get)] if self.find_db is not None else []), *exact]
        self._field_set = frozenset(self.family.problems.FIELDS)
        self._support_mask = self.family.kernels.support_mask  # (the family imports its modules per access)
        self._cache: OrderedDict = OrderedDict()
        self._cache_size = cache_size
        # The simulator's parameter set per use: the model's features, its prior, the analytic ranking.
        self._sim_sets = {"features": {**analytic_params, "dtype": dtype} if analytic_params else None,
                          "prior": prior["params"] if prior is not None else None, "sim": self.sim_params}
        self._pools: dict[Any, _Pool] = {}
        for group in sorted({k.group for k in kernels}):
            ks = [k for k in kernels if k.group == group]
            feats = engine.kernel_arrays(ks) if engine is not None else None
            sim = sim_kernel_arrays(ks) if self.family.analytic else {}
            self._pools[group] = _Pool(ks, feats, self._kernel_terms(sim, len(ks)),
                                       self.family.kernels.support_arrays(ks), self._kernel_columns(feats))

    @classmethod
    def load(cls, model_dir: str | Path, *, compiled: bool = False, tuning_db: Any = None,
             create_tuning_db: bool = False, find_db: Any = None, cache_size: int = 4096,
             cascade_threshold: int = CASCADE_THRESHOLD, cascade_top: int = CASCADE_TOP,
             applicability: str | None = None, listed: Mapping[str, Any] | None = None,
             exact: Sequence[ExactTier] = (), remember_margin: float | None = None,
             kernels: Sequence[str] | None = None, screen: bool = True,
             arch: Mapping[str, Any] | None = None, available: Any = None) -> "Selector":
        """A selector from a model bundle folder (verified on load).

        ``compiled=True`` ranks through the model exported as C (built with the system compiler
        once, cached by the bundle's hash); without a compiler it warns and uses the Python path.
        ``tuning_db``: a tuning database (a path, or an open ``TuningDB``) whose exact hits
        ``select`` returns first (``create_tuning_db``: create a missing one). ``find_db``: MIOpen's
        find-db file (a path, bz2 or text, or ``FindDbAnswers``), answered from next; ``exact``: more
        exact tiers, answered from after those. ``cache_size``:
        problems whose scores are kept; pools above ``cascade_threshold`` kernels are pre-ranked by
        the analytic model and its ``cascade_top`` scored by the model. ``applicability`` and
        ``listed`` replace the bundle's ``op.applicability`` / ``op.listed`` (MIOpen ops: which
        solvers are ranked per problem, ckheur.families.miopen.solvers; the compiled selector ranks
        the same solvers). ``remember_margin``: a
        remembered answer stays first unless the model predicts its own pick faster by more than
        this fraction (default: the bundle's ``op.remember_margin``, else ``REMEMBERED_NOISE``; 0: the
        model decides; inf: always the remembered answer). ``kernels``: rank only the bundle's
        kernels of these names (a bundle serving another GPU: the solvers that run there).
        ``screen=False``: the whole model scores every candidate, where the bundle has a screen.
        ``arch``: the device ranked for, in place of the bundle's (a model across GPUs fills its
        hardware descriptors; ``ckheur.config.resolve_device``). ``available`` (MIOpen): the solvers
        the user's MIOpen ships, names or a path to its files (``op.available``): only those are
        ranked, served from a remembered answer or an exact tier, and compiled."""
        from ckheur.learn.bundle import BundleError, load_bundle, spec_engine
        from ckheur.sim import load_params

        b = load_bundle(model_dir)
        spec = b.spec
        op = dict(spec.get("op_config") or spec["op"])
        if applicability is not None:
            op["applicability"] = applicability
        if listed is not None:
            op["listed"] = dict(listed)
        if available is not None:
            op["available"] = available
        ranked = b.kernels
        if kernels is not None:
            names = set(kernels)
            ranked = [k for k in b.kernels if k.name in names]
            if not ranked:
                raise BundleError(f"{b.path}: none of its {len(b.kernels)} kernels is among the {len(names)} asked for")
        if arch is not None and not spec.get("hardware"):
            raise BundleError(f"{b.path}: a model of {spec['arch']['name']} alone (no hardware descriptors) cannot "
                              f"rank for {arch.get('name')}")
        target = dict(arch) if arch is not None else spec["arch"]
        sel = cls(ranked, target, spec["op"]["direction"], spec["op"]["dtype"], engine=spec_engine(spec),
                  booster=b.booster, tflops_booster=b.tflops_booster, analytic_params=spec.get("analytic_params"),
                  sim_params=load_params(), objective=spec["objective"], op=op,
                  prior=spec.get("prior"),
                  label=f"model {b.path} (trained on {b.manifest.get('data_kind', 'unknown')} data"
                        f"{across_gpus(spec, target)})",
                  tuning_db=tuning_db, create_tuning_db=create_tuning_db, cache_size=cache_size,
                  cascade_threshold=cascade_threshold, cascade_top=cascade_top, find_db=find_db, exact=exact,
                  screen=screen_of(spec) if screen else None)
        if sel.screen is not None:
            sel.label += (f" [screen: its first {sel.screen[0]} of {b.booster.num_trees()} trees rank every "
                          f"candidate, all of them the best {sel.screen[1]}]")
        names = {k.name for k in sel._all_kernels}  # (op.available: remembered answers of the solvers ranked only)
        sel.answers = {key: name for key, name in (b.answers or {}).items() if name in names}
        sel.trained_devices = list(spec.get("trained_devices") or spec.get("trained_archs") or [])
        sel.trained_archs = list(spec.get("trained_archs") or [])
        sel.across_gpus = bool(spec.get("across_gpus"))
        sel.remember_margin = margin_of({"remember_margin": remember_margin} if remember_margin is not None else op)
        if compiled:
            import warnings

            from ckheur.c_export.compiled import load_compiled

            if kernels is not None:
                warnings.warn("the compiled selector ranks every kernel of its bundle, not the ones asked for: "
                              "ranking with the Python path", stacklevel=2)
                return sel
            if sel.answers and sel.remember_margin != margin_of(op):
                warnings.warn(f"remember_margin={sel.remember_margin}: the compiled selector uses the bundle's "
                              f"({margin_of(op)}); ranking with the Python path", stacklevel=2)
                return sel
            if (sel.cascade_threshold, sel.cascade_top) != (CASCADE_THRESHOLD, CASCADE_TOP):
                warnings.warn(f"the compiled selector cascades at {CASCADE_THRESHOLD}/{CASCADE_TOP}, not "
                              f"{sel.cascade_threshold}/{sel.cascade_top}: ranking with the Python path", stacklevel=2)
                return sel
            # the C package ranks the solvers op.applicability keeps, as given here or the bundle's
            sel.compiled = load_compiled(b.path, applicability=applicability, listed=listed, screen=screen,
                                         available=sel.op.get("available") if available is not None else None)
            if sel.compiled is not None and sel.compiled.info.get("kernel_names") != [k.name for k in sel._all_kernels]:
                # its indices point into the kernels loaded here: a bundle changed between the two reads
                warnings.warn(f"the compiled selector of {b.path} ranks other kernels than the bundle loaded: "
                              "ranking with the Python path", stacklevel=2)
                sel.compiled = None
            if sel.compiled is not None:
                sel.label += " [compiled C]"
        return sel

    @classmethod
    def analytic(cls, kernels: list, arch: Mapping[str, Any], direction: str, dtype: str, *,
                 sim_params: Mapping[str, Any] | None = None, op: Mapping[str, Any] | None = None,
                 tuning_db: Any = None, create_tuning_db: bool = False, find_db: Any = None) -> "Selector":
        """A selector that ranks with the calibrated analytic model alone (no learned model)."""
        from ckheur.sim import load_params

        return cls(kernels, arch, direction, dtype, sim_params=sim_params or load_params(), label="analytic model",
                   op=op, tuning_db=tuning_db, create_tuning_db=create_tuning_db, find_db=find_db)

    def _open_find_db(self, find_db: Any) -> Any:
        """The find-db tier (a path, or answers ready to serve) through ``ckheur.formats``."""
        from ckheur.formats import EXACT_TIERS, resolve

        return None if find_db is None else resolve(EXACT_TIERS["find_db"])(self, find_db)

    def _exact(self, key: tuple | None) -> Selection | None:
        """The first exact tier's answer (tuning database, find-db, then the tiers given), if any."""
        if key is None:
            return None
        for tier in self.exact:
            hit = tier.answer(key)
            if hit is not None and hit[0] in self._kernel_names:
                return Selection(hit[0], tier.source, hit[1])
        return None

    def _open_db(self, db: Any, create: bool = False) -> Any:
        """The tuning database (a path or an open one), checked to serve this selector's op and arch;
        a path that does not exist is an error unless ``create``."""
        from ckheur.data.tuning_db import TuningDB

        if db is None:
            return None
        op = {**self.op, "direction": self.direction, "dtype": self.dtype}
        if isinstance(db, TuningDB):
            db.check_serves(op, self.arch["name"])
            return db
        # any device of the arch: a bundle of one arch serves each (stage=predict opens the job's device's)
        return TuningDB.open(db, op, self.arch["name"], create=create)

    def _lookup_key(self, problem: Any) -> tuple | None:
        """A problem's key without building the problem: the DB-hit fast path. None when the
        input is not a plain mapping of known fields with every required one (then the full
        validation runs; an invalid problem is never in the database, so a hit implies a valid one)."""
        if hasattr(problem, "key") and hasattr(problem, "gemm"):
            return problem.key()
        mod = self.family.problems
        if not isinstance(problem, Mapping) or not problem.keys() <= self._field_set:
            return None
        defaults = mod.DEFAULTS
        try:
            return tuple(problem[f] if f in problem else defaults[f] for f in mod.FIELDS)
        except KeyError:
            return None

    def select(self, problem: Any, *, measure: Callable | None = None, k: int = 3) -> Selection:
        """The kernel for a problem, by tier: tuning database hit, else find-db hit, else measured
        top-k, else the ranking.

        ``measure(problem, kernel_names) -> {kernel_name: latency_ms or None}`` times kernels
        (``ckheur.backends.measure_function`` makes one from any backend config). The k best
        ranked are timed; if none runs, the next k, until one does or the pool is exhausted.
        Every attempt, failures included, is recorded in the tuning database when there is one."""
        db = self.tuning_db
        exact = bool(self.exact)
        hit = self._exact(self._lookup_key(problem)) if exact else None
        if hit is not None:
            return hit
        from ckheur.data.dataset import ran_ok, refuse_impossible

        p = as_problem(problem, self.family, self.direction, self.dtype)
        hit = self._exact(p.key()) if exact else None  # the same problem spelled differently (a MIOpenDriver line)
        if hit is not None:
            return hit
        ranked, tflops = self._ranking(p)
        if measure is None:
            remembered = self.answers.get(p.key()) == ranked[0].name if self.answers else False
            return Selection(ranked[0].name, "training_data" if remembered else
                             "analytic" if self.booster is None else "model",
                             float(p.flops / (tflops[0] * 1e12) * 1e3) if tflops[0] > 0 else None)
        if k < 1:
            raise ValueError(f"k={k}: the number of kernels to time must be >= 1")
        if db is not None:
            db.refresh()  # another process may have tuned this problem meanwhile
            hit = db.best(p.key(), self._kernel_names)
            if hit is not None:
                return Selection(hit[0], "tuning_db", hit[1])
        tried = db.runs(p.key()) if db is not None else {}
        queue = [kern for kern in ranked if kern.name not in tried]
        timed: dict[str, float | None] = {}
        while queue:
            batch, queue = queue[:k], queue[k:]
            res = _results_of(measure, p, batch)
            refuse_impossible([(p, kern) for kern in batch], res, self.dtype, self.arch)
            if db is not None:
                db.record(p, batch, res, **getattr(measure, "provenance", {}))
            for kern, lat, status in zip(batch, res.latency_ms, res.status):
                timed[kern.name] = float(lat) if ran_ok(status, lat) else None
            done = {n: t for n, t in timed.items() if t is not None}
            if done:
                best = min(done, key=done.get)
                return Selection(best, "measured", done[best], timed)
        raise ProblemError(f"no kernel of the pool ran {p.describe()}: every measurement failed ({len(timed)} timed)")

    @property
    def kernels(self) -> list:
        return [k for pool in self._pools.values() for k in pool.kernels]

    def _kernel_terms(self, sim_kern: Mapping[str, np.ndarray], n_kernels: int) -> dict:
        """The simulator's kernel-only terms of each parameter set that scoring ``n_kernels``
        candidates reads: the analytic ranking without a model or for the cascade, else the
        features' and the prior's (one set when they agree)."""
        if not self.family.analytic:
            return {}
        if self.booster is None:
            uses = ["sim"]
        else:
            uses = [u for u in ("features", "prior") if self._sim_sets[u] is not None]
            if self._prior_is_feature:
                uses.remove("prior")
            if n_kernels > self.cascade_threshold:
                uses.append("sim")
        return {use: kernel_terms(sim_kern, self.arch, self._sim_sets[use]) for use in uses}

    def _kernel_columns(self, feats: Mapping[str, np.ndarray] | None) -> dict | None:
        """The feature engine's problem-independent columns of a pool (None: it computes them per call)."""
        columns = getattr(self.engine, "kernel_columns", None)
        return None if columns is None or feats is None else columns(feats, self.arch)

    def _sim_tflops(self, prob: Mapping[str, np.ndarray], pool: "_Pool", use: str, log: bool = False) -> np.ndarray:
        """The simulator's TFLOPS (or their log) [1, kernels] with the parameter set of ``use``,
        from the pool's precomputed kernel terms."""
        f = analytic_log_tflops if log else predicted_tflops
        return f(prob, None, self.arch, self._sim_sets[use], self.direction, pool.terms[use])

    def _score(self, p: Any) -> tuple[list, np.ndarray, np.ndarray]:
        """(candidate kernels, scores, predicted TFLOPS) for one problem, uncached."""
        if self.compiled is not None:
            idx, scores, tflops = self.compiled.predict(p)
            return [self._all_kernels[i] for i in idx], scores, tflops
        pool = self._candidates(p)
        at = self._remembered_at(p, pool.kernels)
        scores, tflops = self._predict_pool(p, pool, at)
        return pool.kernels, self._remembered_first(at, scores), tflops

    def _candidates(self, p: Any) -> "_Pool":
        """The kernels ranked for a problem: its group's that the family ranks for it (MIOpen:
        ``op.applicability``), cut to the analytic model's best in a large pool (the cascade)."""
        if p.group not in self._pools:
            what = f"{p.ndim}D problems" if self.family.name == "grouped_conv" else f"group {p.group!r}"
            raise ProblemError(f"no kernel for {what} in this pool (groups: {sorted(self._pools)})")
        pool = self._pools[p.group]
        mask, reason = self._support_mask(p, pool.support, self.op)
        if not mask.any():
            raise ProblemError(reason)
        if not mask.all():
            pool = pool.take(np.flatnonzero(mask))
        if len(pool.kernels) > self.cascade_threshold and self.booster is not None and self.family.analytic:
            # Cascade: the analytic model pre-ranks, the learned model scores its top candidates.
            tf = self._sim_tflops(problem_arrays([p], self.direction), pool, "sim")[0]
            pool = pool.take(np.argsort(-tf, kind="stable")[: self.cascade_top])
        return pool

    def _remembered_at(self, p: Any, kernels: list) -> int | None:
        """Where among the candidates is the kernel the bundle remembers for this exact problem (None: nowhere)."""
        name = self.answers.get(p.key()) if self.answers else None
        return next((i for i, k in enumerate(kernels) if k.name == name), None) if name else None

    def _remembered_first(self, at: int | None, scores: np.ndarray) -> np.ndarray:
        """Scores with the remembered kernel (candidate ``at``) raised above all, unless the model
        predicts its own pick faster by more than ``remember_margin`` (``remembered_kept``; the
        compiled C model does the same); predicted TFLOPS stay the model's."""
        if at is None or not remembered_kept(np.max(scores), scores[at], self.objective, self.remember_margin):
            return scores
        scores = np.array(scores, dtype=np.float64)
        scores[at] = scores.max() + 1.0
        return scores

    def _predict_arrays(self, p: Any, feats: Mapping[str, np.ndarray] | None,
                       sim_kern: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """(scores, predicted TFLOPS) of kernels given as precomputed arrays (engine, simulator)."""
        return self._predict_pool(p, _Pool([], feats, self._kernel_terms(sim_kern, 0), None,
                                           self._kernel_columns(feats)))  # no cascade here

    def _rows(self, p: Any, pool: "_Pool") -> tuple[np.ndarray, np.ndarray | None]:
        """The model's feature rows of a pool's kernels for a problem, and the simulator's log
        TFLOPS [1, kernels] that the analytic prior reads (None without a prior)."""
        prob = self.engine.problem_arrays([p], self.direction)
        analytic = self._sim_sets["features"]
        # One simulator pass serves the features and the prior when their parameters agree.
        log_tf = None if analytic is None else self._sim_tflops(prob, pool, "features", log=True)
        prior_tf = None if self.prior is None else log_tf if self._prior_is_feature else \
            self._sim_tflops(prob, pool, "prior", log=True)
        X = self.engine.features(prob, pool.feats, self.arch, self.direction, analytic, analytic_log_tf=log_tf,
                                 **({} if pool.kernel_cols is None else {"kernel_cols": pool.kernel_cols}))
        return X, prior_tf

    def _predict_pool(self, p: Any, pool: "_Pool", remembered: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        if self.booster is None:
            tf = self._sim_tflops(problem_arrays([p], self.direction), pool, "sim")[0]
            return tf, _floored(tf, p)
        X, prior_tf = self._rows(p, pool)
        scores, estimate, full = self._tree_scores(X, remembered)
        if prior_tf is not None:
            scores = scores + prior_from_log_tflops(prior_tf[0], None, self.prior, self.objective)
            estimate = scores
        if self.tflops_booster is None:
            tflops = np.expm1(estimate)
        elif self.objective == "relative":
            # Scores are predicted fractions of the best: scale by the best TFLOPS estimate (of the
            # candidates the whole model scores, with a screen) so the TFLOPS shown agree with the ranking.
            best = np.expm1(self._predict_tflops(X if full is None else np.ascontiguousarray(X[full]))).max()
            tflops = np.clip(estimate, 1e-3, None) / max(estimate.max(), 1e-3) * best
        else:
            tflops = np.expm1(self._predict_tflops(X))
        return scores, _floored(tflops, p)

    def _tree_scores(self, X: np.ndarray, remembered: int | None) -> tuple[np.ndarray, np.ndarray, Any]:
        """(ranking scores, score estimates, the rows the whole model scored: None for all) of the
        rows of X. With a screen, the first trees score every row, and only their best and the
        remembered answer's (row ``remembered``) get the other trees' sum added: the others' scores
        are their first trees' sum less ``SCREEN_OFFSET`` (they rank after, in that order), their
        estimates that sum. As the C export computes them, to the bit."""
        if self.screen is None or len(X) <= self.screen[1]:
            scores = self._predict_main(X)
            return scores, scores, None
        first = self._predict_first(X)
        full = np.zeros(len(X), dtype=bool)
        full[np.argsort(-first, kind="stable")[: self.screen[1]]] = True
        if remembered is not None:  # remembered_kept compares the whole model's scores
            full[remembered] = True
        estimate = first.copy()
        estimate[full] += self._predict_rest(np.ascontiguousarray(X[full]))
        return np.where(full, estimate, first - SCREEN_OFFSET), estimate, full

    def scores(self, problem: Any) -> tuple[list, np.ndarray, np.ndarray]:
        """(kernels, scores, predicted TFLOPS) over the pool's candidates for a problem, in pool order
        (cached): what ``rank`` sorts, and what evaluations and exports compare."""
        p = as_problem(problem, self.family, self.direction, self.dtype)
        key = p.key()
        hit = self._cache.get(key)
        if hit is None:
            hit = self._score(p)
            self._cache[key] = hit
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        else:
            self._cache.move_to_end(key)
        return hit

    def _ranking(self, problem: Any) -> tuple[list, np.ndarray]:
        """(kernel objects, predicted TFLOPS) over the pool, best first (ties keep pool order)."""
        ks, scores, tflops = self.scores(problem)
        order = np.argsort(-scores, kind="stable")
        return [ks[i] for i in order], tflops[order]

    def rank(self, problem: Any, k: int | None = None) -> list[RankedKernel]:
        """The candidates of a problem (a problem object, a dict of the family's fields, or a
        MIOpenDriver line) best first, with predicted TFLOPS; ``k``: only the first k."""
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
            raise ValueError(f"k={k!r}: the number of kernels to return must be an integer >= 1 (None: all)")
        ks, scores, tflops = self.scores(problem)
        order = np.argsort(-scores, kind="stable")[: (len(ks) if k is None else k)]
        return [RankedKernel(ks[i].name, float(tflops[i])) for i in order]
