"""Spare data directories: a world going down leaves its data directory for the next world to write over, so that a
world's start makes and frees no files (testhost/world/spares.py)."""

import os
import stat
from pathlib import Path

import psycopg
import pytest

from testhost.world import spares
from testhost.world.workspace import Workspace
from testhost.world.worlds import World


def _tree(root: Path) -> dict[str, tuple]:
    """Every entry under root: its kind, mode and, for a file, its bytes."""
    found = {}
    for path in sorted(root.rglob("*")):
        mode = path.lstat().st_mode
        found[str(path.relative_to(root))] = (stat.S_IFMT(mode), stat.S_IMODE(mode),
                                             path.read_bytes() if path.is_file() else None)
    return found


def _write(path: Path, data: bytes, mode: int = 0o600) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    os.chmod(path, mode)


def test_copy_over_makes_the_copy_and_keeps_the_inodes_of_the_files_both_hold(tmp_path):
    source, target = tmp_path / "source", tmp_path / "target"
    _write(source / "PG_VERSION", b"15\n")
    _write(source / "base" / "1" / "1259", b"a" * 20000)
    _write(source / "base" / "1" / "empty", b"")
    _write(source / "global" / "pg_control", b"control", 0o640)
    _write(source / "was_a_dir", b"now a file")
    (source / "pg_wal" / "archive_status").mkdir(parents=True)
    _write(source / "became_a_dir" / "inside", b"x")
    os.chmod(source, 0o700)
    # The spare: a longer and a shorter version of two files, what a case left behind, and two kinds swapped.
    _write(target / "PG_VERSION", b"14 and some more bytes\n", 0o644)
    _write(target / "base" / "1" / "1259", b"b" * 5)
    _write(target / "base" / "16400" / "2619", b"a store's file")
    _write(target / "pg_wal" / "000000010000000000000007", b"wal")
    _write(target / "postmaster.pid", b"4242")
    _write(target / "was_a_dir" / "inside", b"y")
    _write(target / "became_a_dir", b"a file")
    kept = {name: (target / name).stat().st_ino for name in ("PG_VERSION", "base/1/1259")}
    os.chmod(target, 0o755)

    spares.copy_over(source, target)

    assert _tree(target) == _tree(source)
    assert stat.S_IMODE(target.stat().st_mode) == 0o700
    assert {name: (target / name).stat().st_ino for name in kept} == kept  # written over, not made anew


def test_a_source_that_ends_before_its_size_is_an_error_not_a_short_copy(tmp_path, monkeypatch):
    source, target = tmp_path / "source", tmp_path / "target"
    _write(source / "base" / "1" / "1259", b"a" * 20000)
    _write(target / "base" / "1" / "1259", b"b" * 20000)
    monkeypatch.setattr(os, "sendfile", lambda *args: 0)  # the file cut short by something else meanwhile
    with pytest.raises(OSError, match=r"1259: ended at byte 0 of 20000 while it was copied"):
        spares.copy_over(source, target)


def test_copy_over_refuses_what_a_data_directory_never_holds(tmp_path):
    source, target = tmp_path / "source", tmp_path / "target"
    _write(source / "file", b"x")
    (source / "link").symlink_to("file")
    target.mkdir()
    with pytest.raises(OSError, match="not a regular file or directory"):
        spares.copy_over(source, target)


def test_spares_are_kept_up_to_their_number_and_each_is_claimed_once(tmp_path):
    folder = tmp_path / "spares"
    folder.mkdir()
    made = []
    for n in range(3):
        _write(tmp_path / f"world{n}" / "data" / "PG_VERSION", b"15\n")
        made.append(tmp_path / f"world{n}" / "data")
    assert spares.keep(folder, made[0], kept=2) and spares.keep(folder, made[1], kept=2)
    assert not spares.keep(folder, made[2], kept=2) and made[2].exists()  # the third is the world's to remove
    assert not spares.keep(folder, tmp_path / "no-such", kept=5)
    claimed = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    assert [spares.take(folder, path) for path in claimed] == [True, True, False]
    assert (claimed[0] / "PG_VERSION").read_bytes() == (claimed[1] / "PG_VERSION").read_bytes() == b"15\n"
    assert list(folder.iterdir()) == []
    assert not spares.take(tmp_path / "no-such-folder", tmp_path / "d")


def _answers(world: World) -> int:
    with psycopg.connect(world.admin_dsn(), autocommit=True) as conn:
        return conn.execute("select count(*) from pg_database").fetchone()[0]


@pytest.mark.world
def test_a_world_starts_on_the_spare_the_last_one_left_and_leaves_its_own(home):
    workspace = Workspace(home)
    with World("first", workspace=workspace) as first:
        databases = _answers(first)
        with psycopg.connect(first.admin_dsn(), autocommit=True) as conn:
            conn.execute("create database left_behind")  # a case's files: the next world must not see them
    (spare,) = workspace.spares.iterdir()
    inode = (spare / "PG_VERSION").stat().st_ino
    assert list((home / "worlds").iterdir()) == []
    with World("second", workspace=workspace) as second:
        assert list(workspace.spares.iterdir()) == []  # claimed
        assert (second.cluster.datadir / "PG_VERSION").stat().st_ino == inode  # its files written over
        assert _answers(second) == databases
        template = workspace.template(second.cluster.install)
        assert second.cluster.datadir.stat().st_uid == template.stat().st_uid
        assert stat.S_IMODE(second.cluster.datadir.stat().st_mode) == 0o700
    assert len(list(workspace.spares.iterdir())) == 1


@pytest.mark.world
def test_a_spare_that_cannot_be_written_over_is_removed_and_the_world_copies_afresh(home, monkeypatch):
    workspace = Workspace(home)
    World("first", workspace=workspace).up().down()
    written = spares.copy_over

    def full_disk(source, target, owner=None):
        written(source, target, owner)
        (Path(target) / "half-written").write_bytes(b"")  # the file the disk had no room for
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(spares, "copy_over", full_disk)
    with World("second", workspace=workspace) as second:
        assert list(workspace.spares.iterdir()) == []
        assert not (second.cluster.datadir / "half-written").exists()  # a copy of its own, not the spare
        assert _answers(second) >= 3
    assert [p.name for p in (home / "worlds").iterdir()] == []
