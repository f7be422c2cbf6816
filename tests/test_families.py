"""The contract every operator family fulfils (``ckheur.families``), checked over every registered
family: its modules' attributes, problems and kernel names that read back as they were written,
features as many as their names, op configs that validate against the family's schema, and C
feature code for every feature C computes. (The compiled
selector's rankings against Python's, per family, are in tests/test_export.py.)"""

from __future__ import annotations

import pytest

from ckheur.config import load_option
from ckheur.families import FAMILIES, get_family

# One op and arch per family: what the contract is exercised on. A registered family missing
# here fails test_every_family_is_checked.
OPS = {"grouped_conv": ("grouped_conv/fwd", "gfx950"), "gemm": ("gemm/universal", "gfx950"),
       "miopen": ("miopen/fwd", "gfx942")}

PROBLEMS = ("FIELDS", "DEFAULTS", "BATCH_FIELD", "SLICES", "SOURCES", "problem_from_dict", "generate", "generate_group")
KERNELS = ("COLUMNS", "TABLE", "parse_name", "from_traits", "candidates", "rejections", "support_arrays",
           "support_mask", "support_reasons")
FEATURES = ("ENCODING_VERSION", "ANALYTIC_MODEL", "CATEGORICAL", "PROBLEM_FEATURES", "KERNEL_FEATURES",
            "HARDWARE_FEATURES", "feature_names", "problem_arrays", "kernel_arrays", "features")


@pytest.fixture(scope="module", params=sorted(OPS))
def member(request):
    """(family, op config, arch config, a sample of its legal kernels, seeded problems of their groups)."""
    from ckheur.kernels import enumerate_pool
    from ckheur.problems import random_problems

    family = get_family(request.param)
    op_name, arch_name = OPS[request.param]
    op, arch = load_option(f"op/{op_name}"), load_option(f"arch/{arch_name}")
    op.setdefault("dtype", {"miopen": "fp16"}.get(family.name, "bf16"))
    kernels = enumerate_pool(op, arch).kernels
    sample = kernels[:: max(1, len(kernels) // 40)]
    problems = random_problems(family, sorted({k.group for k in sample}, key=str), 24, seed=5)
    return family, op, arch, sample, problems


def test_every_family_is_checked():
    assert set(OPS) == set(FAMILIES)


def test_the_modules_have_the_contracts_attributes(member):
    family = member[0]
    for module, names in ((family.problems, PROBLEMS), (family.kernels, KERNELS), (family.features, FEATURES)):
        missing = [n for n in names if not hasattr(module, n)]
        assert not missing, f"{module.__name__} lacks {missing}"
    assert family.analytic == bool(family.features.ANALYTIC_MODEL)
    assert family.schema.__dataclass_fields__["family"].default == family.name  # its op configs' schema


def test_every_op_config_of_the_family_validates(member):
    """The family's conf/op options compose against its schema (what Hydra does at run time)."""
    from omegaconf import OmegaConf

    from ckheur.config import CONF_DIR

    family = member[0]
    options = sorted((CONF_DIR / "op" / family.name).glob("*.yaml"))
    assert options
    for path in options:
        node = OmegaConf.merge(OmegaConf.structured(family.schema), load_option(f"op/{family.name}/{path.stem}"))
        assert node.family == family.name


def test_problems_read_back_as_written(member):
    family, _, _, _, problems = member
    assert len(problems) >= 10
    for p in problems:
        assert family.problems.problem_from_dict(p.to_dict()) == p
        assert len(p.key()) == len(family.problems.FIELDS)
        if hasattr(family.problems, "to_driver_line"):  # the convolutions' text form reads back too
            assert family.problems.from_text(family.problems.to_driver_line(p, "fp16")) == p


def test_kernel_names_and_traits_read_back(member):
    family, op, arch, kernels, _ = member
    assert kernels
    for k in kernels:
        assert family.kernels.parse_name(k.name, op, arch) == k
        assert family.kernels.from_traits(k.traits()) == k
        assert set(family.kernels.COLUMNS) <= set(k.traits())


def test_a_kernel_has_a_reason_exactly_where_the_support_mask_leaves_it_out(member):
    family, op, arch, kernels, problems = member
    support = family.kernels.support_arrays(kernels)
    left_out = 0
    for p in problems:
        mask, _ = family.kernels.support_mask(p, support, op)
        reasons = family.kernels.support_reasons(p, support, op)
        assert len(reasons) == len(kernels) and [not r for r in reasons] == [bool(m) for m in mask]
        left_out += int(len(mask) - sum(bool(m) for m in mask))
    assert left_out or family.name == "grouped_conv"  # its kernels take every valid problem


def test_features_are_as_many_as_their_names(member):
    from ckheur.sim import load_params

    family, op, arch, kernels, problems = member
    engine = family.features
    for analytic in ((False, True) if family.analytic else (False,)):
        params = {**load_params(), "dtype": op["dtype"]} if analytic else None
        X = engine.features(engine.problem_arrays(problems, op["direction"]), engine.kernel_arrays(kernels), arch,
                            op["direction"], params)
        names = engine.feature_names(analytic)
        assert X.shape == (len(problems) * len(kernels), len(names))
        assert len(set(names)) == len(names)
        assert set(engine.CATEGORICAL) <= set(names)


def test_c_code_computes_every_problem_and_pair_feature(member):
    """What the C export reads from the family's C sources: each problem-only (SETP) and
    problem x kernel (SETI) feature has its line there; kernel-only ones are tables."""
    from ckheur.c_export.generate import _classify, _template_names
    from ckheur.families import C_SOURCES

    family = member[0]
    if family.c_export is None:
        pytest.skip(f"the {family.name} family has no C export")
    text = "\n".join((C_SOURCES / f).read_text() for f in family.c_export.sources)
    for analytic in ((False, True) if family.analytic else (False,)):
        names = family.features.feature_names(analytic)
        classes = _classify(family.features, names)
        for macro, cls in (("SETP", "P"), ("SETI", "I")):
            missing = [n for n, c in zip(names, classes) if c == cls and n not in _template_names(text, macro)]
            assert not missing, (family.name, macro, missing)
