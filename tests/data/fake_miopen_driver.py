"""A stand-in MIOpenDriver for backend=miopen_driver tests: it times nothing, it answers from a find-db.

    CKHEUR_FAKE_FIND_DB=<find-db file> python fake_miopen_driver.py convfp16 -n 8 -c 64 ... -F 1 -S <solver> -t 1

Parses MIOpenDriver's convolution arguments (short and long forms), builds the find-db key of the
problem as MIOpen writes it, and prints what MIOpenDriver prints in immediate mode (``-S``) for
the direction of ``-F``: the solutions the library reports (here: the ones the find-db lists for
the problem), the one that ran, and its kernel time, the find-db's time written with ``%f``. A
forced solver the find-db does not list for the problem fails as MIOpenDriver fails on a solver
that does not apply (message on stderr, ``Run...GPU() FAILED, rc = 0x3``; the exit status is the
driver's: 3, or 0 for backward weights, whose code MIOpenDriver shifts left by 16 bits). A solver
name found nowhere in the file is one MIOpenDriver does not know: it falls back to Find and runs
the first listed solver. Solution ids are the fake's own (a hash of the name), not MIOpen's;
ckheur forces solvers by name (numeric ids are not supported here). ``CKHEUR_FAKE_DRIVER_LOG``:
a file each run appends its arguments to (tests count runs with it).
"""
import bz2
import os
import re
import sys
import zlib

LONG = {"-n": "batchsize", "-c": "in_channels", "-k": "out_channels", "-g": "group_count", "-!": "in_d",
        "-H": "in_h", "-W": "in_w", "-@": "fil_d", "-y": "fil_h", "-x": "fil_w", "-#": "conv_stride_d",
        "-u": "conv_stride_h", "-v": "conv_stride_w", "-$": "pad_d", "-p": "pad_h", "-q": "pad_w",
        "-^": "dilation_d", "-l": "dilation_h", "-j": "dilation_w", "-I": "in_layout", "-O": "out_layout",
        "-f": "fil_layout", "-b": "bias", "-F": "forw", "-S": "solution", "-t": "time", "-V": "verify",
        "-i": "iter", "-_": "spatial_dim", "-m": "mode"}
DEFAULTS = {"batchsize": "100", "in_channels": "3", "out_channels": "32", "group_count": "1", "in_d": "32",
            "in_h": "32", "in_w": "32", "fil_d": "3", "fil_h": "3", "fil_w": "3", "bias": "0", "forw": "0",
            "solution": "-1", "spatial_dim": "2", "in_layout": "", "iter": "10"}
DTYPES = {"conv": "FP32", "convfp16": "FP16", "convbfp16": "BF16"}
DIRECTIONS = {1: ("F", "Forward", "RunForwardGPU"), 2: ("B", "Backward Data", "RunBackwardGPU"),
              4: ("W", "Backward Weights", "RunBackwardGPU")}
ALGORITHMS = {"GEMM": 0, "Direct": 1, "FFT": 2, "Winograd": 3, "ImplicitGEMM": 5}  # miopenConvAlgorithm_t


def arguments(argv):
    if not argv or argv[0] not in DTYPES:
        sys.exit(f"fake MIOpenDriver: the first argument is one of {', '.join(DTYPES)}")
    flags = dict(DEFAULTS)
    rest = argv[1:]
    for flag, value in zip(rest[::2], rest[1::2]):
        name = flag[2:] if flag.startswith("--") else LONG.get(flag)
        if name is None:
            sys.exit(f"fake MIOpenDriver: unknown flag {flag}")
        flags[name] = value
    return DTYPES[argv[0]], flags


def key(dtype, flags, letter):
    """The problem's find-db key: sizes, then bias, layout, data type, direction (and _g<G>)."""
    get = lambda name: int(flags.get(name, "1" if name.startswith(("conv_stride", "dilation")) else "0"))  # noqa: E731
    dims = ("d", "h", "w") if flags["spatial_dim"] == "3" else ("h", "w")
    sizes = {d: get(f"in_{d}") for d in dims}
    filt = {d: get(f"fil_{d}") for d in dims}
    out = {d: (sizes[d] + 2 * get(f"pad_{d}") - get(f"dilation_{d}") * (filt[d] - 1) - 1) // get(f"conv_stride_{d}") + 1
           for d in dims}
    inp = [get("in_channels"), *sizes.values()]
    outp = [get("out_channels"), *out.values()]
    first, second = (inp, outp) if letter == "F" else (outp, inp)
    layout = flags["in_layout"] or ("NCDHW" if len(dims) == 3 else "NCHW")
    layouts = [layout] if layout in ("NCHW", "NCDHW") else [layout] * 3
    pairs = ["x".join(str(get(f"{what}_{d}")) for d in dims) for what in ("pad", "conv_stride", "dilation")]
    text = "-".join([*map(str, first), "x".join(map(str, filt.values())), *map(str, second), str(get("batchsize")),
                     *pairs, str(get("bias")), *layouts, dtype, letter])
    return text + (f"_g{get('group_count')}" if get("group_count") != 1 else "")


def find_db_text(path):
    opener = bz2.open if path.endswith(".bz2") else open
    with opener(path, "rt") as f:
        return f.read()


def entries(text, key_text):
    """The find-db's entries of a key: (solver, time_ms, workspace, algorithm number), in file order."""
    m = re.search(rf"^{re.escape(key_text)}=(.*)$", text, re.MULTILINE)
    out = []
    for item in m.group(1).split(";") if m else []:
        solver, _, rest = item.partition(":")
        time_ms, workspace, algorithm = rest.split(",")[:3]
        out.append((solver, float(time_ms), int(workspace), ALGORITHMS[algorithm.rpartition("Algo")[2]]))
    return out


def solution_id(name):
    """The fake's id of a solver (MIOpen's ids are its own; ckheur forces solvers by name)."""
    return zlib.crc32(name.encode()) % 1000 + 1


def main(argv):
    if os.environ.get("CKHEUR_FAKE_DRIVER_LOG"):
        with open(os.environ["CKHEUR_FAKE_DRIVER_LOG"], "a") as f:
            f.write(" ".join(argv) + "\n")
    dtype, flags = arguments(argv)
    forw = int(flags["forw"])
    if forw not in DIRECTIONS:
        sys.exit("fake MIOpenDriver: give one direction, -F 1, 2 or 4")
    letter, direction, runner = DIRECTIONS[forw]
    text = find_db_text(os.environ["CKHEUR_FAKE_FIND_DB"])
    listed = entries(text, key(dtype, flags, letter))
    print("PRNG seed: 12345678")
    name = flags["solution"]
    immediate = re.search(rf"[=;]{re.escape(name)}:", text) is not None  # a solver name MIOpen knows
    if not immediate:  # an unknown name: MIOpenDriver runs Find and times its fastest solution
        if not listed:
            print(f"{runner}() FAILED, rc = 0x6")
            return 6 if forw != 4 else 0
        name = listed[0][0]
    else:
        print(f"{direction} Conv solutions available: {len(listed)}")
        if not listed:
            print(f"{runner}() FAILED, rc = 0x6")
            return 6 if forw != 4 else 0
        for solver, time_ms, workspace, algorithm in listed:
            print(f"- id: {solution_id(solver)} algo: {algorithm}, time: {time_ms:g} ms, ws: {workspace}, "
                  f"name: {solver}")
    entry = next((e for e in listed if e[0] == name), None)
    if entry is None:
        print(f"Warning: Solution id ({solution_id(name)}) is not reported by the library. Trying it anyway...")
        print(f"MIOpen Error: convolutionocl.cpp: The supplied solution id: {name} is not applicable to the "
              "current problem", file=sys.stderr)
        print(f"{runner}() FAILED, rc = 0x3")
        return 3 if forw != 4 else 0  # backward weights: rc << 16, whose low byte is 0
    solver, time_ms, workspace, algorithm = entry
    print(f"MIOpen {direction} Conv. Algorithm: {algorithm}, Solution: {solution_id(solver)}/{solver}")
    print(f"GPU Kernel Time {direction} Conv. Elapsed: {time_ms:f} ms (average)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
