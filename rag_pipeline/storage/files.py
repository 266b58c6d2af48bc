"""The one bounded reader for user files (datasets, documents, strategy files) and the one file writer.

A user file must be a regular file (checked before and after an ``O_NONBLOCK`` open) and at most ``limit + 1``
bytes are read; errors are :class:`FileReadError` naming the file and the limit. Every file the project writes goes
through :func:`atomic_output` / :func:`write_atomic` (temporary file, ``fsync``, ``os.replace``); a failure is
:class:`FileWriteError`."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import IO, BinaryIO

from rag_pipeline.contracts.errors import EXIT_OUTPUT_NOT_WRITTEN, BadInputError, RagError
from rag_pipeline.storage.names import printable

MB = 1024 * 1024
_CHUNK = 1024 * 1024
_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket"))


class FileReadError(BadInputError, ValueError):
    """A user file that cannot be read: ``path``, ``reason`` (without the file name) and ``code`` (``missing``,
    ``loop``, ``unreadable``, ``not_regular``, ``too_large``)."""

    def __init__(self, path: str | os.PathLike, reason: str, code: str):
        self.path, self.reason, self.code = str(path), reason, code
        super().__init__(f"{printable(self.path)}: {reason}")


def format_size(n: int) -> str:
    """``50 MB``, ``512 kB``, ``1000 bytes``: a limit as people write it."""
    if n >= MB and n % MB == 0:
        return f"{n // MB} MB"
    return f"{n // 1024} kB" if n >= 1024 and n % 1024 == 0 else f"{n:,} bytes"


def _too_large(path: str | os.PathLike, size: int | None, limit: int, what: str) -> FileReadError:
    have = f"{size / MB:.1f} MB" if size is not None and size >= MB else (
        f"{size:,} bytes" if size is not None else "more")
    return FileReadError(path, f"{what} is {have}; the limit is {format_size(limit)}", "too_large")


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def check_regular(path: str | os.PathLike) -> os.stat_result:
    """``os.stat`` of ``path`` (symlinks followed) if it is a regular file, else :class:`FileReadError`."""
    try:
        st = os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise FileReadError(path, "cannot read the file: symlink loop (too many levels of symbolic links)",
                                "loop") from None
        if exc.errno == errno.ENOENT:
            broken = os.path.islink(path)
            raise FileReadError(path, "cannot read the file: " + (
                "broken symlink (its target does not exist)" if broken else "no such file"), "missing") from None
        raise FileReadError(path, f"cannot read the file: {exc.strerror or exc}", "unreadable") from None
    if not stat.S_ISREG(st.st_mode):
        raise FileReadError(path, f"not a regular file: it is {_kind(st.st_mode)}", "not_regular")
    return st


@contextmanager
def open_regular(path: str | os.PathLike) -> Iterator[BinaryIO]:
    """Open a regular file for binary reading (see the module docstring); refuses anything else."""
    check_regular(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        raise FileReadError(path, f"cannot read the file: {exc.strerror or exc}", "unreadable") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # replaced between the check and the open
            raise FileReadError(path, f"not a regular file: it is {_kind(mode)}", "not_regular")
        handle = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with handle:
        yield handle


def read_bounded(path: str | os.PathLike, limit: int, *, what: str = "the file") -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them (more: :class:`FileReadError` naming
    the limit). Never reads more than ``limit + 1`` bytes, whatever the file claims or becomes."""
    st = check_regular(path)
    if st.st_size > limit:
        raise _too_large(path, st.st_size, limit, what)
    with open_regular(path) as handle:
        parts, total = [], 0
        try:
            while total <= limit:
                part = handle.read(min(_CHUNK, limit + 1 - total))
                if not part:
                    break
                parts.append(part)
                total += len(part)
        except OSError as exc:
            raise FileReadError(path, f"cannot read the file: {exc.strerror or exc}", "unreadable") from None
    if total > limit:
        raise _too_large(path, None, limit, what)
    return b"".join(parts)


def read_lines_bounded(handle: BinaryIO, path: str | os.PathLike, max_line: int,
                       *, what: str = "a line") -> Iterator[tuple[int, int, bytes]]:
    """``(line number, byte offset, line)`` of an :func:`open_regular` handle; a line over ``max_line`` bytes is a
    :class:`FileReadError` naming the file, the line and the limit."""
    lineno, offset = 0, 0
    while True:
        try:
            line = handle.readline(max_line + 1)
        except OSError as exc:
            raise FileReadError(path, f"cannot read the file: {exc.strerror or exc}", "unreadable") from None
        if not line:
            return
        lineno += 1
        if len(line) > max_line and not (len(line) == max_line + 1 and line.endswith(b"\n")):
            raise FileReadError(f"{path}:{lineno}", f"{what} is longer than {format_size(max_line)}", "too_large")
        yield lineno, offset, line
        offset += len(line)


class FileWriteError(RagError, OSError):
    """An output file that could not be written (full disk, unwritable folder, I/O error), left unchanged;
    ``path`` is the file, ``reason`` the problem without the file name."""

    exit_code = EXIT_OUTPUT_NOT_WRITTEN
    http_status = 500

    def __init__(self, path: str | os.PathLike, reason: str):
        self.path, self.reason = str(path), reason
        super().__init__(f"{printable(self.path)}: {reason}")


def _reason(exc: OSError) -> str:
    return exc.strerror or str(exc) or type(exc).__name__


def _new_file_mode() -> int:
    """What ``open(path, "w")`` would give a new file: 0666 less the umask. Linux shows the umask in
    /proc/self/status; elsewhere it is read by setting it (a moment other threads could see)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as status:
            umask = next(int(line.split()[1], 8) for line in status if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        umask = os.umask(0o077)
        os.umask(umask)
    return 0o666 & ~umask


class OutputNotWritableError(BadInputError, OSError):
    """An ``--output`` that cannot be written, refused before any work (nothing written or created)."""


def check_writable(path: str | os.PathLike | None, *, example: str = "report.json") -> None:
    """Refuse an output path that is a directory, an existing file without write permission, or a missing file
    whose nearest existing parent is not a writable directory (:func:`atomic_output` creates missing parents)."""
    if path is None:
        return
    path = Path(path)
    shown = printable(path)
    if path.is_dir():
        raise OutputNotWritableError(f"--output {shown} is a directory; give a file name (e.g. "
                                     f"{printable(path / example)})")
    if path.exists():
        if not os.access(path, os.W_OK):
            raise OutputNotWritableError(f"--output {shown} is not writable")
        return
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise OutputNotWritableError(f"--output {shown}: {printable(parent)} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputNotWritableError(f"--output {shown}: directory {printable(parent)} is not writable")


@contextmanager
def atomic_output(path: str | os.PathLike, *, binary: bool = False, mode: int | None = None,
                  parents: bool = False) -> Iterator[IO]:
    """The one file writer: a handle on a temporary file in ``path``'s folder that replaces ``path`` (``fsync``,
    ``os.replace``) when the block ends without an error; otherwise ``path`` is left as it was.

    Permissions: ``mode`` (set from the creation), else ``path``'s, else 0666 less the umask. ``parents`` creates the
    folder. A failed write raises :class:`FileWriteError` naming ``path``; other errors propagate after the cleanup."""
    path = Path(path)
    try:
        if parents:
            path.parent.mkdir(parents=True, exist_ok=True)
        st = os.stat(path)
        keep = stat.S_IMODE(st.st_mode) if stat.S_ISREG(st.st_mode) else None
    except FileNotFoundError:
        keep = None
    except OSError as exc:
        raise FileWriteError(path, _reason(exc)) from None
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise FileWriteError(path, _reason(exc)) from None
    try:
        try:
            handle: IO = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")
        except BaseException:
            os.close(fd)
            raise
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
            os.fchmod(handle.fileno(), mode if mode is not None else keep if keep is not None else _new_file_mode())
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if isinstance(exc, OSError) and not isinstance(exc, FileWriteError):
            raise FileWriteError(path, _reason(exc)) from None
        raise
    _sync_folder(path.parent)


def _sync_folder(folder: Path) -> None:
    """``fsync`` the folder so the rename itself survives a crash (best effort: not every system allows it)."""
    try:
        fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return
    try:
        with suppress(OSError):
            os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: str | os.PathLike, data: str | bytes, *, mode: int | None = None, parents: bool = False) -> None:
    """Write ``data`` (text as UTF-8, or bytes) to ``path`` whole or not at all (:func:`atomic_output`)."""
    with atomic_output(path, binary=isinstance(data, bytes), mode=mode, parents=parents) as handle:
        handle.write(data)
