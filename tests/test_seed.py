"""Seeded worlds: the databases every case world needs, made once per workspace and copied with the cluster."""

import json
import os
import subprocess
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import psycopg
import pytest

from testhost.case.runner import CASE_SEED, T0
from testhost.errors import ClusterStartFailed
from testhost.world.store import ReferenceSeed, Snapshot, new_store
from testhost.world.workspace import SEED_MANIFEST, Workspace
from testhost.world.worlds import World


def _databases(world: World) -> set[str]:
    with psycopg.connect(world.admin_dsn(), autocommit=True) as conn:
        return {r[0] for r in conn.execute("select datname from pg_database")}


def _when_left_out(rows: dict[str, bytes]) -> dict[str, bytes]:
    """The rows with each migration's time of application left out: every template has its own."""
    migrations = rows["appsurface_durable.schema_migrations"].decode().splitlines()
    assert migrations and all(line.count("\t") == 3 for line in migrations)
    return {**rows, "appsurface_durable.schema_migrations": [line.rsplit("\t", 1)[0] for line in migrations]}


def _seed_path(workspace: Workspace, world: World) -> Path:
    return workspace.seed_path(workspace.template(world.cluster.install), CASE_SEED.key)


def test_the_seed_is_made_once_and_its_stores_are_fresh_clones_like_any_other(home):
    workspace = Workspace(home)
    with World("first", workspace=workspace, seed=CASE_SEED) as first:
        # The workspace's first world makes the initdb template and no seed: a workspace used once never needs it.
        path = _seed_path(workspace, first)
        assert workspace.seed_databases(path) is None and first.seed_databases == []
        unseeded = new_store(first, history_at=T0)
        fresh = Snapshot.of(unseeded)
    with World("maker", workspace=workspace, seed=CASE_SEED) as maker:
        kept = workspace.seed_databases(path)
        assert kept == ["store_seed_1", "store_seed_2"] and maker.seed_databases == kept
        # The kept copy holds the WAL segment of its shutdown checkpoint and no other.
        assert len([f for f in (path / "pg_wal").iterdir() if f.is_file()]) == 1
        assert set(kept) <= _databases(maker)
    with World("copier", workspace=workspace, seed=CASE_SEED) as copier:
        # Only the stores were kept, not the templates they came from.
        assert _databases(copier) == {"postgres", "template0", "template1", *kept}
        assert not (copier.cluster.datadir / SEED_MANIFEST).exists()
        handed = [new_store(copier, history_at=T0) for _ in range(3)]
        assert [s.dbname for s in handed[:2]] == kept and handed[2].dbname not in kept  # then clones, as before
        for store in handed:
            snapshot = Snapshot.of(store)
            assert (snapshot.digest, snapshot.tables, snapshot.partitions, _when_left_out(snapshot.rows),
                    snapshot.sequences) == (fresh.digest, fresh.tables, fresh.partitions, _when_left_out(fresh.rows),
                                            fresh.sequences)
        # Another month, or another schema, is never handed a seed's store.
        other = new_store(copier, history_at=datetime(2031, 12, 3, tzinfo=timezone.utc))
        assert other.dbname not in kept and copier.seed_databases == []


def test_two_worlds_starting_together_make_the_seed_once(home):
    workspace = Workspace(home)
    World("template", workspace=workspace).up().down()  # the initdb template, so the next worlds seed
    worlds = [World(f"racer-{n}", workspace=workspace, seed=CASE_SEED) for n in range(2)]
    failures = []

    def up(world):
        try:
            world.up()
        except Exception as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=up, args=(w,)) for w in worlds]
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert failures == []
        assert [w.seed_databases for w in worlds] == [["store_seed_1", "store_seed_2"]] * 2
        seeds = list((home / "templates").glob("*-seed-*"))
        assert seeds == [_seed_path(workspace, worlds[0])]
    finally:
        for w in worlds:
            w.down()


def test_a_data_directory_not_cleanly_stopped_is_never_kept(home):
    workspace = Workspace(home)
    with World("crashed", workspace=workspace) as world:
        world.cluster.crash()
        path = _seed_path(workspace, world)
        with pytest.raises(ClusterStartFailed, match="not cleanly stopped"):
            workspace.keep_seed(world.cluster.install, world.cluster.datadir, path, ["store_seed_1"])
        assert workspace.seed_databases(path) is None
        assert list((home / "templates").glob("*seed*")) == list((home / "templates").glob(".*seed*")) == []
        with pytest.raises(subprocess.CalledProcessError):  # a copy that fails leaves no half-made seed either
            workspace.keep_seed(world.cluster.install, home / "no-such-data", path, ["store_seed_1"])
        assert list((home / "templates").glob("*seed*")) == list((home / "templates").glob(".*seed*")) == []


def _fake_seed(templates: Path, name: str, idle_s: float) -> Path:
    seed = templates / name
    (seed / "base").mkdir(parents=True)
    (seed / SEED_MANIFEST).write_text(json.dumps({"databases": []}))
    when = time.time() - idle_s
    os.utime(seed / SEED_MANIFEST, (when, when))
    os.utime(seed, (when, when))
    return seed


def test_stale_seeds_of_other_keys_go_unless_a_world_copies_them(home):
    workspace = Workspace(home)
    templates = home / "templates"
    keep = _fake_seed(templates, "pg15.1-abc-seed-keep", 99_999)
    stale = _fake_seed(templates, "pg15.1-abc-seed-stale", 99_999)
    recent = _fake_seed(templates, "pg15.1-abc-seed-recent", 10)
    copied = _fake_seed(templates, "pg15.1-abc-seed-copied", 99_999)
    other_template = _fake_seed(templates, "pg16.2-abc-seed-stale", 99_999)
    half_made = templates / ".pg15.1-abc-seed-x.making-1234"
    half_made.mkdir()
    os.utime(half_made, (time.time() - 99_999,) * 2)
    with workspace.reading_seed(copied):
        gone = workspace.prune_seeds(keep)
    assert sorted(gone) == sorted([stale, half_made])
    assert all(p.exists() for p in (keep, recent, copied, other_template))
    # Copying a seed marks it used: it is no longer stale.
    assert time.time() - (copied / SEED_MANIFEST).stat().st_mtime < 60


def test_the_seeds_key_names_the_month_and_the_count():
    assert ReferenceSeed(T0).key == CASE_SEED.key
    assert len({ReferenceSeed(T0).key, ReferenceSeed(T0, stores=3).key,
                ReferenceSeed(datetime(2031, 4, 1, tzinfo=timezone.utc)).key}) == 3


def test_a_world_that_cannot_keep_its_seed_fails_to_start_and_leaves_nothing(home, monkeypatch):
    workspace = Workspace(home)
    World("template", workspace=workspace).up().down()  # the initdb template, so the next world makes the seed

    def refused(*_args, **_kwargs):
        raise ClusterStartFailed("the seed's data directory is not cleanly stopped: in production")

    monkeypatch.setattr(workspace, "keep_seed", refused)
    with pytest.raises(ClusterStartFailed, match="not cleanly stopped"):
        World("maker", workspace=workspace, seed=CASE_SEED).up()
    assert list((home / "worlds").iterdir()) == []
    assert list((home / "templates").glob("*seed*")) == list((home / "templates").glob(".*seed*")) == []
