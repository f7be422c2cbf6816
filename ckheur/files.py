"""Every file ckheur writes or locks goes through here: never through a symbolic link, new files
created exclusively, replaced files swapped in atomically, folders checked for who else can
write in them, temporary folders removed.

Why: ckheur may run as a privileged user in folders that other users can write (a shared data
folder, a shared tuning database). There, another user could plant a symbolic link where ckheur
is about to write and make it truncate or overwrite a file of their choosing, or swap a file
between ckheur's writing and using it. So:

- a new file is opened with ``O_CREAT | O_EXCL | O_NOFOLLOW``: a planted file or link makes the
  open fail, it is never followed;
- a file that is replaced (a record, a report) is written to a new temporary file and renamed
  over the old name, which replaces a planted link itself, never what it points to;
- a folder ckheur writes into must be safe: the folder and every folder above it are owned by
  this user or root, and not writable by other users (group-writable is allowed for this user's
  own group; the sticky bit, as on /tmp, protects other users' entries). Otherwise the write
  is refused, naming the folder. ``CKHEUR_TRUSTED_DIRS`` (folders separated by ``:``) lists
  folders to trust anyway, as in containers whose mounts another uid owns.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import re
import shutil
import stat
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import IO, Iterable, Iterator

from ckheur.errors import UserError

TRUSTED_DIRS_ENV = "CKHEUR_TRUSTED_DIRS"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


NAME_PATTERN = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")


class UnsafePathError(UserError):
    """A path ckheur would write through is not safe (a link, or a folder other users can write)."""


def check_name(value: object, field: str) -> str:
    """A name that becomes one path component (a dataset, problem set, model or export name):
    letters, digits and ``_ . + -``, not starting with a dot, at most 128 characters; anything else
    (a path, ``..``, an empty name) is refused, naming the field."""
    text = str(value)
    if not NAME_PATTERN.fullmatch(text):
        raise UnsafePathError(f"{field}={text!r}: a name must be one path component of letters, digits and "
                              "_ . + - (not starting with a dot, at most 128 characters)")
    return text


def _trusted(real: str) -> bool:
    for prefix in filter(None, os.environ.get(TRUSTED_DIRS_ENV, "").split(os.pathsep)):
        p = os.path.realpath(prefix)
        if real == p or real.startswith(p.rstrip(os.sep) + os.sep):
            return True
    return False


def folder_risk(path: str | Path) -> str | None:
    """Why another user could change what is in an existing folder (a link along the path as
    given that they could have planted; the folder, or a folder above it, is theirs or writable by
    them), or None when only this user and root can."""
    if not hasattr(os, "geteuid"):  # no owners to check on this platform
        return None
    # The path as given first: judging only the resolved target would accept a link another user
    # planted in a shared folder that sends the write into one of this user's own folders.
    why = link_risk(path)
    if why:
        return why
    real = os.path.realpath(path)
    if _trusted(real):
        return None
    cur = real
    while True:
        why = _changeable_by_others(os.stat(cur), cur)
        if why:
            return why
        parent = os.path.dirname(cur)
        if parent == cur:
            return None
        cur = parent


def _changeable_by_others(st: os.stat_result, name: str) -> str | None:
    """Why another user could change the entries of a folder (it is theirs, or writable by them
    without the sticky bit), or None."""
    me, my_group = os.geteuid(), os.getegid()
    mode = st.st_mode
    sticky = bool(mode & stat.S_ISVTX)
    if st.st_uid not in (me, 0):
        return f"{name} is owned by uid {st.st_uid}, not by this user (uid {me}) or root"
    if mode & stat.S_IWOTH and not sticky:
        return f"{name} is writable by every user (mode {stat.S_IMODE(mode):o})"
    if mode & stat.S_IWGRP and not sticky and st.st_gid not in (my_group, 0):
        return f"{name} is writable by group {st.st_gid} (mode {stat.S_IMODE(mode):o})"
    return None


_MAX_LINKS = 40  # as the kernel's own limit on links followed in one path


def link_risk(path: str | Path) -> str | None:
    """Why a symbolic link along ``path``, component by component as given, could have been planted
    or swapped by another user (the link is theirs, or lies in a folder they can write without the
    sticky bit), or None. Links that this user or root made in safe folders are followed and
    their targets walked the same way; components that do not exist yet end the walk."""
    if not hasattr(os, "geteuid"):
        return None
    return _links_along(os.path.join(os.getcwd(), os.fspath(path)), 0)


def _links_along(path: str, followed: int) -> str | None:
    cur = os.sep  # always a real path (no link in it)
    for part in Path(path).parts[1:]:
        if part in ("", "."):
            continue
        if part == "..":
            cur = os.path.dirname(cur)
            continue
        entry = os.path.join(cur, part)
        try:
            st = os.lstat(entry)
        except OSError:
            return None  # not there yet: whoever creates it (make_folder) checks where
        if not stat.S_ISLNK(st.st_mode):
            cur = entry
            continue
        if followed >= _MAX_LINKS:
            return f"{entry}: too many symbolic links along the path"
        if st.st_uid not in (os.geteuid(), 0):
            return (f"{entry} is a symbolic link owned by uid {st.st_uid}, not by this user (uid {os.geteuid()}) "
                    "or root: another user could have planted it")
        if not _trusted(cur):
            why = _changeable_by_others(os.stat(cur), cur)
            if why:
                return f"{entry} is a symbolic link in a folder another user can change ({why})"
        why = _links_along(os.path.join(cur, os.readlink(entry)), followed + 1)
        if why:
            return why
        cur = os.path.realpath(entry)
    return None


def entry_risk(path: str | Path) -> str | None:
    """Why a file or folder itself cannot be trusted (a link, another user's, writable by others),
    or None: for what ckheur loads and runs from a cache."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"is owned by uid {st.st_uid}, not by this user (uid {os.getuid()})"
    if st.st_mode & 0o022:
        return f"is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _refuse_unsafe(path: Path, what: str, why: str | None) -> None:
    """Raise UnsafePathError saying why ``path`` is unsafe, when ``why`` says it is."""
    if why:
        raise UnsafePathError(f"{what} {path} is not safe to write in: {why}; use a folder only you can write, or "
                              f"list it in {TRUSTED_DIRS_ENV}")


def check_folder(path: str | Path, what: str = "folder") -> Path:
    """Refuse (UnsafePathError) a folder that another user could change; the folder as a Path."""
    path = Path(path)
    try:
        why = folder_risk(path)
    except OSError as e:
        raise UnsafePathError(f"{what} {path}: cannot be checked ({e.strerror or e})") from None
    _refuse_unsafe(path, what, why)
    return path


def make_folder(path: str | Path, what: str = "folder") -> Path:
    """Create a folder (and its parents) and check it; the nearest existing folder above is checked
    before anything is created in it. A file in the way is an error naming it."""
    path = Path(path)
    if not path.is_dir():
        existing = path
        while not existing.exists() and existing.parent != existing:
            existing = existing.parent
        if existing.exists() and not existing.is_dir():
            raise UnsafePathError(f"{what} {path}: {existing} is a file, not a folder")
        check_folder(existing, what)
        try:
            path.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise UnsafePathError(f"{what} {path}: cannot be created ({e.strerror or e})") from None
    return check_folder(path, what)


def _writable_by_others(st: os.stat_result) -> bool:
    """Whether users other than this one (and its group) can add entries, sticky bit or not."""
    return bool(st.st_mode & stat.S_IWOTH or (st.st_mode & stat.S_IWGRP and st.st_gid != os.getegid()))


def shared_folder_risk(path: str | Path) -> str | None:
    """Why another user could put an entry where a tool writes files of fixed names (Hydra's
    ``.hydra/*``, ``multirun.yaml``, job folders) in the existing folder ``path``: the folder is
    writable by other users (the sticky bit does not stop them creating a name first), or a folder
    below the nearest one they can write is not this user's own. None when only this user can."""
    if not hasattr(os, "geteuid"):
        return None
    real = os.path.realpath(path)
    if _trusted(real):
        return None
    shared = None
    cur = os.sep
    for part in Path(real).parts[1:]:
        cur = os.path.join(cur, part)
        st = os.lstat(cur)
        if shared is not None and st.st_uid != os.geteuid():
            return (f"{cur} is owned by uid {st.st_uid}: below {shared}, which other users can write, every folder "
                    f"must be this user's (uid {os.geteuid()})")
        if _writable_by_others(st):
            shared = cur
    if shared == real:
        return f"{real} is writable by other users (mode {stat.S_IMODE(os.stat(real).st_mode):o}), who could create " \
               "the files written there first"
    return None


def entries_risk(folder: str | Path, names: Iterable[str]) -> str | None:
    """Why a file or folder that will be written at ``folder/<name>`` (names relative, ``/``
    separated) cannot be: a component below ``folder`` is a symbolic link, another user's, a file
    where a folder is needed or a folder writable by others; or the name leads out of ``folder``.
    Components that do not exist yet are fine (``folder`` is checked to be this user's alone)."""
    folder = os.path.abspath(folder)
    me = os.geteuid() if hasattr(os, "geteuid") and not _trusted(os.path.realpath(folder)) else None
    for name in names:
        target = os.path.normpath(os.path.join(folder, name))
        if os.path.commonpath([folder, target]) != folder:
            return f"{name} leads out of {folder}"
        cur = folder
        parts = Path(os.path.relpath(target, folder)).parts
        for i, part in enumerate(p for p in parts if p != "."):
            cur = os.path.join(cur, part)
            try:
                st = os.lstat(cur)
            except FileNotFoundError:
                break
            if stat.S_ISLNK(st.st_mode):
                return f"{cur} is a symbolic link (it would be written through)"
            if me is not None and st.st_uid != me:
                return f"{cur} is owned by uid {st.st_uid}, not by this user (uid {me})"
            if i < len(parts) - 1 and not stat.S_ISDIR(st.st_mode):
                return f"{cur} is not a folder"
            if stat.S_ISDIR(st.st_mode) and _writable_by_others(st):
                return f"{cur} is writable by other users (mode {stat.S_IMODE(st.st_mode):o})"
            if not stat.S_ISDIR(st.st_mode) and not stat.S_ISREG(st.st_mode):
                return f"{cur} is {_kind(st.st_mode)}, not a regular file"
    return None


def make_write_folder(path: str | Path, writes: Iterable[str] = (), what: str = "folder") -> Path:
    """``make_folder``, then refuse (UnsafePathError) a folder other users can write into (a sticky
    one such as /tmp included) or one below such a folder that is not this user's, and any entry
    of ``writes`` (paths relative to it that will be written) that is a link, another user's or
    leads out of it: for a tool that writes fixed names without these checks (Hydra)."""
    writes = list(writes)
    why = entries_risk(path, writes) if not os.path.lexists(path) else None  # a name leading out: before creating
    if why is None:
        path = make_folder(path, what)
    try:
        why = why or shared_folder_risk(path) or entries_risk(path, writes)
    except OSError as e:
        raise UnsafePathError(f"{what} {path}: cannot be checked ({e.strerror or e})") from None
    _refuse_unsafe(path, what, why)
    return path


def open_new(path: str | Path, binary: bool = False, mode: int = 0o644) -> IO:
    """A new file opened for writing; one already there (a file or a link) is an error, never
    overwritten or followed."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, mode)
    return os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8", "newline": ""}))


@contextlib.contextmanager
def replacing(path: str | Path, binary: bool = False, mode: int | None = None) -> Iterator[IO]:
    """Write a file's new content: a fresh temporary file in the same folder, synced and renamed
    over ``path`` when the block ends (a link at ``path`` is replaced, never followed); on an
    error the old file stays and the temporary one is removed. ``mode``: its permission bits."""
    path = Path(path)
    if path.is_dir() and not path.is_symlink():
        raise UnsafePathError(f"{path} is a folder; cannot write a file there")
    tmp = path.with_name(f".tmp-{uuid.uuid4().hex[:12]}-{path.name}"[:250])
    f = open_new(tmp, binary)
    try:
        with f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def write_file(path: str | Path, data: str | bytes, mode: int | None = None) -> Path:
    """Replace a file's content atomically (a kill leaves the old or the new file, and concurrent
    writers each write a whole one), never through a link."""
    with replacing(path, binary=isinstance(data, bytes), mode=mode) as f:
        f.write(data)
    return Path(path)


def open_lock(path: str | Path) -> int:
    """A lock file's descriptor (created if missing, 0600): never through a link, and only a
    regular file; the caller locks it with flock and never writes it."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | _NOFOLLOW | _CLOEXEC, 0o600)
    except OSError as e:
        raise UnsafePathError(f"lock file {path}: cannot be opened ({e.strerror or e}; a link is never followed)") \
            from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafePathError(f"lock file {path} is not a regular file")
    return fd


LOCK_WAIT_S = 120.0  # how long a lock another process holds is waited for before the run stops


class LockTimeoutError(UserError):
    """A lock file stayed held by another process past the wait."""


def lock_waiting(fd: int, path: str | Path, what: str, wait_s: float | None = None) -> bool:
    """flock ``fd`` (the lock file ``path``) exclusively, waiting at most ``wait_s`` seconds
    (default LOCK_WAIT_S) for another holder: a lock file in a folder other users can write may be
    theirs, held forever. Past the wait, LockTimeoutError naming the file and its owner. False
    where the platform or file system has no flock (nothing is locked)."""
    try:
        import fcntl
    except ImportError:
        return False
    deadline = time.monotonic() + (LOCK_WAIT_S if wait_s is None else wait_s)
    pause = 0.01
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            pass
        except OSError:  # flock unsupported by the file system
            return False
        if time.monotonic() >= deadline:
            owner = os.fstat(fd).st_uid
            mine = hasattr(os, "geteuid") and owner == os.geteuid()
            raise LockTimeoutError(f"{what}: the lock file {path} (owned by uid {owner}"
                                   f"{', this user' if mine else ', another user'}) is held by another process; "
                                   f"waited {LOCK_WAIT_S if wait_s is None else wait_s:g}s. Run again when it is "
                                   "released" + ("" if mine else ", or ask its owner (or root) to remove it"))
        time.sleep(pause)
        pause = min(pause * 2, 0.5)


@contextlib.contextmanager
def held_lock(path: str | Path, what: str, wait_s: float | None = None) -> Iterator[None]:
    """Hold the lock file ``path`` (created if missing, never through a link) for the block,
    waiting at most ``wait_s`` (``lock_waiting``) for another holder; the file is removed while
    still held when the block ends, and one that a releasing holder removed meanwhile is opened
    again, so two processes never hold two different files of one name."""
    for _ in range(100):
        fd = open_lock(path)
        try:
            locked = lock_waiting(fd, path, what, wait_s)
            try:
                same = os.stat(path, follow_symlinks=False).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                same = False
        except BaseException:
            os.close(fd)
            raise
        if same or not locked:
            break
        os.close(fd)
    else:
        raise UnsafePathError(f"{what}: the lock file {path} keeps being replaced")
    try:
        yield
    finally:
        if locked:
            with contextlib.suppress(OSError):
                os.unlink(path)
        os.close(fd)


def aside_name(path: str | Path) -> Path:
    """A new name beside ``path`` to keep an old file or folder under (``<name>.replaced-<time>-<id>``),
    unique even for two replacements in the same second."""
    path = Path(path)
    return path.with_name(f"{path.name}.replaced-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}")


@contextlib.contextmanager
def private_folder(prefix: str = "ckheur-") -> Iterator[Path]:
    """A new folder only this user can use (0700, in the temporary directory), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def process_folder(prefix: str = "ckheur-") -> Path:
    """A private temporary folder (0700) that lives until this process exits, then is removed."""
    folder = Path(tempfile.mkdtemp(prefix=prefix))
    atexit.register(shutil.rmtree, folder, ignore_errors=True)
    return folder


def save_png(fig: object, path: str | Path, dpi: int = 120) -> Path:
    """Save a matplotlib figure as a PNG file, replaced atomically (never through a link)."""
    with replacing(path, binary=True) as f:
        fig.savefig(f, format="png", dpi=dpi)  # type: ignore[attr-defined]
    return Path(path)


DATA_LIMIT_BYTES = 1 << 30  # a compressed data file (find-db, CSV, CK model) may decompress to 1 GiB
BUNDLE_LIMIT_BYTES = 256 << 20  # a compressed bundle file (model text, answers) to 256 MiB
COMPRESSED_SUFFIXES = (".gz", ".bz2", ".xz")


class TooLargeError(UserError):
    """A compressed file decompresses to more than the cap it is read with."""


class NotRegularFileError(UserError, OSError):
    """A path to read names a FIFO, a device, a socket or a folder, not a regular file."""


def _kind(mode: int) -> str:
    return ("a FIFO" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode) else
            "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else
            "a folder" if stat.S_ISDIR(mode) else "not a regular file")


def check_regular(path: str | Path, what: str = "file") -> Path:
    """Refuse (NotRegularFileError, an OSError naming it) a path to read that is a FIFO, a device,
    a socket or a folder, before anything opens it: opening a FIFO waits for a writer forever and
    a device never ends. A path that does not exist is left to the caller to report."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return Path(path)
    if not stat.S_ISREG(mode):
        raise NotRegularFileError(f"{what} {path} is {_kind(mode)}, not a regular file")
    return Path(path)


def open_regular(path: str | Path) -> IO[bytes]:
    """A regular file opened for reading in binary; a FIFO or device is refused without waiting
    (opened non-blocking, checked on the open descriptor, so a swap after a check cannot slip in)."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | _CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFileError(f"{path} is {_kind(mode)}, not a regular file")
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular(path: str | Path) -> bytes:
    """A regular file's bytes, read once (``open_regular``: a FIFO or device is refused, not waited on)."""
    with open_regular(path) as f:
        return f.read()


def read_compressed(path: str | Path, limit_bytes: int | None = None) -> bytes:
    """A file's content, decompressed by its suffix (.gz, .bz2, .xz; other files as they are),
    refused (TooLargeError naming the file and the cap) once it passes ``limit_bytes`` (default
    DATA_LIMIT_BYTES): a small crafted file can expand to gigabytes. Corrupt or cut data raises
    OSError or EOFError; a FIFO or device, NotRegularFileError (an OSError) without waiting."""
    path = Path(path)
    with open_regular(path) as raw:
        if path.suffix not in (".gz", ".bz2", ".xz"):
            return raw.read()
        if os.fstat(raw.fileno()).st_size > KEPT_COMPRESSED_BYTES:  # a large file: streamed, not kept
            return _decompressed(raw, path, limit_bytes)
        return decompress(raw.read(), path, limit_bytes)


# Contents decompressed in this process, by the compressed bytes' suffix and digest (a bundle's model
# is decompressed at every load of it: xz was most of reading one): the same bytes decompress to the
# same content. Kept for compressed files up to KEPT_COMPRESSED_BYTES, the last KEPT_BYTES in all.
KEPT_COMPRESSED_BYTES = 16 << 20
KEPT_BYTES = 128 << 20
_DECOMPRESSED: dict[tuple[str, bytes], bytes] = {}
_DECOMPRESSED_LOCK = threading.Lock()


def decompress(data: bytes, path: str | Path, limit_bytes: int | None = None) -> bytes:
    """A file's bytes ``data`` (already read) decompressed by ``path``'s suffix, as
    ``read_compressed`` reads the file: the same cap, the same errors."""
    import hashlib
    import io

    path = Path(path)
    if path.suffix not in (".gz", ".bz2", ".xz"):
        return data
    if len(data) > KEPT_COMPRESSED_BYTES:
        return _decompressed(io.BytesIO(data), path, limit_bytes)
    key = (path.suffix, hashlib.sha256(data).digest())
    with _DECOMPRESSED_LOCK:
        content = _DECOMPRESSED.get(key)
    if content is None:
        content = _decompressed(io.BytesIO(data), path, limit_bytes)
    elif len(content) > (DATA_LIMIT_BYTES if limit_bytes is None else limit_bytes):
        _decompressed(io.BytesIO(data), path, limit_bytes)  # past this cap: refused, as the first read would be
    with _DECOMPRESSED_LOCK:
        _DECOMPRESSED.pop(key, None)
        _DECOMPRESSED[key] = content  # the most recent last
        while sum(map(len, _DECOMPRESSED.values())) > KEPT_BYTES and len(_DECOMPRESSED) > 1:
            del _DECOMPRESSED[next(iter(_DECOMPRESSED))]
    return content


def _decompressed(raw: IO[bytes], path: Path, limit_bytes: int | None) -> bytes:
    import bz2
    import gzip
    import lzma
    import zlib

    limit_bytes = DATA_LIMIT_BYTES if limit_bytes is None else limit_bytes
    openers = {".gz": gzip.GzipFile, ".bz2": bz2.BZ2File, ".xz": lzma.LZMAFile}
    chunks, size = [], 0
    with openers[path.suffix](fileobj=raw, mode="rb") if path.suffix == ".gz" else \
            openers[path.suffix](raw, mode="rb") as f:
        while True:
            try:
                chunk = f.read(min(1 << 20, limit_bytes + 1 - size))
            except (zlib.error, lzma.LZMAError) as e:  # as an OSError, which every reader reports
                raise OSError(f"corrupt {path.suffix} data ({e})") from None
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
            if size > limit_bytes:
                raise TooLargeError(f"{path}: decompresses to more than {limit_bytes:,} bytes, the cap for such a "
                                    "file: refused (a damaged or crafted file)")
    return b"".join(chunks)


def private_cache(root: str | Path, what: str, fallback_prefix: str | None = "ckheur-cache-") -> Path | None:
    """``root`` created private (0700) and returned when only this user can change it; otherwise
    (another user's, writable by others, inside a folder another user can change, not creatable)
    a warning and, with ``fallback_prefix``, a private folder of this process (removed at exit),
    else None: a cache is never kept where someone else could plant an entry."""
    import warnings

    root = Path(root)
    try:
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        why = entry_risk(root)
        risk = None if why else folder_risk(root)
        why = why or (f"is inside a folder another user can change ({risk})" if risk else None)
    except OSError as e:
        why = f"cannot be used ({e.strerror or e})"
    if why is None:
        return root
    fallback = process_folder(fallback_prefix) if fallback_prefix else None
    warnings.warn(f"{what} {root} {why}: " + (f"using the private folder {fallback} instead" if fallback
                                              else "not cached"), stacklevel=3)
    return fallback
