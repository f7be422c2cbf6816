"""Hydra entry point: compose the job config and dispatch to the selected stage.

Errors a user can fix end the run with one line on stderr and exit status 2: a bad config
value or option (reported by Hydra), a run folder that cannot be made, and every error a stage
reports. In a multirun every job runs; a job that fails says why in one line and leaves
``job_failed.json`` in its folder, and the multirun ends with a line per failed job and the
highest exit status among them.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any, Callable, Iterator

import hydra
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from ckheur.config import quote_free_text, register_configs, unquoted_line_error
from ckheur.families import op_schemas
from ckheur.errors import UserError

register_configs({"op": op_schemas()})
FAILED_MARKER = "job_failed.json"
MULTIRUN_ENV = "CKHEUR_MULTIRUN_ID"
# The topmost folder a single run's folder check created (none: the run folder was there), so an
# empty run is removed only up to what this run made, never a folder that was there before.
MADE_FOLDER_ENV = "CKHEUR_RUN_FOLDER_MADE"


@hydra.main(version_base="1.3", config_path="pkg://ckheur.conf", config_name="config")
def _hydra_main(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from ckheur.stages import run_stage

    hc = HydraConfig.get()
    # Hydra's own dated run folder (not one the user named) is not kept when the stage wrote nothing there.
    dated = hc.mode == RunMode.RUN and not any(o.startswith("hydra.run.dir=") for o in hc.overrides.hydra)
    try:
        made = os.environ.pop(MADE_FOLDER_ENV, "")
        run_stage(cfg, output_dir=hc.runtime.output_dir, choices=dict(hc.runtime.choices),
                  remove_empty_to=Path(made) if dated and made else None)
    except SystemExit as e:
        if hc.mode != RunMode.MULTIRUN or e.code in (0, None) or e.code == 130:
            raise
        # The other jobs still run; the multirun's end reports this one (MultirunReport).
        from ckheur.files import write_file

        with contextlib.suppress(OSError, ValueError):
            write_file(Path(hc.runtime.output_dir) / FAILED_MARKER, json.dumps(
                {"exit_code": e.code, "job": int(hc.job.num), "overrides": list(hc.overrides.task),
                 "error": getattr(e, "message", ""), "multirun": os.environ.get(MULTIRUN_ENV, "")}, indent=1))


HYDRA_FILES = ("config.yaml", "hydra.yaml", "overrides.yaml")


class RunFolderCheck(Callback):
    """Check the run folder (a multirun's sweep folder) and every path Hydra will write there
    (``.hydra/*``, ``multirun.yaml``, each job's folder and its ``.hydra/*``) before Hydra creates
    or writes any: Hydra follows links and trusts any folder. Jobs of a multirun that would share
    a folder are refused before any runs. A refusal is one line and exit 2; it is raised as
    SystemExit because Hydra turns a callback's other errors into warnings and goes on."""

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        _refuse_passwords(config)
        folder = Path(str(config.hydra.run.dir)).absolute()
        _refuse_foreign_outputs(folder, config)
        missing = [p for p in (folder, *folder.parents) if not os.path.lexists(p)]
        _checked_folder(str(folder), "run folder", _hydra_files(config, "."))
        if missing:
            os.environ[MADE_FOLDER_ENV] = str(missing[-1])
        else:
            os.environ.pop(MADE_FOLDER_ENV, None)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        _refuse_passwords(config)
        writes = ["multirun.yaml"]
        try:
            subdirs = _job_subdirs(config)
        except UserError as e:
            print(f"error: {e}", file=sys.stderr)
            raise SystemExit(2) from None
        except Exception:  # a job that does not compose: Hydra's sweeper refuses it before any runs
            subdirs = None
        for sub in subdirs or []:
            writes += [sub, *_hydra_files(config, sub)]
        sweep_dir = os.path.abspath(str(config.hydra.sweep.dir))
        launcher = _launcher_folder(config)  # submitit's logs and pickles, in the multirun folder by default
        if launcher and os.path.commonpath([sweep_dir, launcher]) == sweep_dir:
            writes.append(os.path.relpath(launcher, sweep_dir))
        _checked_folder(sweep_dir, "multirun folder", writes)
        if launcher and os.path.commonpath([sweep_dir, launcher]) != sweep_dir:
            _checked_folder(launcher, "hydra.launcher.submitit_folder", [])


def _launcher_folder(config: DictConfig) -> str | None:
    """The fixed part of the launcher's own folder (submitit's ``submitit_folder``, up to its first
    ``%`` job pattern), absolute; None for a launcher without one."""
    from omegaconf import OmegaConf

    folder = OmegaConf.select(config, "hydra.launcher.submitit_folder", default=None)
    if not folder:
        return None
    fixed = str(folder).split("%", 1)[0]
    return os.path.abspath(fixed if fixed.endswith("/") or "%" not in str(folder) else os.path.dirname(fixed))


# Options that may hold a database URL: a password in one would be written to .hydra/ and logs.
_URL_OPTIONS = ("db.url", "tune.db", "predict.tuning_db", "report.tuning_db", "export.tuning_db", "sweep.output",
                "data.paths", "data.eval_paths")


def _refuse_passwords(config: DictConfig) -> None:
    """Exit 2 before anything is written when a database URL holds a password or is of a scheme
    ckheur does not open (``mysql://...`` would otherwise be read as a folder ``mysql:/...``)."""
    from omegaconf import OmegaConf

    from ckheur.data.database import DatabaseError, check_url

    for key in _URL_OPTIONS:
        try:
            value = OmegaConf.select(config, key, default=None)
            values = list(value) if OmegaConf.is_list(value) else [value]
            for v in values:
                if "://" in str(v):  # a URL: of a database ckheur opens, without a password, or refused
                    check_url(str(v), key)
        except DatabaseError as e:
            print(f"error: {e}", file=sys.stderr)
            raise SystemExit(2) from None
        except Exception:  # noqa: BLE001 (a value that does not resolve is the stage's to report)
            continue


def _hydra_files(config: DictConfig, job: str) -> list[str]:
    """The files Hydra writes in a job's folder (``job`` relative to the run or sweep folder): its
    ``.hydra/*`` and the log file of ``hydra/job_logging=default``."""
    sub = config.hydra.get("output_subdir")
    log = [os.path.join(job, f"{config.hydra.job.name}.log")]
    if sub is None:
        return log
    return [*log, os.path.join(job, str(sub)), *(os.path.join(job, str(sub), f) for f in HYDRA_FILES)]


def _job_subdirs(config: DictConfig) -> list[str] | None:
    """Each job's folder below the sweep folder, as Hydra's basic sweeper and launcher will name
    them (None for another sweeper); two jobs of one folder are refused (UserError)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import OmegaConf, open_dict

    if not str(config.hydra.sweeper.get("_target_", "")).endswith("BasicSweeper"):
        return None
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.global_hydra import GlobalHydra

    params = [f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()]
    jobs = [job for batch in BasicSweeper.split_arguments(
        OverridesParser.create().parse_overrides([*params, *config.hydra.overrides.task]), None) for job in batch]
    if OmegaConf.to_container(config.hydra.sweep, resolve=False).get("subdir") == "${hydra.job.num}":
        return [str(i) for i in range(len(jobs))]
    loader = GlobalHydra.instance().config_loader()
    subdirs: dict[str, int] = {}
    for i, overrides in enumerate(jobs):  # as Hydra's launcher composes each job (it validates them all too)
        job = loader.load_sweep_config(config, list(overrides))
        with open_dict(job):
            job.hydra.job.id = job.hydra.job.num = i
        sub = str(OmegaConf.select(job, "hydra.sweep.subdir"))
        if os.path.normpath(sub) in subdirs:
            raise UserError(f"hydra.sweep.subdir={sub!r} for jobs {subdirs[os.path.normpath(sub)]} and {i}: two jobs "
                            "would write one folder; make the subdir differ per job (the default is ${hydra.job.num})")
        subdirs[os.path.normpath(sub)] = i
    return list(subdirs)


def _refuse_foreign_outputs(folder: Path, config: DictConfig) -> None:
    """Exit 2 before Hydra writes its record when the run folder holds a file of the stage's output
    names that ckheur did not write (``ckheur.stages.check_run_folder``)."""
    from omegaconf import OmegaConf

    from ckheur.stages import check_run_folder

    try:
        check_run_folder(folder, str(OmegaConf.select(config, "stage.name", default="")))
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


def _checked_folder(path: str, what: str, writes: list[str]) -> None:
    from ckheur.files import make_write_folder

    try:
        make_write_folder(path, writes, what)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        raise SystemExit(2) from None


class MultirunReport(Callback):
    """At the end of a multirun: one line per failed job, and exit with the highest status."""

    def __init__(self) -> None:
        self.run_id = ""

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        # Jobs (here, or in launcher processes started after this) stamp their failure with this id,
        # so an earlier multirun's failures in the same folder are not counted.
        self.run_id = uuid.uuid4().hex
        os.environ[MULTIRUN_ENV] = self.run_id

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        os.environ.pop(MULTIRUN_ENV, None)
        folder = Path(str(config.hydra.sweep.dir))
        failed = []
        for marker in folder.glob(f"*/{FAILED_MARKER}"):
            try:
                got = json.loads(marker.read_text())
            except (OSError, ValueError, RecursionError):
                continue
            if isinstance(got, dict) and got.get("multirun") == self.run_id:
                failed.append(got)
        if not failed:
            return
        failed.sort(key=lambda f: f.get("job", 0))
        print(f"multirun: {len(failed)} job(s) failed (every job ran; see {FAILED_MARKER} in their folders):",
              file=sys.stderr)
        for f in failed:
            print(f"  job {f.get('job')} ({' '.join(f.get('overrides', []))}): {f.get('error') or 'failed'} "
                  f"(exit {f.get('exit_code')})", file=sys.stderr)
        codes = [c for c in (f.get("exit_code") for f in failed) if isinstance(c, int)]
        raise SystemExit(max(codes, default=1))


def config_error_line(e: BaseException) -> str:
    """One line for an error in the command line's config: what was asked and why it is refused."""
    from hydra.errors import MissingConfigException, OverrideParseException

    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    if isinstance(e, OverrideParseException):
        return f"cannot parse the override {e.override!r}: {lines[0] if lines else 'syntax error'}"
    if isinstance(e, MissingConfigException):
        head = next((ln for ln in lines if "Could not" in ln), lines[0] if lines else "missing config")
        options = list(e.options or [])
        if not options:  # the options are listed in the message, one per tab-indented line
            options = [ln.strip() for ln in str(e).splitlines() if ln.startswith("\t") and "provider=" not in ln]
        head = head.replace("In 'config': ", "")
        return head + (f"; allowed: {', '.join(options)}" if options else "")
    head = lines[0].rstrip(".").replace("Error merging override ", "") if lines else type(e).__name__
    cause = e.__cause__
    if cause is not None:
        detail = [ln.strip() for ln in str(cause).splitlines() if ln.strip()]
        key = next((ln.split(":", 1)[1].strip() for ln in detail if ln.startswith("full_key:")), None)
        if detail:
            head += f": {detail[0]}" + (f" (key {key})" if key and key not in head else "")
    elif len(lines) > 1 and not lines[1].startswith("See "):
        head += f": {lines[1]}"
    return head


@contextlib.contextmanager
def _hydra_raises() -> Iterator[None]:
    """Hydra prints errors over several lines and exits 1; with HYDRA_FULL_ERROR it raises them,
    so they can be reported here in one line."""
    old = os.environ.get("HYDRA_FULL_ERROR")
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = old


# Arguments through which a command line can set hydra.mode: an override of it or of a hydra
# group, or a primary config other than the packaged one.
MODE_SETTERS = ("hydra.mode", "+hydra.mode", "++hydra.mode", "~hydra.mode", "hydra/", "+hydra/", "hydra=",
                "hydra.searchpath", "+hydra.searchpath", "++hydra.searchpath",
                "--config-dir", "-cd", "--config-name", "-cn", "--config-path", "-cp", "--experimental-rerun")


def mode_is_hydras_default(args: list[str]) -> bool:
    """Whether ``hydra.mode`` is unset for this command line: the packaged configs never set it
    (tests/test_cli.py checks), so only an argument of MODE_SETTERS can."""
    return not any(a.startswith(MODE_SETTERS) for a in args)


def _mode_without_composing(args: list[str]) -> contextlib.AbstractContextManager:
    """Hydra composes the whole config once only to read ``hydra.mode`` (Hydra.get_mode), then
    again for the job: about half of a short command's CPU. Where the mode is Hydra's default,
    answer None (unset) as that composition would, and let -m/--multirun decide as Hydra does."""
    from hydra._internal.hydra import Hydra

    from ckheur.conf_source import replaced

    if not mode_is_hydras_default(args):
        return contextlib.nullcontext()
    return replaced(Hydra, "get_mode", lambda composed: lambda self, config_name, overrides: None)


# How many checked job compositions a multirun keeps for its launcher (each holds a whole config).
KEPT_JOBS = 64


def _jobs_composed_once() -> contextlib.AbstractContextManager:
    """Hydra's sweeper composes every job of a batch to check it (Sweeper.validate_batch_is_legal)
    and drops the result; Hydra's basic launcher, in this process, then composes each job again from
    the same master config and overrides. Here the launcher gets the checked composition (the first
    KEPT_JOBS of a batch; the others are composed again), with the master config's resolver cache
    copied into it anew, as load_sweep_config's last step does. Other launchers compose in their own
    processes: nothing is kept for them."""
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra.plugins.sweeper import Sweeper
    from omegaconf import OmegaConf

    from ckheur.conf_source import replaced

    checking = Sweeper.validate_batch_is_legal.__code__

    def checked_once(compose: Callable) -> Callable:
        kept: dict[tuple, DictConfig] = {}

        def load_sweep_config(self: Any, master_config: DictConfig, sweep_overrides: list[str]) -> DictConfig:
            key = (id(self), id(master_config), tuple(sweep_overrides))
            if key in kept and sys._getframe(1).f_code is not checking:
                job = kept.pop(key)
                OmegaConf.copy_cache(from_config=master_config, to_config=job)
                return job
            job = compose(self, master_config, sweep_overrides)
            if (sys._getframe(1).f_code is checking and len(kept) < KEPT_JOBS and str(OmegaConf.select(
                    master_config, "hydra.launcher._target_", default="")).endswith(".BasicLauncher")):
                kept[key] = job  # the checker only composes (it reads nothing of the result)
            return job
        return load_sweep_config

    return replaced(ConfigLoaderImpl, "load_sweep_config", checked_once)


def _records_written_by_libyaml() -> contextlib.AbstractContextManager:
    """Hydra writes each run's record (.hydra/config.yaml, hydra.yaml, overrides.yaml) with
    OmegaConf.to_yaml, on PyYAML's pure-Python emitter: about a tenth of a short command. Here a
    record that libyaml's emitter writes alike (ckheur.yaml_rules.config_yaml) is written by it, any
    other as Hydra writes it; the files are made as Hydra makes them."""
    from hydra.core import utils as hydra_utils

    from ckheur.conf_source import replaced
    from ckheur.yaml_rules import config_yaml

    def libyaml_first(save: Callable) -> Callable:
        def save_config(cfg: Any, filename: str, output_dir: Path) -> None:
            text = config_yaml(cfg)
            if text is None:
                return save(cfg, filename, output_dir)
            output_dir.mkdir(parents=True, exist_ok=True)
            with open(str(output_dir / filename), "w", encoding="utf-8") as file:
                file.write(text)
        return save_config

    return replaced(hydra_utils, "_save_config", libyaml_first)


# One line per stage for --help (tests check it names every stage of ckheur.stages.STAGES).
STAGE_HELP = {
    "list": "the legal kernel pool and a problem set, with counts",
    "sweep": "measure kernels on problems (the calibrated simulator by default) into a dataset",
    "import": "a CK tile_engine CSV or a MIOpen find-db into a dataset",
    "train": "learn a ranking model (LightGBM) from datasets: cross-validation, then a bundle",
    "evaluate": "a model's picks against the fastest measured kernel, beside baselines: report and plots",
    "predict": "ranked kernels for one problem (problem=...) or a problem set (problems=<set>)",
    "search": "search the legal kernel space for one problem with the model as surrogate",
    "tune": "time the model's top-k per problem into a tuning database",
    "report": "a network's convolutions (ONNX, PyTorch, a MIOpen log): picks, MIOpen's answers, a tuning plan",
    "export": "a bundle as C99 or CK's model folder; a tuning database as MIOpen's user find-db",
}
DOCS_URL = "docs/ in the repository (mkdocs serve), starting at docs/getting-started.md"


def config_groups() -> dict[str, list[str]]:
    """The packaged config's groups and their options, read from the conf folder."""
    from importlib import resources

    root = resources.files("ckheur.conf")
    groups: dict[str, list[str]] = {}

    def walk(folder: Any, prefix: str) -> None:
        for entry in sorted(folder.iterdir(), key=lambda e: e.name):
            if entry.is_dir() and not entry.name.startswith(("_", ".")):
                walk(entry, f"{prefix}{entry.name}/")
            elif entry.name.endswith(".yaml") and prefix:
                groups.setdefault(prefix.rstrip("/"), []).append(entry.name[:-5])

    walk(root, "")
    return groups


def default_options() -> dict[str, str]:
    """Each group's default option in the packaged conf/config.yaml's defaults list."""
    from importlib import resources

    from omegaconf import OmegaConf

    top = OmegaConf.create(resources.files("ckheur.conf").joinpath("config.yaml").read_text())
    out: dict[str, str] = {}
    for entry in top.get("defaults", []):
        if isinstance(entry, DictConfig):
            out.update({str(k): str(v) for k, v in entry.items()})
    if "/" in out.get("op", ""):  # op: grouped_conv/fwd is the option fwd of the group op/grouped_conv
        group, option = out.pop("op").rsplit("/", 1)
        out[f"op/{group}"] = option
    return out


def help_text() -> str:
    """The short --help page: what ckheur is, its stages, its config groups, where the docs are."""
    from ckheur.version import __version__

    lines = [f"ckheur {__version__}: learns which GPU kernel to run (CK grouped conv, CK GEMM, MIOpen solvers).",
             "",
             "usage: python run.py stage=<stage> [group=option ...] [key=value ...]   (or: ckheur ...)",
             "       python run.py -m stage=train op=fwd,bwd_data     (multirun: one job per combination)",
             "",
             "stages (stage=...):"]
    lines += [f"  {name:<9} {text}" for name, text in STAGE_HELP.items()]
    lines += ["", "config groups (group=option; * the default):"]
    defaults = default_options()
    for group, options in config_groups().items():
        named = [f"{o}*" if defaults.get(group) == o else o for o in options]
        lines += textwrap.wrap(", ".join(named), width=100, initial_indent=f"  {group + ':':<17}",
                               subsequent_indent=" " * 19)
    lines += ["",
              "examples:",
              "  python run.py stage=list op=fwd arch=gfx950",
              '  python run.py stage=predict problem="convbfp16 -n 16 -c 256 -H 28 -W 28 -k 128 -y 3 -x 3 -p 1 -q 1"',
              "",
              "the full config, every key with its value:  python run.py stage=train --cfg job",
              "one stage's options:                        python run.py --cfg job --package train",
              "Hydra's own help:                           python run.py --hydra-help",
              "version:                                    python run.py --version",
              f"docs: {DOCS_URL}"]
    return "\n".join(lines)


def _help_or_version(args: list[str]) -> str | None:
    """The text for --help/-h or --version/-V when asked (before Hydra sees them), else None."""
    if any(a in ("--help", "-h") for a in args):
        return help_text()
    if any(a in ("--version", "-V") for a in args):
        from ckheur.version import __version__

        return f"ckheur {__version__}"
    return None


def launcher_missing(args: list[str]) -> str | None:
    """Why the launcher the command line chooses cannot run here (SLURM's, on a machine without
    SLURM: submitit would raise from inside Hydra), else None."""
    import shutil

    chosen = [a.split("=", 1)[1] for a in args if a.lstrip("+").startswith("hydra/launcher=")]
    if "submitit_slurm" in chosen and shutil.which("srun") is None:
        return ("hydra/launcher=submitit_slurm: no SLURM on this machine (srun not found): run it from a SLURM "
                "login node, or run the jobs here with hydra/launcher=submitit_local or joblib")
    return None


def console() -> None:
    """Console script ``ckheur`` (same as ``python run.py``): ``main`` in a process of its own, which
    imports LightGBM without its scikit-learn interface (ckheur.threads.core_lightgbm_only)."""
    from ckheur.threads import core_lightgbm_only

    core_lightgbm_only()
    main()


def main() -> None:
    """The command line ``ckheur ...`` in this process (``console`` runs it as the console script)."""
    from hydra.errors import HydraException
    from omegaconf.errors import OmegaConfBaseException

    from ckheur.conf_source import choices_map_when_interpolated, nodes_copied_directly, store_shared

    text = _help_or_version(sys.argv[1:])
    if text is not None:
        print(text)
        return
    split = unquoted_line_error(sys.argv[1:])
    if split:
        print(f"error: {split}", file=sys.stderr)
        raise SystemExit(2)
    sys.argv[1:] = quote_free_text(sys.argv[1:])
    missing = launcher_missing(sys.argv[1:])
    if missing:
        print(f"error: {missing}", file=sys.stderr)
        raise SystemExit(2)
    try:
        with _hydra_raises(), _mode_without_composing(sys.argv[1:]), store_shared(), choices_map_when_interpolated(), \
                nodes_copied_directly(), _jobs_composed_once(), _records_written_by_libyaml():
            _hydra_main()
    except (HydraException, OmegaConfBaseException) as e:
        print(f"error: {config_error_line(e)}", file=sys.stderr)
        raise SystemExit(2) from None
    except OSError as e:  # e.g. hydra.run.dir names a file
        print(f"error: {e.filename or ''}{': ' if e.filename else ''}{e.strerror or e}", file=sys.stderr)
        raise SystemExit(2) from None
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        raise SystemExit(130) from None
