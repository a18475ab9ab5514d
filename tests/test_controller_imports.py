"""A run's controller plans, hands out cases and writes the report; the worlds, and the libraries that talk to them,
live in its workers. Importing them in the controller cost every run 0.3 CPU-s (docs/performance.md)."""

import subprocess
import sys
import textwrap

import pytest

WORLD_LIBRARIES = ("psycopg", "requests", "toxiproxy")


@pytest.mark.parametrize("module", ["testhost.cli", "testhost.runs.certify", "testhost.runs.mutation",
                                    "testhost.runs.run_report", "testhost.pytest_plugin"])
def test_a_controller_module_imports_no_database_or_proxy_client(module):
    probe = f"import sys, {module}; print(sorted(m for m in {WORLD_LIBRARIES!r} if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]", f"{module} imports {done.stdout.strip()}"


# Run as a script (a worker is spawned, and re-imports its parent's main module): records, in the controller only,
# the first import of a world library and where it came from.
_WATCHED_RUN = textwrap.dedent("""
    import sys, traceback
    LIBRARIES = {libraries!r}

    class Watch:
        def find_spec(self, name, path=None, target=None):
            if name in LIBRARIES:
                where = [f"{{f.filename}}:{{f.lineno}}" for f in traceback.extract_stack() if "<frozen" not in f.filename]
                print("imported", name, "from", " <- ".join(reversed(where[-4:-1])), flush=True)
            return None

    if __name__ == "__main__":
        sys.meta_path.insert(0, Watch())
        from testhost.cli import main
        code = main(["certify", "--case", "at-single/schedule-link-after-commit/kill/1", "--jobs", "1",
                     "--report-dir", sys.argv[1]])
        print("exit", code, flush=True)
""")


@pytest.mark.world
def test_a_certify_controller_never_imports_them_while_its_run_goes_on(tmp_path):
    script = tmp_path / "watched.py"
    script.write_text(_WATCHED_RUN.format(libraries=WORLD_LIBRARIES))
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "report")], capture_output=True, text=True,
                          timeout=300)
    lines = done.stdout.splitlines()
    assert "exit 0" in lines, done.stdout[-2000:] + done.stderr[-2000:]
    assert [line for line in lines if line.startswith("imported")] == []
