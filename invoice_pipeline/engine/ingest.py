"""Bringing files in: the original bytes are stored first, before anything can fail on them.

The inbox is a folder anyone can drop anything into, so one bad entry must never stop intake.
Each entry is handled on its own:

- Only complete regular files are taken. Names starting with `.` and names ending in `.part`
  or `.tmp` are not looked at (write under such a name, then rename: the rename is atomic).
  A file is taken only when its size and mtime are the same in two scans, so a writer that
  does not rename is not read half-way.
- Nothing is followed: entries are examined with lstat and opened with O_NOFOLLOW, so a
  symlink (`inbox/acme/invoice.xml -> /etc/passwd`) is never read. A symlink, FIFO, socket or
  device, a file that cannot be read, or a file in a folder whose name is no org id, is moved
  to `inbox/.rejected/<same relative path>` with a `.reason.txt` beside it (or logged and left
  alone when it cannot be moved).
- A file that vanishes between the scan and the read is skipped. A file that changes while it
  is read waits for the next scan.
"""

from __future__ import annotations

import errno
import os
import stat
import time
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from psycopg_pool import PoolTimeout

from invoice_pipeline.engine.records import IngestResult
from invoice_pipeline.engine.store import InvoiceStore

DEFAULT_ORG = "default"
INGESTED_DIR = ".ingested"
REJECTED_DIR = ".rejected"
REASON_SUFFIX = ".reason.txt"
# Names a writer uses while a file is incomplete; the finished file is renamed into place.
IN_PROGRESS_SUFFIXES = (".part", ".tmp")
READ_CHUNK = 1024 * 1024


@dataclass(frozen=True)
class IngestedFile:
    path: Path
    org_id: str
    result: IngestResult


# A file nobody has written for this long is complete. Two scans a sensor tick (5 s) apart that
# agree on its size and mtime prove no more than that, so a file already quiet this long (moved
# in after it was written) need not wait for a second scan.
QUIET_SECONDS = 5


@dataclass(frozen=True)
class FileState:
    """What a scan saw of a file. The same state in two scans means nobody is writing it."""

    size: int
    mtime_ns: int

    @classmethod
    def of(cls, st: os.stat_result) -> FileState:
        return cls(st.st_size, st.st_mtime_ns)

    def complete(self, previous: FileState | None, now_ns: int) -> bool:
        """Unchanged since the last scan, or not written for QUIET_SECONDS (an mtime in the
        future, a clock skew, only counts through the first)."""
        return previous == self or now_ns - self.mtime_ns >= QUIET_SECONDS * 1_000_000_000


@dataclass(frozen=True)
class Rejected:
    path: Path
    reason: str
    moved_to: Path | None  # None: it could not be moved, and was left where it is


@dataclass(frozen=True)
class Skipped:
    """Left alone this time, with why (it vanished, a folder cannot be listed, ...)."""

    path: Path
    reason: str


@dataclass
class InboxPass:
    ingested: list[IngestedFile] = field(default_factory=list)
    rejected: list[Rejected] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    # Files seen but not taken yet, by path relative to the inbox: the next pass compares with these.
    waiting: dict[str, FileState] = field(default_factory=dict)
    # Set when the pass stopped early because the database could not be reached.
    error: str | None = None


class FileChanged(Exception):
    """The file is being written: its size or mtime moved since the scan, or during the read."""

    def __init__(self, state: FileState) -> None:
        super().__init__(f"changed while being read (now {state.size} bytes)")
        self.state = state


class NotRegularFile(Exception):
    pass


# -- names -----------------------------------------------------------------------------------


def is_ignored_name(name: str) -> bool:
    """Dotfiles (editor swap files, our own .ingested/.rejected) and in-progress names."""
    return name.startswith(".") or name.lower().endswith(IN_PROGRESS_SUFFIXES)


def org_problem(name: str) -> str | None:
    """Why a folder name cannot be an org id, or None when it can."""
    if _has_undecodable_bytes(name):
        return f"folder name {display_name(name)!r} is not valid UTF-8, so it cannot be an org id"
    if not name.strip():
        return f"folder name {name!r} is blank, so it cannot be an org id"
    if name != name.strip():
        return f"folder name {name!r} starts or ends with whitespace, so it cannot be an org id"
    if any(unicodedata.category(c).startswith("C") for c in name):
        return f"folder name {name!r} contains control characters, so it cannot be an org id"
    return None


def display_name(name: str) -> str:
    """A file name as text: bytes that are not UTF-8 are shown as \\xNN escapes.

    POSIX names are bytes; Python decodes undecodable ones to lone surrogates, which PostgreSQL
    text cannot hold. The escaped form is lossless enough for a person to find the file.
    """
    if not _has_undecodable_bytes(name):
        return name
    return os.fsencode(name).decode("utf-8", "backslashreplace")


def _has_undecodable_bytes(name: str) -> bool:
    return any("\udc80" <= c <= "\udcff" for c in name)


# -- reading one file safely -------------------------------------------------------------------


def read_regular_file(path: Path, expected: FileState | None = None) -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file, never through a symlink, never blocking on a FIFO.

    O_NOFOLLOW refuses a symlink swapped in after the scan; O_NONBLOCK keeps a FIFO swapped in
    from blocking the open; fstat on the open descriptor checks what was actually opened. With
    `expected`, the file must still be in that state, before and after the read.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegularFile(
                "it became a symbolic link after the scan; links are never followed"
            ) from None
        raise
    try:
        before = os.fstat(fd)
        if not stat.S_ISREG(before.st_mode):
            raise NotRegularFile(f"it is a {_kind(before.st_mode)}, not a regular file")
        if expected is not None and FileState.of(before) != expected:
            raise FileChanged(FileState.of(before))
        chunks = []
        while chunk := os.read(fd, READ_CHUNK):
            chunks.append(chunk)
        after = os.fstat(fd)
        content = b"".join(chunks)
        if FileState.of(after) != FileState.of(before) or len(content) != after.st_size:
            raise FileChanged(FileState.of(after))
        return content, after
    finally:
        os.close(fd)


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "symbolic link"
    if stat.S_ISFIFO(mode):
        return "FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    if stat.S_ISDIR(mode):
        return "folder"
    return "special file"


def _not_regular_reason(path: Path, mode: int) -> str:
    if stat.S_ISLNK(mode):
        try:
            target = display_name(os.readlink(path))
        except OSError:
            target = "?"
        return f"it is a symbolic link (to {target!r}); links are never followed"
    return f"it is a {_kind(mode)}, not a regular file"


# -- the inbox -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScannedEntry:
    path: Path
    relative: Path  # to the inbox
    st: os.stat_result  # from lstat: what the entry itself is, never what a link points to


@dataclass(frozen=True)
class InboxScan:
    inbox: Path
    entries: list[ScannedEntry]
    skipped: list[Skipped]


def _walk(root: Path) -> Iterator[ScannedEntry | Skipped]:
    """Every entry under root, by lstat: folders are entered (never through a link), the rest yielded."""
    stack = [root]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as it:
                names = sorted(e.name for e in it)
        except FileNotFoundError:
            continue  # vanished since its parent was listed
        except OSError as exc:
            yield Skipped(folder, f"cannot list this folder: {exc.strerror or exc}")
            continue
        subfolders = []
        for name in names:
            if is_ignored_name(name):
                continue
            path = folder / name
            try:
                st = os.lstat(path)
            except FileNotFoundError:
                continue  # vanished between the listing and the lstat: nothing left to take
            except OSError as exc:
                yield Skipped(path, f"cannot examine it: {exc.strerror or exc}")
                continue
            if stat.S_ISDIR(st.st_mode):
                subfolders.append(path)
            else:
                yield ScannedEntry(path, path.relative_to(root), st)
        stack.extend(reversed(subfolders))


def scan_inbox(inbox: Path) -> InboxScan:
    """List the inbox (nothing is opened): the first half of ingest_inbox."""
    entries: list[ScannedEntry] = []
    skipped: list[Skipped] = []
    if inbox.is_dir():
        for item in _walk(inbox):
            if isinstance(item, Skipped):
                skipped.append(item)
            else:
                entries.append(item)
    return InboxScan(inbox, entries, skipped)


def ingest_inbox(
    store: InvoiceStore, inbox: Path, previous: Mapping[str, FileState] | None = None
) -> InboxPass:
    """Files in `inbox/<org>/...` belong to that org; files directly in the inbox to the default org.

    `previous` is what the last pass saw (its `waiting`): a file is read only when it is in
    the same state now, or was last written QUIET_SECONDS ago. A stored file moves to `<its folder>/.ingested/` so the next scan skips
    it; if that move fails, the next scan stores the same bytes again, which is a no-op.
    """
    return take_scanned(store, scan_inbox(inbox), previous)


def take_scanned(
    store: InvoiceStore, scan: InboxScan, previous: Mapping[str, FileState] | None = None
) -> InboxPass:
    """Reject the bad entries, store the complete files, remember the rest: each entry on its own."""
    inbox = scan.inbox
    done = InboxPass(skipped=list(scan.skipped))
    now_ns = time.time_ns()
    for entry in scan.entries:
        org_folder = entry.relative.parts[0] if len(entry.relative.parts) > 1 else None
        problem = org_problem(org_folder) if org_folder is not None else None
        if problem is not None:
            done.rejected.append(reject(inbox, entry.path, problem))
            continue
        if not stat.S_ISREG(entry.st.st_mode):
            done.rejected.append(reject(inbox, entry.path, _not_regular_reason(entry.path, entry.st.st_mode)))
            continue
        key = str(entry.relative)
        state = FileState.of(entry.st)
        if done.error is not None or not state.complete((previous or {}).get(key), now_ns):
            done.waiting[key] = state  # new, still growing, or the database is away: next pass
            continue
        try:
            content, opened = read_regular_file(entry.path, state)
        except FileNotFoundError:
            done.skipped.append(Skipped(entry.path, "it vanished between the scan and the read"))
            continue
        except FileChanged as exc:
            done.waiting[key] = exc.state
            continue
        except NotRegularFile as exc:
            done.rejected.append(reject(inbox, entry.path, str(exc)))
            continue
        except OSError as exc:
            done.rejected.append(reject(inbox, entry.path, f"it cannot be read: {exc.strerror or exc}"))
            continue
        org_id = org_folder or DEFAULT_ORG
        try:
            result = store.documents.store_document(content, org_id, display_name(entry.path.name))
        except (psycopg.OperationalError, PoolTimeout) as exc:
            # Not this file's fault, and every other file would fail the same way: store no
            # more this pass, but keep rejecting bad entries and remembering the good ones.
            done.waiting[key] = state
            done.error = f"the database could not be reached: {' '.join(str(exc).split())}"
            continue
        except Exception as exc:  # the database refused this entry: isolate it, go on
            done.rejected.append(
                reject(inbox, entry.path, f"it could not be stored: {type(exc).__name__}: {exc}")
            )
            continue
        done.ingested.append(IngestedFile(_move_to_ingested(entry.path, opened), org_id, result))
    return done


def _move_to_ingested(path: Path, opened: os.stat_result) -> Path:
    """Move a stored file aside; leave it if the name now holds another file (renamed over since)."""
    target = path.parent / INGESTED_DIR / path.name
    try:
        current = os.lstat(path)
        if (current.st_dev, current.st_ino) != (opened.st_dev, opened.st_ino):
            return path  # a new file took the name: the next scans take it
        target.parent.mkdir(exist_ok=True)
        os.replace(path, target)
    except OSError:
        return path  # the next scan stores the same bytes again: a no-op
    return target


def reject(inbox: Path, path: Path, reason: str) -> Rejected:
    """Move an entry to `inbox/.rejected/<its relative path>` with a reason file beside it.

    The move is a rename, so a symlink moves as a link and its target is never touched. An
    entry that cannot be moved (a read-only folder) is left where it is; the caller logs it.
    """
    relative = path.relative_to(inbox)
    target = _free_name(inbox / REJECTED_DIR / relative)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        os.rename(path, target)
    except FileNotFoundError:
        return Rejected(path, reason + " (it vanished before it could be moved)", None)
    except OSError as exc:
        return Rejected(path, f"{reason} (and it could not be moved: {exc.strerror or exc})", None)
    note = (
        f"rejected at {time.strftime('%Y-%m-%dT%H:%M:%S%z')} by invoice-pipeline intake\n"
        f"from: {display_name(str(relative))}\n"
        f"reason: {reason}\n"
        "To ingest it after fixing it, move it back into the inbox as a regular file.\n"
    )
    try:
        target.with_name(target.name + REASON_SUFFIX).write_text(note, errors="backslashreplace")
    except OSError:
        pass  # the move is what matters; the caller logs the reason too
    return Rejected(path, reason, target)


def _free_name(target: Path) -> Path:
    """target, or target.1, target.2, ...: a rejected name never overwrites an earlier one."""
    candidate, n = target, 0
    while os.path.lexists(candidate) or os.path.lexists(candidate.with_name(candidate.name + REASON_SUFFIX)):
        n += 1
        candidate = target.with_name(f"{target.name}.{n}")
    return candidate


# -- explicit paths (the CLI) --------------------------------------------------------------------


def collect_files(paths: Iterable[Path]) -> list[Path]:
    """Every file the paths name, checked before anything is stored.

    A file named on the command line is taken as given (a link the person typed is followed);
    inside a folder, only regular files are taken, by lstat, and ignored names are skipped.
    Raises FileNotFoundError naming every argument that is not a file or a folder.
    """
    files: list[Path] = []
    missing: list[str] = []
    special: list[str] = []
    for path in paths:
        if path.is_dir():
            files += [
                e.path for e in _walk(path) if isinstance(e, ScannedEntry) and stat.S_ISREG(e.st.st_mode)
            ]
        elif path.is_file():
            files.append(path)
        elif os.path.lexists(path):
            special.append(display_name(str(path)))
        else:
            missing.append(display_name(str(path)))
    problems = [f"no such file or folder: {', '.join(missing)}"] if missing else []
    problems += [f"not a regular file or folder: {', '.join(special)}"] if special else []
    if problems:
        raise FileNotFoundError("; ".join(problems))
    return files


def ingest_files(store: InvoiceStore, files: Iterable[Path], org_id: str = DEFAULT_ORG) -> list[IngestedFile]:
    """Store each file's bytes and create its invoice; the same bytes twice are one invoice.

    Nothing is parsed here: an unreadable file still becomes an invoice, which the pipeline
    then quarantines with a reason — it is never dropped on the floor.
    """
    return [
        IngestedFile(
            path, org_id, store.documents.store_document(path.read_bytes(), org_id, display_name(path.name))
        )
        for path in files
    ]


def ingest_paths(store: InvoiceStore, paths: Iterable[Path], org_id: str = DEFAULT_ORG) -> list[IngestedFile]:
    """collect_files, then ingest_files: a bad argument stores nothing."""
    return ingest_files(store, collect_files(paths), org_id)
