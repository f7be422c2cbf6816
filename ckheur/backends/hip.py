"""backend=hip: real AMD GPUs. Kernels are shared libraries with the ckheur C ABI
(``abi.h`` beside this file), built by a configurable command and cached by kernel name.

The parent process never creates a GPU context: it sends one job per kernel to a worker
subprocess (``hip_worker``) and waits at most ``timeout_s``. A hang is killed (status
``timeout``), a crash or GPU fault ends only that worker (status ``failed`` with the signal),
and the next kernel gets a fresh worker.
"""

from __future__ import annotations

import json
import os
import select
import shlex
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Mapping, Sequence

from ckheur.backends import BackendError, Measurer, Results

ABI_HEADER = Path(__file__).with_name("abi.h")


class Worker:
    """One worker subprocess speaking the JSON-lines protocol."""

    def __init__(self, timeout_s: float) -> None:
        self.log = tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "ckheur.backends.hip_worker"], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=self.log, text=True, start_new_session=True)
        ready = self._read(max(timeout_s, 60.0))
        if not ready or not ready.get("ready"):
            raise RuntimeError(f"hip worker did not start: {self._stderr_tail()}")

    def _read(self, timeout_s: float) -> dict | None:
        r, _, _ = select.select([self.proc.stdout], [], [], timeout_s)
        if not r:
            return None
        line = self.proc.stdout.readline()
        return json.loads(line) if line else {"eof": True}

    def _stderr_tail(self) -> str:
        self.log.seek(0)
        return self.log.read()[-400:].strip().replace("\n", " | ")

    def run(self, job: dict, timeout_s: float) -> dict:
        """Result of one job; on a hang or crash the worker is dead afterwards (``alive`` False)."""
        try:
            self.proc.stdin.write(json.dumps(job) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError:
            pass
        res = self._read(timeout_s)
        if res is None:
            self.kill()
            return {"status": "timeout", "error": f"no result within {timeout_s:g}s; worker killed"}
        if res.get("eof"):
            code = self.proc.wait()
            how = f"signal {signal.Signals(-code).name}" if code < 0 else f"exit code {code}"
            return {"status": "failed", "error": f"worker died ({how}): {self._stderr_tail()}"}
        return res

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def kill(self) -> None:
        if self.alive:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.log.close()


def build_library(cfg: Mapping[str, Any], kernel: Any, arch: str) -> tuple[str | None, str]:
    """Path of the kernel's library (built on first use), or (None, reason)."""
    if cfg.get("library"):
        return str(Path(cfg["library"]).resolve()), ""
    from ckheur.families.kernel_base import KernelError, command_fields
    from ckheur.files import entry_risk, make_folder

    try:  # the name makes the file name and, with the traits, the build command's arguments
        fields = command_fields(kernel)
    except KernelError as e:
        return None, f"not built: {e}"
    # A cached library is code this process runs: only from a folder no other user can change,
    # and only a file of this user's that nobody else can write.
    out = make_folder(cfg["lib_dir"], "backend.lib_dir") / f"{kernel.name}.so"
    if os.path.lexists(out):
        why = entry_risk(out)
        if why:
            return None, f"cached library {out} {why}: not loaded (remove it to rebuild)"
        return str(out.resolve()), ""
    fields.update(out=str(out), arch=arch, abi=str(ABI_HEADER))
    try:
        argv = shlex.split(cfg["build_command"].format(**fields))
    except (KeyError, ValueError) as e:
        return None, f"backend.build_command: {e}; fields: {', '.join(sorted(fields))}"
    try:
        r = subprocess.run(argv, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"build failed: {e}"
    if r.returncode != 0 or not out.exists():
        return None, f"build failed (exit {r.returncode}): {(r.stderr or r.stdout)[-300:]}"
    return str(out.resolve()), ""


def make(cfg: Mapping[str, Any], op: Mapping[str, Any], arch: Mapping[str, Any]) -> Measurer:
    if op["family"] != "grouped_conv":
        raise BackendError(f"backend=hip runs grouped convolutions only (its C ABI, abi.h, has no "
                           f"{op['family']} entry point yet); use backend=command or sim")
    if cfg["memory"] not in ("hip", "host"):
        raise BackendError(f"backend.memory={cfg['memory']!r}: allowed values are hip, host")
    if cfg["memory"] == "hip":
        try:
            import hip  # noqa: F401  (checked here so the error is clear; used in the worker)
        except ImportError:
            raise BackendError('backend=hip needs hip-python: pip install "ckheur[hip]" on a ROCm machine '
                             "(or backend.memory=host for the host-memory test mode)") from None
    state: dict[str, Worker | None] = {"worker": None}
    timeout = float(cfg["timeout_s"])

    def measure(pairs: Sequence[tuple[Any, Any]]) -> Results:
        out = Results()
        for p, k in pairs:
            lib, why = build_library(cfg, k, arch["name"])
            if lib is None:
                out.add(float("nan"), "failed", why)
                continue
            if state["worker"] is None or not state["worker"].alive:
                state["worker"] = Worker(timeout)
            job = {"lib": lib, "kernel": k.name, "problem": p.to_dict(), "direction": op["direction"],
                   "dtype": op["dtype"], "warmup": int(cfg["warmup"]), "warmup_ms": float(cfg["warmup_ms"]),
                   "repeat": int(cfg["repeat"]), "flush_l2": bool(cfg["flush_l2"]), "check": bool(cfg["check"]),
                   "small": p.flops <= float(cfg["check_max_gflop"]) * 1e9, "memory": cfg["memory"],
                   "flush_bytes": arch["l2_bytes"] * arch["num_xcds"] + arch["l3_bytes"]}
            res = state["worker"].run(job, timeout)
            if not state["worker"].alive:
                state["worker"].kill()
                state["worker"] = None
            out.add(float(res.get("latency_ms", float("nan"))), res["status"], res.get("error", ""),
                    float(res.get("spread_ms", float("nan"))))
        return out

    def clock() -> float:
        return gpu_clock_mhz() if cfg["memory"] == "hip" else float("nan")

    def close() -> None:
        if state["worker"] is not None:
            state["worker"].kill()

    return Measurer(name="hip", measure=measure, warmup=int(cfg["warmup"]), repeat=int(cfg["repeat"]),
                    batch_pairs=int(cfg["batch_pairs"]), close=close, clock_mhz=clock)


def gpu_clock_mhz() -> float:
    """Current shader clock of GPU 0 from rocm-smi, or NaN when the driver does not expose it."""
    import re

    try:
        r = subprocess.run(["rocm-smi", "--showgpuclocks", "--json"], capture_output=True, text=True, timeout=10)
        m = re.search(r'"sclk[^"]*":\s*"\(?(\d+)\s*Mhz', r.stdout, re.IGNORECASE)
        return float(m.group(1)) if m else float("nan")
    except (OSError, subprocess.TimeoutExpired):
        return float("nan")
