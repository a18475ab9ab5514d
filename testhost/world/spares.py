"""Spare data directories: a world going down leaves its data directory here, and the next world's copy of a template
or seed writes over its files instead of making new ones (docs/world.md, "Spare data directories")."""

from __future__ import annotations

import os
import shutil
import stat
import uuid
from pathlib import Path

FOLDER = "spares"
# Enough for the worlds a machine runs side by side (a test process's, a run's workers'); each is some 60 MB or more.
KEPT = max(4, (os.cpu_count() or 1) + 2)


def keep(spares: Path, datadir: Path, kept: int = KEPT) -> bool:
    """Move the data directory of a world whose server is gone into `spares`, unless `kept` are there already."""
    try:
        if len(os.listdir(spares)) >= kept:
            return False
        os.rename(datadir, spares / uuid.uuid4().hex[:12])
    except OSError:
        return False
    return True


def take(spares: Path, target: Path) -> bool:
    """Claim one spare as `target`, which must not exist. A rename: two worlds never claim the same one."""
    try:
        names = os.listdir(spares)
    except OSError:
        return False
    for name in names:
        try:
            os.rename(spares / name, target)
        except OSError:  # another world claimed it first
            continue
        return True
    return False


def copy_over(source: Path, target: Path, owner: tuple[int, int] | None = None) -> None:
    """Make the directory `target` a copy of `source` (contents and modes), writing over the files both hold: each
    keeps its inode. What only `source` holds is made (owned by `owner`, when given), what only `target` holds is
    removed. A symbolic link or other special file in `source` raises OSError: a data directory made here has none.

    Why: on a file system that skips recently freed inodes when it makes a file (ext4 without a journal searches
    past every inode freed in the last minutes, one by one), a copy made just after a world's removal cost ten times
    what it costs on an idle disk, and a test suite removes a world every few seconds."""
    _own(os.fspath(target), owner)
    os.chmod(target, stat.S_IMODE(os.stat(source).st_mode))
    _mirror(os.fspath(source), os.fspath(target), owner)


def _mirror(source: str, target: str, owner: tuple[int, int] | None) -> None:
    held = {entry.name: entry for entry in os.scandir(target)}
    for entry in os.scandir(source):
        path = os.path.join(target, entry.name)
        mode = stat.S_IMODE(entry.stat(follow_symlinks=False).st_mode)
        there = held.pop(entry.name, None)
        if entry.is_dir(follow_symlinks=False):
            if there is not None and not there.is_dir(follow_symlinks=False):
                os.unlink(path)
                there = None
            if there is None:
                os.mkdir(path, mode)
            _own(path, owner)
            os.chmod(path, mode)
            _mirror(entry.path, path, owner)
        elif entry.is_file(follow_symlinks=False):
            if there is not None and not there.is_file(follow_symlinks=False):
                _remove(there)
                there = None
            _copy_file(entry.path, path)
            if there is None:
                _own(path, owner)
                os.chmod(path, mode)
            else:
                held_stat = there.stat(follow_symlinks=False)
                if owner is not None and (held_stat.st_uid, held_stat.st_gid) != owner:
                    _own(path, owner)
                if stat.S_IMODE(held_stat.st_mode) != mode:
                    os.chmod(path, mode)
        else:
            raise OSError(f"{entry.path}: not a regular file or directory; a spare cannot copy it")
    for extra in held.values():
        _remove(extra)


def _copy_file(source: str, target: str) -> None:
    """The bytes of `source` written over `target` in place: an existing file keeps its inode and its blocks, and is
    cut to the source's size only when it was longer.

    Not O_TRUNC: truncating frees a file's blocks, and on a file system mounted with `discard` (this machine kind's
    root is) each freed extent is trimmed on the device there and then; rewriting a spare's 1,700 files so cost
    more than twice what writing over them in place does (world.md, "Spare data directories"). Comparing first and
    writing only the files a case changed (53 of a spare's 1,701 after one case) saved nothing measurable."""
    reading = os.open(source, os.O_RDONLY)
    try:
        writing = os.open(target, os.O_WRONLY | os.O_CREAT, 0o600)
        try:
            size, offset = os.fstat(reading).st_size, 0
            while offset < size:
                sent = os.sendfile(writing, reading, offset, size - offset)
                if not sent:
                    raise OSError(f"{source}: ended at byte {offset} of {size} while it was copied")
                offset += sent
            if os.fstat(writing).st_size != size:
                os.ftruncate(writing, size)
        finally:
            os.close(writing)
    finally:
        os.close(reading)


def _remove(entry: os.DirEntry) -> None:
    if entry.is_dir(follow_symlinks=False):
        shutil.rmtree(entry.path)
    else:
        os.unlink(entry.path)


def _own(path: str, owner: tuple[int, int] | None) -> None:
    if owner is not None:
        os.chown(path, *owner)
