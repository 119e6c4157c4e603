"""Files and signals: atomic writes, reserved space, the same-file rule for outputs, short paths and OS errors in
one line, deferred signals."""

import contextlib
import functools
import os
import tempfile
import time
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from .errors import UsageError

__all__ = [
    "PROCESS_T0",
    "short_path",
    "describe_os_error",
    "Interrupted",
    "HANDLED_SIGNALS",
    "install_signal_handlers",
    "restore_signal_handlers",
    "handlers_kept",
    "open_npy_memmap",
    "npy_size",
    "atomic_write",
    "check_output_path",
    "refuse_same_file",
]

PROCESS_T0 = time.perf_counter()  # fallback origin for "time to first action"


def short_path(path) -> str:
    """A path for a one-line message: control characters escaped, the middle of a very long one elided."""
    text = "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(path))
    return text if len(text) <= 160 else f"{text[:60]}...{text[-80:]} ({len(text)} characters)"


def describe_os_error(exc: OSError, skip: Optional[str] = None) -> str:
    """'<path>: <reason>' (both paths for a rename), or the reason alone; names whose last part
    starts with `skip` (temporary files the user never named) are left out."""
    reason = exc.strerror or str(exc) or type(exc).__name__
    names = [
        short_path(f)
        for f in (exc.filename, exc.filename2)
        if f is not None and not (skip and os.path.basename(os.fsdecode(f)).startswith(skip))
    ]
    return f"{' -> '.join(names)}: {reason}" if names else reason


class Interrupted(KeyboardInterrupt):
    """SIGTERM or SIGHUP turned into an exception, so that cleanup (atomic_write) runs as for
    Ctrl-C; main() ends with 128 + signal number."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


HANDLED_SIGNALS = ("SIGINT", "SIGTERM", "SIGHUP")


_SIGNAL_STATE = {"deferred": 0, "pending": None, "stopping": False, "held": None, "main": None, "outer": frozenset()}


def _importing(frame) -> bool:
    """Whether `frame` runs inside an import begun after the handlers were installed (importlib's frames between it
    and the frames that were running then: a program that calls main() while it is itself imported is not held)."""
    outer = _SIGNAL_STATE["outer"]
    while frame is not None and id(frame) not in outer:
        if frame.f_code.co_filename.startswith("<frozen importlib._bootstrap"):
            return True
        frame = frame.f_back
    return False


def _send_after_import(signum: int, main: int) -> None:
    """A short-lived thread: waits until the main thread (ident `main`) is out of every import begun since the
    handlers were installed, then sends `signum` again, so that its Interrupted is raised in the main thread's own
    code (a signal held by _on_signal, or one whose Interrupted a callback lost: _interrupt_lost)."""
    import sys

    while _importing(sys._current_frames().get(main)):
        time.sleep(0.005)
    _SIGNAL_STATE["held"] = None
    os.kill(os.getpid(), signum)


def _on_signal(signum, frame) -> None:
    state = _SIGNAL_STATE
    if state["deferred"] or state["stopping"]:  # inside a critical step, or already on the way out
        state["pending"] = state["pending"] or signum
        return
    if _importing(frame):
        # An exception raised inside an import (torch's, onnxruntime's) can land where it cannot pass: C++ code that
        # calls back into Python (pybind11's error_already_set in a noexcept frame: std::terminate, SIGABRT) or a
        # callback that drops it. Held until the import is over (seconds at most), then sent again.
        if state["held"] is None:
            import _thread  # (built in: nothing to import from disk here)

            state["held"] = signum
            _thread.start_new_thread(_send_after_import, (signum, state["main"]))
        return
    state["stopping"] = True
    raise Interrupted(signum)


def _interrupt_lost(before, unraisable) -> None:
    """sys.unraisablehook while main()'s handlers are in place (`before`: the hook it replaced, for the rest). A
    signal whose Interrupted was raised inside a callback that cannot pass it on (a weakref callback of importlib's
    module locks while torch imports, a __del__) would be lost, with "Exception ignored in ..." on stderr and the
    run going on as if never signalled: the signal is sent again (_send_after_import), so that it lands in the main
    thread's own code."""
    exc = unraisable.exc_value
    if not isinstance(exc, Interrupted):
        before(unraisable)
        return
    import _thread  # (built in: nothing to import from disk inside a callback)

    _SIGNAL_STATE.update(stopping=False, pending=None)
    _thread.start_new_thread(_send_after_import, (exc.signum, _SIGNAL_STATE["main"]))


def install_signal_handlers() -> dict:
    """SIGINT, SIGTERM and SIGHUP raise Interrupted (main thread only): never inside an import (held until it ends,
    _on_signal), and raised again if lost in a callback (_interrupt_lost); returns what they replace, for
    restore_signal_handlers."""
    import _thread
    import signal
    import sys

    outer, frame = set(), sys._getframe(1)
    while frame is not None:  # (the frames running now, by id: they outlive the handlers' use)
        outer.add(id(frame))
        frame = frame.f_back
    _SIGNAL_STATE.update(
        deferred=0, pending=None, stopping=False, held=None, main=_thread.get_ident(), outer=frozenset(outer)
    )
    previous = {}
    for signum in [getattr(signal, name) for name in HANDLED_SIGNALS if hasattr(signal, name)]:
        try:
            previous[signum] = signal.signal(signum, _on_signal)
        except (ValueError, OSError):  # not the main thread: leave the signals alone
            break
    if previous:
        previous["unraisablehook"] = sys.unraisablehook
        sys.unraisablehook = functools.partial(_interrupt_lost, sys.unraisablehook)
    return previous


def restore_signal_handlers(previous: dict) -> None:
    import signal
    import sys

    for signum, handler in previous.items():
        if signum == "unraisablehook":
            sys.unraisablehook = handler
            continue
        with contextlib.suppress(ValueError, OSError, TypeError):
            signal.signal(signum, handler if handler is not None else signal.SIG_DFL)


@contextlib.contextmanager
def handlers_kept():
    """Around a library call that installs signal handlers of its own (ray.init: a SIGTERM handler that calls
    sys.exit(15), and Ray's native one that prints a stack dump): the handlers in place before are put back when it
    returns, and its sys.exit(15) on the way is Interrupted(SIGTERM), as a SIGTERM is everywhere else."""
    import signal

    before = {s: signal.getsignal(s) for s in [getattr(signal, n) for n in HANDLED_SIGNALS if hasattr(signal, n)]}
    try:
        yield
    except SystemExit as exc:
        if exc.code != signal.SIGTERM:
            raise
        _SIGNAL_STATE["stopping"] = True
        raise Interrupted(signal.SIGTERM) from None
    finally:
        restore_signal_handlers(before)


@contextlib.contextmanager
def _signals_deferred():
    """A signal arriving inside is raised when the block ends, so a step such as "create the
    temporary file and remember its name" is never cut in half."""
    state = _SIGNAL_STATE
    state["deferred"] += 1
    try:
        yield
    finally:
        state["deferred"] -= 1
    if not state["deferred"] and state["pending"] and not state["stopping"]:
        signum, state["pending"], state["stopping"] = state["pending"], None, True
        raise Interrupted(signum)


def _new_file_mode(path: Path) -> tuple[int, Optional[os.stat_result]]:
    """The mode `path` must end with: that of the file it replaces, else what open(path, "w")
    would give under the umask (0666 & ~umask)."""
    with contextlib.suppress(OSError):
        st = os.stat(path)
        return st.st_mode & 0o7777, st
    umask = None
    with contextlib.suppress(OSError, ValueError, IndexError, StopIteration):
        line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("Umask:"))
        umask = int(line.split()[1], 8)
    if umask is None:
        umask = os.umask(0o022)
        os.umask(umask)
    return 0o666 & ~umask, None


def _reserve_space(fd: int, size: int) -> None:
    """Allocate `size` bytes for an open file now (posix_fallocate), so that a full disk or an
    exhausted quota is an OSError here, not a SIGBUS in a memory-mapped write later. File
    systems without fallocate are left to fail, if they do, at write time."""
    import errno

    if size <= 0:
        return
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
            raise
    except AttributeError:  # not on Linux
        pass


def open_npy_memmap(path: Path, shape: tuple[int, ...], dtype=np.float32) -> np.memmap:
    """A writable memory-mapped .npy of `shape` at `path` (an existing, e.g. atomic_write's
    temporary, file), its whole size allocated first: unlike np.lib.format.open_memmap, which
    makes a sparse file, a full disk is an OSError here and never a SIGBUS mid-write."""
    dtype = np.dtype(dtype)
    header = {"descr": np.lib.format.dtype_to_descr(dtype), "fortran_order": False, "shape": tuple(shape)}
    with open(path, "r+b") as fh:  # no truncation: space reserved by atomic_write(size=...) stays
        np.lib.format.write_array_header_1_0(fh, header)
        offset = fh.tell()
        nbytes = offset + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
        _reserve_space(fh.fileno(), nbytes)
        fh.truncate(nbytes)
    if nbytes == offset:  # no rows: nothing to map
        return np.empty(shape, dtype)
    return np.memmap(path, dtype=dtype, mode="r+", offset=offset, shape=tuple(shape))


def npy_size(shape: tuple[int, ...], dtype=np.float32) -> int:
    """Bytes of a .npy file of this shape and dtype (header included), for atomic_write(size=)."""
    import io

    buffer = io.BytesIO()
    header = {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)), "fortran_order": False, "shape": tuple(shape)}
    np.lib.format.write_array_header_1_0(buffer, header)
    return buffer.tell() + int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def atomic_write(path: Path, write: Callable[[Path], None], size: Optional[int] = None) -> None:
    """Write through a temporary file beside `path`, then rename: never a half-written file, and an existing file stays
    as it was when anything fails (error, full disk, signal).

    The temporary name ends in the target's suffix in lower case, so writers that add a missing ".npy" (np.save, given
    "out.NPY") write where they are told. `size` (bytes, when known) is allocated first, so a full disk is refused
    before any work; writers that open the file without truncating it (open_npy_memmap) keep that space. The file is
    flushed to disk before the rename. It gets the mode of the file it replaces, else that of open(path, "w") under the
    umask (not mkstemp's 0600). A symlink is written through, not replaced. Any OSError (no space, quota, permission,
    read-only or special file system) is a UsageError naming `path`; the temporary file is gone in every case."""
    import errno

    path = Path(path)
    with contextlib.suppress(OSError):
        if path.is_symlink():
            path = Path(os.path.realpath(path))
    mode, existing = _new_file_mode(path)
    tmp = handle = None
    try:
        with _signals_deferred():  # created and remembered as one step
            handle, name = tempfile.mkstemp(
                dir=path.parent, prefix=f".{path.name[:64]}.", suffix=f".tmp{path.suffix.lower()}"
            )
            tmp = Path(name)
        os.fchmod(handle, mode)
        if existing is not None and os.geteuid() == 0:  # root rewriting a user's file keeps its owner
            with contextlib.suppress(OSError):
                os.fchown(handle, existing.st_uid, existing.st_gid)
        _reserve_space(handle, size or 0)
        handle = os.close(handle)  # (None)
        write(tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())  # a delayed write error (NFS, quota) surfaces here, before the rename
        os.replace(tmp, path)
        tmp = None
    except BaseException as exc:
        if isinstance(exc, OSError) and exc.errno is None:  # numpy's short write: "N requested and M written"
            with contextlib.suppress(OSError, ValueError):
                fs = os.statvfs(path.parent)  # (looked at before the temporary file frees its space)
                if fs.f_bavail * fs.f_frsize < (1 << 20):
                    exc = OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)}: {exc}")
        if tmp is not None:
            with _signals_deferred():
                if handle is not None:
                    with contextlib.suppress(OSError):
                        os.close(handle)
                with contextlib.suppress(OSError):
                    tmp.unlink()
        if isinstance(exc, OSError):
            raise UsageError(
                f"{short_path(path)}: not written ({describe_os_error(exc, skip=f'.{path.name[:64]}.')}); "
                f"{'the existing file is unchanged' if existing is not None else 'nothing was left behind'}"
            ) from exc
        raise


def check_output_path(path, suffixes: tuple[str, ...], option: str = "--output") -> Path:
    """Refuse, before any work, an --output that cannot be written (given as typed: a name that
    ends in "/" means a folder, which Path() would silently drop)."""
    if str(path).endswith(("/", os.sep)):
        raise UsageError(f"{option} {short_path(path)}: names a folder (it ends in /); give a file name")
    path = Path(path)
    if path.suffix.lower() not in suffixes:
        raise UsageError(f"{option} {short_path(path)}: expected a {' or '.join(suffixes)} file")
    parent = path.parent if str(path.parent) else Path(".")
    try:
        if path.is_dir():
            raise UsageError(f"{option} {path}: is a folder")
        if parent.exists() and not parent.is_dir():
            raise UsageError(f"{option} {path}: {parent} is a file, not a folder")
        if not parent.is_dir():
            raise UsageError(f"{option} {path}: folder {parent} does not exist")
        if not os.access(parent, os.W_OK):
            raise UsageError(f"{option} {path}: folder {parent} is not writable")
        if path.exists() and not path.is_file():
            raise UsageError(f"{option} {path}: exists and is not a regular file")
        if path.exists() and not os.access(path, os.W_OK):
            raise UsageError(f"{option} {path}: the existing file is read-only")
    except (OSError, ValueError) as exc:  # a name too long, no access to a folder above, a symlink loop, a NUL byte
        raise UsageError(f"{option} {short_path(path)}: {getattr(exc, 'strerror', None) or exc}")
    return path


def refuse_same_file(output: Optional[Path], inputs: list) -> None:
    """The one same-file rule for every output: refuse one that is an input file or folder or lies inside an input
    folder, by its path, through symlinks (resolved paths: atomic_write writes through a link) or as a hard link
    (st_dev/st_ino). Writing it would destroy (or join) the input being read."""
    if output is None:
        return
    for source in (i for i in inputs if i is not None):
        same = inside = False
        with contextlib.suppress(OSError, ValueError):
            a, b = os.stat(output), os.stat(source)
            same = (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)
        with contextlib.suppress(OSError, ValueError):
            real, held = Path(os.path.realpath(output)), Path(os.path.realpath(source))
            same = same or real == held
            inside = held in real.parents and held.is_dir()
        if same:
            raise UsageError(
                f"--output {short_path(output)}: is the input {'folder' if os.path.isdir(source) else 'file'} "
                f"{short_path(source)}; writing it would destroy the input; choose another output name"
            )
        if inside:
            raise UsageError(
                f"--output {short_path(output)}: lies inside the input folder {short_path(source)}, "
                f"whose files are read; choose an output outside it"
            )
