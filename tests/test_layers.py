"""The house: every import inside ckheur points down the pipeline, and no module imports
itself back through others. Imports inside functions count (they run too)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ckheur"

# Lowest first. A module may import modules of its own layer or of lower ones.
LAYERS = [
    ("ckheur.version", "ckheur.errors", "ckheur.threads", "ckheur.display", "ckheur.metrics", "ckheur.yaml_rules",
     "ckheur.config", "ckheur.conf_source",
     "ckheur.measurements", "ckheur.files", "ckheur.parts", "ckheur.csv_table", "ckheur.progress",
     "ckheur.formats"),
    ("ckheur.families.grouped_conv.schema", "ckheur.families.gemm.schema", "ckheur.families.miopen.schema"),
    ("ckheur.families",),  # the registry: family modules by path, imported on first use
    ("ckheur.families.problem_base", "ckheur.families.kernel_base", "ckheur.families.driver_line"),
    ("ckheur.families.grouped_conv.problems", "ckheur.families.gemm.problems", "ckheur.families.miopen.problems"),
    ("ckheur.families.grouped_conv.kernels", "ckheur.families.gemm.kernels", "ckheur.families.miopen.solvers"),
    ("ckheur.problems",),
    ("ckheur.kernels",),
    ("ckheur.sim", "ckheur.sim_calibration"),
    ("ckheur.families.engines", "ckheur.families.tile_features"),
    ("ckheur.families.grouped_conv", "ckheur.families.gemm", "ckheur.families.miopen"),  # their features
    ("ckheur.job",),
    ("ckheur.data", "ckheur.backends"),
    ("ckheur.learn",),
    ("ckheur.evaluation", "ckheur.selection", "ckheur.c_export"),
    ("ckheur.sweeping",),
    ("ckheur.integrations",),  # other tools' files: only stages import them (the core through ckheur.formats)
    ("ckheur.stages",),
    ("ckheur.cli", "ckheur.__main__", "ckheur"),
]


def _modules() -> dict[str, Path]:
    out = {}
    for p in PACKAGE.rglob("*.py"):
        parts = p.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = p
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """ckheur modules imported anywhere in a file (relative imports resolved)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            for a in node.names:  # `from pkg import module` imports the module
                found.add(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base)
    return {m for m in found if m in modules and m != name}


def _layer(name: str) -> int:
    best = None
    for i, prefixes in enumerate(LAYERS):
        for pre in prefixes:
            if name == pre or (pre != "ckheur" and name.startswith(pre + ".")):
                if best is None or len(pre) > best[1]:
                    best = (i, len(pre))
    assert best is not None, f"{name} is in no layer: add it to LAYERS"
    return best[0]


def _graph() -> dict[str, set[str]]:
    modules = _modules()
    return {n: _imports(n, p, modules) for n, p in modules.items()}


def test_every_import_points_down_the_pipeline():
    upward = [f"{a} (layer {_layer(a)}) imports {b} (layer {_layer(b)})"
              for a, deps in _graph().items() for b in deps if _layer(b) > _layer(a)]
    assert not upward, "\n".join(sorted(upward))


# Only these import other tools' code (ckheur.integrations); the core reaches it through the
# registries of ckheur.formats.
MAY_IMPORT_INTEGRATIONS = ("ckheur.integrations", "ckheur.stages", "ckheur.cli", "ckheur.__main__")


def test_the_core_never_imports_integrations():
    graph = _graph()
    core = [n for n in graph if not any(n == m or n.startswith(m + ".") for m in MAY_IMPORT_INTEGRATIONS)]
    found = [f"{a} imports {b}" for a in core for b in graph[a] if b.startswith("ckheur.integrations")]
    assert not found, "\n".join(sorted(found))


def test_every_format_registry_entry_resolves():
    """A registry line naming a module or function that does not exist would fail only when used."""
    from ckheur import formats

    refs = [ref for _, ref in formats.IMPORTERS]
    for table in (formats.READERS, formats.ENGINES, formats.EXACT_TIERS, formats.LISTINGS, formats.COMPANIONS,
                  formats.SOLVER_NAMES):
        refs += list(table.values())
    assert len(refs) >= 7
    for ref in refs:
        assert ref.startswith("ckheur.integrations."), ref
        assert formats.resolve(ref) is not None


def test_no_import_circles():
    graph = _graph()
    # Tarjan's strongly connected components, iteratively.
    index, low, stack, on, circles, counter = {}, {}, [], set(), [], [0]

    def visit(root: str) -> None:
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter[0]
                    counter[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    x = stack.pop()
                    on.discard(x)
                    comp.append(x)
                    if x == v:
                        break
                if len(comp) > 1:
                    circles.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert not circles, f"import circles: {circles}"


def test_the_checker_sees_lazy_and_relative_imports(tmp_path):
    """The rule would be empty if the parser missed imports inside functions."""
    modules = _modules()
    deps = _imports("ckheur.stages.common", modules["ckheur.stages.common"], modules)
    assert "ckheur.data.dataset" in deps  # imported inside plan_from_cfg()
    assert "ckheur.sweeping" in deps and "ckheur.job" in deps
    assert _layer("ckheur.selection.selector") > _layer("ckheur.data.dataset") > _layer("ckheur.families.grouped_conv.problems")


def test_every_package_ships_in_the_wheel():
    """A package folder missing from pyproject's list would be left out of the wheel."""
    import tomllib

    listed = set(tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {".".join(p.parent.relative_to(PACKAGE.parent).parts) for p in PACKAGE.rglob("__init__.py")}
    assert found <= listed, sorted(found - listed)


def test_a_miopen_selector_ranks_without_importing_hydra():
    """Serving is the library below the stages: loading a shipped MIOpen bundle (its solver tables
    read with ckheur.yaml_rules) and ranking a problem never imports Hydra, whose import alone
    costs a serving process ~0.3 s."""
    import subprocess
    import sys

    code = ("import sys; from ckheur import Selector; "
            "s = Selector.load('models/miopen_fwd_fp32_gfx942'); "
            "s.rank('conv -n 32 -c 256 -H 56 -W 56 -k 256 -y 3 -x 3 -p 1 -q 1', k=3); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] == 'hydra'))")
    r = subprocess.run([sys.executable, "-c", code], cwd=PACKAGE.parent, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip().splitlines()[-1] == "[]"
