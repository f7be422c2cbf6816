"""Kernel pools against CK's production sets, names, arch rules and filter expressions."""

from __future__ import annotations

import csv

import pytest

from ckheur.kernels import FilterError, KernelError, compile_filter, enumerate_pool, format_name, parse_name
from ckheur.stages import plain

# CK's production grouped-conv tiles as documented with the real data (shared/data/README.md).
CK_TILES = ["16x64x64", "32x64x64", "64x64x64", "32x128x64", "64x128x64", "128x128x64",
            "16x64x128", "32x64x128", "64x64x128", "128x64x128"]


def _pool(compose, *overrides):
    cfg = compose(list(overrides))
    return enumerate_pool(plain(cfg.op), plain(cfg.arch), cfg.kernels.filter)


def _expected(variant, pipelines, ndim=2):
    return sorted(f"grouped_conv_{variant}_bf16_{ndim}d_{t}_{p}_intrawave" for t in CK_TILES for p in pipelines)


def test_forward_pool_is_ck_production_set_on_gfx950(compose):
    pool = _pool(compose, "op=fwd", "arch=gfx950")
    assert sorted(k.name for k in pool.by_group()[2]) == _expected("forward", ["compv3", "compv4", "compv5"])
    assert sorted(k.name for k in pool.by_group()[3]) == _expected("forward", ["compv3", "compv4", "compv5"], 3)
    assert pool.rejected == []


@pytest.mark.parametrize("op, variant", [("bwd_data", "bwd_data"), ("bwd_weight", "bwd_weight")])
def test_backward_pools_are_ck_production_sets(compose, op, variant):
    pool = _pool(compose, f"op={op}", "arch=gfx950")
    assert sorted(k.name for k in pool.by_group()[2]) == _expected(variant, ["compv3", "mem"])
    assert len(pool.by_group()[3]) == 20


@pytest.mark.parametrize("arch", ["gfx942", "gfx90a"])
def test_64k_lds_arch_drops_the_tile_over_the_compv4_budget(compose, arch):
    pool = _pool(compose, "op=fwd", f"arch={arch}")
    names = {k.name for k in pool.kernels}
    assert len(pool.by_group()[2]) == 29
    dropped = "grouped_conv_forward_bf16_2d_128x64x128_compv4_intrawave"
    assert dropped not in names
    reasons = dict(pool.rejected)
    # (128 + 64) * 128 * 2 bytes = 49152 > 65536 * 0.5
    assert "49152" in reasons[dropped] and "32768" in reasons[dropped]


def test_real_data_kernels_are_in_the_pool_and_round_trip(compose, ck_fwd_csv):
    cfg = compose(["op=fwd", "arch=gfx950"])
    op = plain(cfg.op)
    pool = {k.name: k for k in enumerate_pool(op, plain(cfg.arch)).kernels}
    with open(ck_fwd_csv) as f:
        names = sorted({r["kernel"] for r in csv.DictReader(f)})
    assert len(names) == 20
    for legacy in names:
        k = parse_name(legacy, op)
        assert format_name(k, legacy=True) == legacy
        assert parse_name(k.name, op) == k
        # The parsed kernel is the enumerated one: same wave layout and warp tile, not zeros.
        assert pool[k.name] == k


def test_every_pool_name_round_trips(compose):
    for op in ("fwd", "bwd_data", "bwd_weight"):
        cfg = compose([f"op={op}", "op.dsb=[false,true]", "op.si=[false,true]",
                       "op.pipelines=[compv3,mem]", "op.schedulers=[intrawave,interwave]"])
        tiles = plain(cfg.op)["tiles"]
        pool = enumerate_pool(plain(cfg.op), plain(cfg.arch))
        assert any(k.dsb and k.si for k in pool.kernels)
        assert any(k.scheduler == "interwave" for k in pool.kernels)
        for k in pool.kernels:
            assert parse_name(k.name, {"tiles": tiles}) == k


def test_trait_rules(compose):
    pool = _pool(compose, "op.pipelines=[compv3,mem]", "op.schedulers=[intrawave,interwave]",
                 "op.dsb=[false,true]")
    reasons = dict(pool.rejected)
    assert all(not (k.pipeline == "compv3" and k.scheduler == "interwave") for k in pool.kernels)
    assert all(not (k.pipeline == "mem" and k.dsb) for k in pool.kernels)
    assert "intrawave scheduler only" in reasons["grouped_conv_forward_bf16_2d_16x64x64_compv3_interwave"]
    assert "unsupported combination" in reasons["grouped_conv_forward_bf16_2d_16x64x64_mem_intrawave_dsb"]
    assert any(k.pipeline == "mem" and k.scheduler == "interwave" for k in pool.kernels)


def test_generated_tile_space_is_large_and_legal(compose):
    cfg = compose(["op.tile_space=generated", "op.ndims=[2]"])
    arch = plain(cfg.arch)
    pool = enumerate_pool(plain(cfg.op), arch)
    assert len(pool.kernels) > 300
    assert len({k.name for k in pool.kernels}) == len(pool.kernels)
    for k in pool.kernels:
        assert k.tile_m % (k.wave_m * k.warp_tile_m) == 0
        assert k.tile_n % (k.wave_n * k.warp_tile_n) == 0
        assert k.tile_k % (k.wave_k * k.warp_tile_k) == 0
        assert [k.warp_tile_m, k.warp_tile_n, k.warp_tile_k] in arch["codegen"]["warp_tiles"]["bf16"]
        budget = arch["lds_bytes"] * arch["codegen"]["lds_budget_fraction"].get(k.pipeline, 1.0)
        assert k.lds_bytes <= budget
    # Production tiles keep their production wave layout in the generated space.
    k = next(k for k in pool.kernels if (k.tile_m, k.tile_n, k.tile_k) == (128, 128, 64))
    assert (k.wave_m, k.wave_n, k.warp_tile_m) == (4, 4, 32)


def test_filter_narrows_pool(compose):
    pool = _pool(compose, "kernels.filter=\"tile_n >= 128 and pipeline == 'compv5'\"")
    assert sorted(k.name for k in pool.by_group()[2]) == [
        "grouped_conv_forward_bf16_2d_128x128x64_compv5_intrawave",
        "grouped_conv_forward_bf16_2d_32x128x64_compv5_intrawave",
        "grouped_conv_forward_bf16_2d_64x128x64_compv5_intrawave"]
    assert pool.filtered_out == 54


def test_filter_grammar():
    f = compile_filter("pipeline in ['compv3', 'mem'] and not dsb and tile_m * tile_n >= 4096",
                       ["pipeline", "dsb", "tile_m", "tile_n"])
    assert f({"pipeline": "mem", "dsb": False, "tile_m": 64, "tile_n": 64})
    assert not f({"pipeline": "mem", "dsb": True, "tile_m": 64, "tile_n": 64})
    assert not f({"pipeline": "compv4", "dsb": False, "tile_m": 64, "tile_n": 64})
    assert not f({"pipeline": "mem", "dsb": False, "tile_m": 32, "tile_n": 64})
    for bad, msg in [("__import__('os').system('x')", "Call not allowed"),
                     ("tile_m.bit_length", "Attribute not allowed"),
                     ("tile_q > 1", "unknown field 'tile_q'"),
                     ("tile_m >", "syntax error"),
                     ("[x for x in tile_m]", "not allowed")]:
        with pytest.raises(FilterError, match=msg.replace("(", r"\(")):
            compile_filter(bad, ["tile_m"])


def test_bad_kernel_name_error():
    with pytest.raises(KernelError, match="not a CK grouped-conv name"):
        parse_name("gemm_fp16_rcr_128x128x32")
