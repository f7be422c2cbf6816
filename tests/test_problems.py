"""Problems: derived sizes against real measurements, validation, sources, sets, shards."""

from __future__ import annotations

import csv

import pytest

from ckheur.families import get_family
from ckheur.problems import (ConvProblem, ProblemError, load_named_set, load_problem_set, from_driver_line,
                             problem_from_dict, shipped_sets)
from ckheur.families.grouped_conv.problems import generate
from ckheur.families.grouped_conv.problems import to_driver_line
from ckheur.problems.sources import dedupe, read_csv, shard
from ckheur.stages import plain


def test_flops_and_output_size_match_real_measurements(ck_fwd_csv):
    with open(ck_fwd_csv) as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 3760
    for r in rows:
        p = problem_from_dict({k: r[k] for k in ("N", "C", "K", "G", "Hi", "Wi", "Y", "X",
                                                 "stride_h", "stride_w", "pad_h", "pad_w")})
        tflops = p.flops / (float(r["latency_ms"]) * 1e-3) / 1e12
        assert tflops == pytest.approx(float(r["tflops"]), rel=1e-9)
        # CK's sanity flag: a correct run writes every output element.
        assert int(r["non_zero"]) == p.N * p.Ho * p.Wo * p.K


def test_csv_source_reads_the_real_file(ck_fwd_csv):
    probs = read_csv(ck_fwd_csv, get_family("grouped_conv"))
    assert len(probs) == 3760
    # 188 problem indices, of which some shapes were measured twice.
    assert len(dedupe(probs)) == 185


def test_problem_csv_checks_partner_columns_and_cells(tmp_path):
    """A stride_w column without stride_h would make every stride-2 row stride_h=1: refused, as
    are text in a size column and fractional sizes, each with its line."""
    bad = {"partner.csv": ("N,C,K,Hi,Wi,Y,X,stride_w\n1,64,64,28,28,3,3,2\n", "stride_w without stride_h"),
           "text.csv": ("N,C,K,Hi,Wi,Y,X\n1,64,64,28,28,3,3\n2,64,sixty,28,28,3,3\n", "line 3: column K='sixty'"),
           "frac.csv": ("N,C,K,Hi,Wi,Y,X\n1,64,64,28.5,28,3,3\n", "line 2: column Hi is 28.5"),
           "empty.csv": ("", "empty file")}
    for name, (text, msg) in bad.items():
        (tmp_path / name).write_text(text)
        with pytest.raises(ProblemError, match=msg):
            read_csv(tmp_path / name, get_family("grouped_conv"))
    (tmp_path / "ok.csv").write_text("N,C,K,Hi,Wi,Y,X,stride_h,stride_w\n1,64,64,28,28,3,3,2,1\n")
    (p,) = read_csv(tmp_path / "ok.csv", get_family("grouped_conv"))
    assert (p.stride_h, p.stride_w, p.Ho, p.Wo) == (2, 1, 13, 26)


def test_derived_sizes_hand_computed():
    p = ConvProblem(N=2, C=64, K=128, G=2, Di=8, Hi=30, Wi=20, Z=3, Y=5, X=3,
                    stride_d=2, stride_h=2, stride_w=1, pad_d=1, pad_h=2, pad_w=0,
                    dilation_d=1, dilation_h=2, dilation_w=1)
    # Do = (8 + 2 - 2 - 1)//2 + 1 = 4; Ho = (30 + 4 - 8 - 1)//2 + 1 = 13; Wo = (20 - 2 - 1)//1 + 1 = 18
    assert (p.Do, p.Ho, p.Wo) == (4, 13, 18)
    assert p.ndim == 3
    assert p.flops == 2 * 2 * 128 * 4 * 13 * 18 * 32 * 3 * 5 * 3
    assert p.gemm("fwd") == (2, 2 * 4 * 13 * 18, 64, 32 * 45)
    assert p.gemm("bwd_data") == (2, 2 * 8 * 30 * 20, 32, 64 * 45)
    assert p.gemm("bwd_weight") == (2, 64, 32 * 45, 2 * 4 * 13 * 18)
    assert p.bytes_moved(2) == 2 * (2 * 8 * 30 * 20 * 64 + 128 * 32 * 45 + 2 * 4 * 13 * 18 * 128)
    # GEMM FLOPs equal conv FLOPs in every direction.
    for d in ("fwd", "bwd_data", "bwd_weight"):
        g, m, n, k = p.gemm(d)
        if d != "bwd_data":
            assert 2 * g * m * n * k == p.flops
    assert ConvProblem(N=1, C=8, K=8, Hi=4, Wi=4).ndim == 2


@pytest.mark.parametrize("fields, msg", [
    ({"N": 0, "C": 8, "K": 8}, "N=0: must be >= 1"),
    ({"N": 1, "C": 6, "K": 8, "G": 4}, "C=6: must be divisible by G=4"),
    ({"N": 1, "C": 8, "K": 6, "G": 4}, "K=6: must be divisible by G=4"),
    ({"N": 1, "C": 8, "K": 8, "Hi": 2, "Wi": 2, "Y": 3, "X": 3}, "Ho=0: must be >= 1"),
    ({"N": 1, "C": 8, "K": 8, "stride_h": 0}, "stride_h=0: must be >= 1"),
    ({"N": 1, "C": 8, "K": 8, "dilation_w": 0}, "dilation_w=0: must be >= 1"),
    ({"N": 1, "C": 8, "K": 8, "pad_h": -1}, "pad_h=-1: must be >= 0"),
    ({"N": 1.5, "C": 8, "K": 8}, "N=1.5: must be an integer"),
    ({"N": 1, "C": 8, "K": 8, "H": 3}, "unknown problem field(s) H"),
    ({"C": 8, "K": 8}, "missing required field(s) N"),
])
def test_validation_errors_name_field_and_value(fields, msg):
    with pytest.raises(ProblemError, match=msg.replace("(", r"\(").replace(")", r"\)")):
        problem_from_dict(fields)


def test_miopen_parser_2d():
    p, d = from_driver_line("./bin/MIOpenDriver convbfp16 -n 16 -c 256 -H 28 -W 28 -k 128 -y 3 -x 3 "
                        "-p 1 -q 1 -u 2 -v 2 -l 1 -j 1 -m conv -g 4 -F 1 -t 1 --in_layout NHWC")
    assert p == ConvProblem(N=16, C=256, K=128, G=4, Hi=28, Wi=28, Y=3, X=3, pad_h=1, pad_w=1,
                            stride_h=2, stride_w=2)
    assert d == ("fwd",)
    assert from_driver_line("conv -n 1 -c 3 -k 8 -H 8 -W 8 -y 1 -x 1 -F 2")[1] == ("bwd_data",)
    assert from_driver_line("convfp16 -n 1 -c 3 -k 8 -H 8 -W 8 -y 1 -x 1")[1] == ("fwd", "bwd_data", "bwd_weight")


def test_miopen_parser_3d_and_round_trip():
    line = ("convbfp16 -n 2 -c 64 -k 144 -! 16 -H 56 -W 56 -@ 3 -y 3 -x 3 -$ 1 -p 1 -q 1 "
            "-# 2 -u 2 -v 2 -^ 1 -l 1 -j 1 -g 1 --spatial_dim 3 -F 4  # comment")
    p, d = from_driver_line(line)
    assert (p.Di, p.Z, p.pad_d, p.stride_d, p.dilation_d) == (16, 3, 1, 2, 1)
    assert p.ndim == 3 and d == ("bwd_weight",)
    assert from_driver_line(to_driver_line(p))[0] == p
    q = ConvProblem(N=3, C=16, K=32, G=2, Hi=9, Wi=11, Y=3, X=1, pad_h=1, stride_w=2, dilation_h=2)
    assert from_driver_line(to_driver_line(q))[0] == q


def test_miopen_parser_errors():
    with pytest.raises(ProblemError, match="expected a command"):
        from_driver_line("-n 1 -c 3")
    with pytest.raises(ProblemError, match="-c .C. must be an integer"):
        from_driver_line("conv -n 1 -c three")
    with pytest.raises(ProblemError, match="unknown flag -Q"):
        from_driver_line("conv -n 1 -Q 3")


def test_a_generated_source_needs_a_count_a_size_limit_and_real_batch_sizes():
    from ckheur.problems.sources import load_source

    family = get_family("grouped_conv")
    assert len(load_source({"kind": "generate", "count": 5}, lambda _: [], family)) == 5
    for bad in ({"count": -3}, {"count": 5, "max_gflop": 0}):
        with pytest.raises(ProblemError, match="kind=generate: count=.* must be >= 0 and max_gflop=.* > 0"):
            load_source({"kind": "generate", **bad}, lambda _: [], family)
    assert {p.N for p in load_source({"kind": "generate", "count": 3, "batch": [2, 8]}, lambda _: [], family)} == {2, 8}
    with pytest.raises(ProblemError, match=r"kind=generate: batch=\[0\]: each batch size must be a whole number >= 1"):
        load_source({"kind": "generate", "count": 3, "batch": [0]}, lambda _: [], family)


def test_shards_partition_a_set():
    probs = generate(seed=7, count=101)
    parts = [shard(probs, i, 4) for i in range(4)]
    keys = [p.key() for part in parts for p in part]
    assert sorted(keys) == sorted(p.key() for p in probs)
    assert len(set(keys)) == len(keys)
    with pytest.raises(ProblemError, match="index=4, count=4"):
        shard(probs, 4, 4)


def test_shard_config_applies(compose):
    # One composition carries the shard options; the other shards are that node with another index.
    node = plain(compose(["problems=smoke", "problems.shard.index=1", "problems.shard.count=3"]).problems)
    assert (node["shard"]["index"], node["shard"]["count"]) == (1, 3)
    full = load_problem_set({**node, "shard": {**node["shard"], "index": 0, "count": 1}}, get_family("grouped_conv"))
    parts = [load_problem_set({**node, "shard": {**node["shard"], "index": i}} if i != 1 else node,
                              get_family("grouped_conv")) for i in range(3)]
    assert sorted(p.key() for part in parts for p in part) == sorted(p.key() for p in full)
    assert all(parts)


def test_generator_is_deterministic_and_covers_shape_kinds():
    a, b = generate(seed=3, count=300), generate(seed=3, count=300)
    assert [p.key() for p in a] == [p.key() for p in b]
    assert [p.key() for p in generate(seed=4, count=300)] != [p.key() for p in a]
    assert any(p.is_depthwise for p in a)
    assert any(1 < p.G < p.C for p in a)
    assert any(p.stride_h == 2 for p in a) and any(p.dilation_h > 1 for p in a)
    assert {1, 3, 5, 7} <= {p.Y for p in a}
    assert all(p.ndim == 3 for p in generate(seed=3, count=50, ndim=3))


def test_smoke_set_covers_direction_relevant_features():
    probs = load_named_set("smoke", get_family("grouped_conv"))
    assert 15 <= len(probs) <= 25
    assert any(p.Y == p.X == 1 for p in probs) and any(p.Y == p.X == 3 for p in probs)
    assert any(p.stride_h == 2 for p in probs) and any(1 < p.G < p.C for p in probs)
    assert any(p.is_depthwise for p in probs) and any(p.ndim == 3 for p in probs)


def test_training_sets_at_ck_scale():
    for d in ("fwd", "bwd_data", "bwd_weight"):
        assert len(load_named_set(f"train_{d}_2d", get_family("grouped_conv"))) == 1500
        assert len(load_named_set(f"train_{d}_3d", get_family("grouped_conv"))) == 150
        assert len(load_named_set(f"train_{d}", get_family("grouped_conv"))) == 1650


def test_holdout_is_disjoint_from_every_training_set():
    holdout = {p.key() for p in load_named_set("holdout", get_family("grouped_conv"))}
    assert len(holdout) >= 250
    for name in shipped_sets():
        if name.startswith("train_"):
            assert not holdout & {p.key() for p in load_named_set(name, get_family("grouped_conv"))}, name


def test_a_set_is_drawn_and_validated_once_per_process_and_file_text(tmp_path, monkeypatch):
    """Loading a shipped set again (every stage loads one; holdout draws the six training sets to
    exclude them) neither draws nor validates anything again: the same problems as drawn afresh,
    each caller its own list; a set file whose text changed is read and validated anew."""
    import shutil

    from ckheur import problems
    from ckheur.families.grouped_conv import problems as conv
    from ckheur.problems import sources

    conv_family = get_family("grouped_conv")
    first = load_named_set("holdout", conv_family)
    drawn, validated = [], []
    monkeypatch.setattr(conv, "generate", lambda *a: drawn.append(a) or generate(*a))
    node = problems.set_node
    monkeypatch.setattr(problems, "set_node", lambda name: validated.append(name) or node(name))
    again = load_named_set("holdout", conv_family)
    assert drawn == validated == [] and again == first and again is not first
    again.clear()
    assert load_named_set("holdout", conv_family) == first  # a caller's list is its own
    sources._drawn.cache_clear()
    problems._validated_set.cache_clear()
    assert load_named_set("holdout", conv_family) == first  # drawn and validated afresh: the same problems
    # its two conv sources and the six conv training sets drawn; those and gemm_train validated
    assert len(drawn) == 2 + 6 and len(validated) == 1 + 7
    conf = tmp_path / "conf"
    shutil.copytree(problems.CONF_DIR / "problems", conf / "problems")
    monkeypatch.setattr(problems, "CONF_DIR", conf)
    (conf / "problems" / "smoke.yaml").write_text("defaults:\n  - /schema/problems@_here_: problems\n  - _self_\n"
                                                   "name: smoke\nsources:\n  - {kind: generate, seed: 5, count: 3}\n")
    assert load_named_set("smoke", conv_family) == generate(5, 3)


def test_nets_set_has_real_layers_at_three_batches():
    probs = load_named_set("nets", get_family("grouped_conv"))
    assert {p.N for p in probs} == {1, 8, 32}
    resnet_stem = ConvProblem(N=8, C=3, K=64, Hi=224, Wi=224, Y=7, X=7, stride_h=2, stride_w=2, pad_h=3, pad_w=3)
    resnext_3x3 = ConvProblem(N=32, C=128, K=128, G=32, Hi=56, Wi=56, Y=3, X=3, pad_h=1, pad_w=1)
    mbv2_dw = ConvProblem(N=1, C=144, K=144, G=144, Hi=56, Wi=56, Y=3, X=3, stride_h=2, stride_w=2, pad_h=1, pad_w=1)
    effnet_dw5 = ConvProblem(N=1, C=240, K=240, G=240, Hi=28, Wi=28, Y=5, X=5, pad_h=2, pad_w=2)
    keys = {p.key() for p in probs}
    for p in (resnet_stem, resnext_3x3, mbv2_dw, effnet_dw5):
        assert p.key() in keys
    assert sum(p.ndim == 3 for p in probs) > 50  # 3D U-Net and R(2+1)D-18
    assert len(keys) == len(probs)


def test_unknown_set_and_bad_source(tmp_path):
    with pytest.raises(ProblemError, match="problem set 'nope' not found; shipped sets: .*smoke"):
        load_named_set("nope", get_family("grouped_conv"))
    bad = tmp_path / "bad.csv"
    bad.write_text("N,C,K,Hi,Wi\n1,8,6,4,4\n1,8,8,0,4\n")
    with pytest.raises(ProblemError, match="line 3: problem field Hi=0"):
        read_csv(bad, get_family("grouped_conv"))


def test_ck_gfx950_fwd_set_is_the_real_shapes(ck_fwd_csv):
    import pandas as pd

    raw = pd.read_csv(ck_fwd_csv)
    fields = ["N", "C", "K", "G", "Hi", "Wi", "Y", "X", "stride_h", "stride_w", "pad_h", "pad_w"]
    real = {tuple(int(v) for v in r) for r in raw[fields].itertuples(index=False, name=None)}
    probs = load_named_set("ck_gfx950_fwd", get_family("grouped_conv"))
    assert len(probs) == len(real) == 185
    assert {tuple(getattr(p, f) for f in fields) for p in probs} == real
