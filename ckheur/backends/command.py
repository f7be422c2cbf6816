"""backend=command: an external benchmark command per (problem, kernel).

The template is formatted with the problem's fields, the kernel's traits and name, and for
convolutions ``{miopen_args}`` (the problem as MIOpenDriver flags), ``{miopen_command}`` and
``{miopen_direction}`` (1, 2, 4); it is split like a shell line and run without a shell.
``regex``'s first group is the time; ``workspace_regex``'s, when given, the workspace in bytes
the run used (what a MIOpen find-db records; without it the workspace is unknown, -1);
``kernel_regex``'s, when given, the kernel the run says it ran (a run of another fails). For a CK
GEMM benchmark binary, for example: ``benchmark_{kernel} -m={M} -n={N} -k={K} -split_k={split_k}``.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import shlex
import signal
import string
import subprocess
from typing import Any, Mapping, Sequence

from ckheur.backends import BackendError, Measurer, Results
from ckheur.parts import UNKNOWN_WORKSPACE
from ckheur.families import get_family
from ckheur.families.driver_line import DIRECTION_FLAG
from ckheur.families.kernel_base import KernelError, command_fields, safe_text

_UNITS = {"ms": 1.0, "us": 1e-3, "s": 1e3}


def make(cfg: Mapping[str, Any], op: Mapping[str, Any], arch: Mapping[str, Any]) -> Measurer:
    from ckheur.data.dataset import refuse_impossible

    if cfg["time_unit"] not in _UNITS:
        raise BackendError(f"backend.time_unit={cfg['time_unit']!r}: allowed values are {', '.join(_UNITS)}")
    pattern = _compiled(cfg, "regex")
    workspace_pattern = _compiled(cfg, "workspace_regex") if cfg.get("workspace_regex") else None
    kernel_pattern = _compiled(cfg, "kernel_regex") if cfg.get("kernel_regex") else None
    scale, timeout = _UNITS[cfg["time_unit"]], _positive(cfg, "timeout_s", float, TIMEOUT_MAX_S)
    batch_pairs = _positive(cfg, "batch_pairs", int)
    template = _checked_template(cfg["template"])
    fixed_program = "{" not in template.split(None, 1)[0]  # not one program per kernel (benchmark_{kernel})
    direction_flag = DIRECTION_FLAG[op["direction"]]
    to_driver_line = getattr(get_family(op["family"]).problems, "to_driver_line", None)  # convolutions have one

    def measure(pairs: Sequence[tuple[Any, Any]]) -> Results:
        out = Results()
        for p, k in pairs:
            try:  # a name or text trait never adds arguments to the command (bundles are checked on load too)
                fields = {**p.to_dict(), **command_fields(k), "arch": safe_text(arch["name"], "arch.name")}
            except KernelError as e:
                out.add(float("nan"), "failed", f"not run: {e}")
                continue
            if to_driver_line is not None:
                command, args = to_driver_line(p, op["dtype"]).split(" ", 1)
                fields.update(miopen_args=args, miopen_command=command, miopen_direction=direction_flag)
            argv = _argv(template, fields)
            try:
                code, text = _run(argv, timeout)
            except OSError as e:
                if fixed_program and isinstance(e, (FileNotFoundError, PermissionError)):  # the same for every pair
                    raise BackendError(f"backend.template: cannot run {argv[0]} ({e.strerror or e}): install it, or "
                                       "give its full path in backend.template") from None
                out.add(float("nan"), "failed", f"cannot run {argv[0]}: {e}")
                continue
            if code is None:
                out.add(float("nan"), "timeout", f"no result within {timeout:g}s (it and every process it started "
                        "were killed)")
                continue
            if code == OUTPUT_CAPPED:
                out.add(float("nan"), "failed", f"printed more than {OUTPUT_LIMIT_BYTES:,} bytes, the cap on a "
                        "benchmark's output: stopped (it and every process it started were killed)")
                continue
            m = pattern.search(text)
            w = workspace_pattern.search(text) if workspace_pattern else None
            if code != 0:
                out.add(float("nan"), "failed", f"exit code {code}: {text[-200:].strip()}")
            elif not m:
                out.add(float("nan"), "failed", f"output did not match backend.regex: {text[-200:].strip()}")
            elif not _is_number(m.group(1)):
                out.add(float("nan"), "failed", f"backend.regex matched {m.group(1)[:80]!r}, not a number")
            elif kernel_pattern and (other := _ran_other(kernel_pattern, text, k.name)):
                out.add(float("nan"), "failed", f"the run reports another kernel than {k.name} (backend.kernel_regex "
                        f"found {other}): its time is not {k.name}'s")
            elif workspace_pattern and not (w and _is_workspace(w.group(1))):
                out.add(float("nan"), "failed", "output did not give a workspace in bytes (ASCII digits, at most "
                        f"{WORKSPACE_MAX}) matching backend.workspace_regex: {text[-200:].strip()}")
            else:
                out.add(float(m.group(1)) * scale, workspace_bytes=int(w.group(1)) if w else UNKNOWN_WORKSPACE)
        refuse_impossible(pairs, out, op["dtype"], arch)  # output is data: an impossible time is a failure
        return out

    return Measurer(name="command", measure=measure, batch_pairs=batch_pairs)


WORKSPACE_MAX = 2**50  # bytes (1 PiB), far beyond any GPU's memory: a larger value is garbled output


def _is_workspace(text: str) -> bool:
    """Whether a workspace read from the output is ASCII digits, at most WORKSPACE_MAX."""
    return text.isascii() and text.isdigit() and int(text) <= WORKSPACE_MAX


OUTPUT_LIMIT_BYTES = 32 << 20  # a benchmark's output (MIOpenDriver prints a few KB): more is a runaway
OUTPUT_CAPPED = -1000  # _run's code for a run stopped for printing more than its cap
_SCAN_S = 0.1  # how often the benchmark's descendants are looked up while it runs


def _run(argv: Sequence[str], timeout: float, limit: int | None = None) -> tuple[int | None, str]:
    """Run one benchmark in its own session: (exit code, stdout + stderr decoded with replacement),
    (None, output so far) when it ran past ``timeout``, or (OUTPUT_CAPPED, the first ``limit``
    bytes) when it printed more. The output is read as a stream, never more than ``limit`` bytes
    kept. At the end, whatever the outcome, every process it started is killed: its process group
    and session, the descendants seen while it ran (``setsid`` children included) and any process
    still holding its output pipe."""
    import selectors
    import time

    limit = OUTPUT_LIMIT_BYTES if limit is None else limit
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            start_new_session=True)
    fd = proc.stdout.fileno()  # type: ignore[union-attr]
    family = _Descendants(proc.pid, os.fstat(fd).st_ino)
    chunks: list[bytes] = []
    size, code, deadline, scanned = 0, None, time.monotonic() + timeout, 0.0
    try:
        os.set_blocking(fd, False)
        with selectors.DefaultSelector() as sel:
            sel.register(fd, selectors.EVENT_READ)
            while True:
                now = time.monotonic()
                if now >= deadline:
                    break
                if now - scanned >= _SCAN_S:
                    family.scan()
                    scanned = now
                exited = proc.poll() is not None  # before reading: what it wrote before exiting is read below
                eof = False
                if sel.select(min(deadline - now, _SCAN_S)) or exited:
                    while True:  # drain what is there now
                        try:
                            data = os.read(fd, 1 << 16)
                        except BlockingIOError:
                            break
                        if not data:
                            eof = True
                            break
                        take = data[:limit + 1 - size]
                        chunks.append(take)
                        size += len(take)
                        if size > limit:
                            break
                if size > limit:
                    code = OUTPUT_CAPPED
                    break
                if eof or exited:  # a child that kept the pipe open does not hold the result back
                    code = proc.wait()
                    break
    finally:
        family.scan()
        family.kill()
        if proc.poll() is None:  # interrupted (Ctrl-C), or past the timeout
            proc.kill()
        proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]
    text = b"".join(chunks)[:limit].decode("utf-8", errors="replace")
    return code, text


class _Descendants:
    """The processes a benchmark started, found through /proc (Linux): its process group and
    session, the descendants of its leader seen by ``scan`` (kept by start time, so a reused pid is
    never killed), and at ``kill`` any process of this user holding its output pipe. Without /proc
    only the group is killed. A process that leaves the session, the leader's family and the pipe
    within one scan interval is not found (a cgroup would be needed)."""

    def __init__(self, leader: int, pipe_inode: int) -> None:
        self.leader, self.pipe = leader, f"pipe:[{pipe_inode}]"
        self.seen: dict[int, str] = {}
        self.ours = {os.getpid(), os.getppid()}

    @staticmethod
    def _stat(pid: int) -> tuple[int, int, int, str] | None:
        """(ppid, pgrp, session, start time) of a live process, or None."""
        try:
            with open(f"/proc/{pid}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            return None
        if fields[0] == b"Z":
            return None
        return int(fields[1]), int(fields[2]), int(fields[3]), fields[19].decode()

    def _pids(self) -> list[int]:
        try:
            return [int(n) for n in os.listdir("/proc") if n.isdigit()]
        except OSError:
            return []

    def scan(self) -> None:
        """Remember the leader's descendants, group and session as they are now."""
        stats = {pid: st for pid in self._pids() if (st := self._stat(pid)) is not None}
        children: dict[int, list[int]] = {}
        for pid, (ppid, pgrp, sid, start) in stats.items():
            children.setdefault(ppid, []).append(pid)
            if self.leader in (pgrp, sid) and pid not in self.ours:
                self.seen[pid] = start
        todo = [self.leader]
        while todo:
            for child in children.get(todo.pop(), []):
                if child not in self.seen and child not in self.ours:
                    self.seen[child] = stats[child][3]
                    todo.append(child)

    def _pipe_holders(self) -> list[int]:
        holders = []
        for pid in self._pids():
            if pid in self.ours:
                continue
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                continue
            for fd in fds:
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{pid}/fd/{fd}") == self.pipe:
                        holders.append(pid)
                        break
        return holders

    def kill(self) -> None:
        """SIGKILL every process found, the group first."""
        _kill_group(self.leader)
        for pid in self._pipe_holders():
            st = self._stat(pid)
            if st is not None:
                self.seen.setdefault(pid, st[3])
        for pid, start in self.seen.items():
            st = self._stat(pid)
            if st is not None and st[3] == start and pid not in self.ours:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


TIMEOUT_MAX_S = 7 * 24 * 3600  # a week: longer is a typo (and beyond what the OS timers take)


def _positive(cfg: Mapping[str, Any], name: str, kind: type, most: float = math.inf) -> Any:
    """backend.<name> as a positive ``kind`` (int or float) of at most ``most``, or a BackendError."""
    value = cfg[name]
    number = None
    if isinstance(value, (int, float)) and not isinstance(value, bool) or isinstance(value, str) and value.isascii():
        with contextlib.suppress(ValueError):
            number = float(value)
    if number is None or not 0 < number <= most or kind is int and not number.is_integer():
        what = "an integer" if kind is int else "a number"
        raise BackendError(f"backend.{name}={value!r}: must be {what} > 0" + (f" and at most {most:g}"
                                                                               if most < math.inf else ""))
    return kind(number)


def _checked_template(template: Any) -> str:
    """backend.template, checked as a format string, or a BackendError naming the fault."""
    if not isinstance(template, str) or not template.strip():
        raise BackendError(f"backend.template={template!r}: give the benchmark command line, e.g. "
                           "'benchmark_{kernel} -m={M}'")
    try:
        list(string.Formatter().parse(template))
    except ValueError as e:
        raise BackendError(f"backend.template {template!r}: {e} (write a literal brace as {{{{ or }}}})") from None
    return template


def _argv(template: str, fields: Mapping[str, Any]) -> list[str]:
    """The template formatted with ``fields`` and split like a shell line, or a BackendError."""
    try:
        text = template.format(**fields)
    except (KeyError, IndexError) as e:
        raise BackendError(f"backend.template uses unknown field {e}; fields: {', '.join(sorted(fields))}") from None
    except (ValueError, AttributeError, TypeError) as e:
        raise BackendError(f"backend.template {template!r}: {e}") from None
    try:
        argv = shlex.split(text)
    except ValueError as e:
        raise BackendError(f"backend.template {template!r} gives {text!r}, which cannot be split like a shell line "
                           f"({e})") from None
    if not argv:
        raise BackendError(f"backend.template {template!r} gives an empty command line")
    return argv


def _ran_other(pattern: re.Pattern, text: str, kernel: str) -> str:
    """What the run reports having run when it is not ``kernel`` (MIOpenDriver falls back to its
    own Find for a solver name it does not know), else ''."""
    m = pattern.search(text)
    ran = m.group(1) if m else "nothing"
    return "" if ran == kernel else repr(ran)


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _compiled(cfg: Mapping[str, Any], name: str) -> re.Pattern:
    """backend.<name> as a regex with a group, or a BackendError naming it."""
    try:
        pattern = re.compile(cfg[name])
    except re.error as e:
        raise BackendError(f"backend.{name} {cfg[name]!r}: {e}") from None
    if pattern.groups < 1:
        raise BackendError(f"backend.{name} {cfg[name]!r}: needs a group, (...), around the number")
    return pattern
