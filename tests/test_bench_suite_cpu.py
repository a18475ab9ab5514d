"""bench/suite_cpu.py: each test's CPU, its reaped children's included, and the summary that ranks them."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from bench.suite_cpu import summary

ROOT = Path(__file__).parent.parent


def test_each_tests_cpu_is_written_with_its_childrens_and_ranked(tmp_path):
    (tmp_path / "test_burn.py").write_text(textwrap.dedent('''
        import subprocess, sys, time

        def _burn(seconds):
            end = time.process_time() + seconds
            while time.process_time() < end:
                pass

        def test_itself():
            _burn(0.4)

        def test_in_a_child():
            subprocess.run([sys.executable, "-c", "import time\\nend = time.process_time() + 0.6\\n"
                            "while time.process_time() < end: pass"], check=True)

        def test_idle():
            time.sleep(0.3)
    '''))
    out = tmp_path / "cpu"
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "bench.suite_cpu",
                           str(tmp_path / "test_burn.py")], cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "CRASHPROOF_SUITE_CPU": str(out), "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stdout + done.stderr
    figures = {line.split(" ", 1)[1].split("::")[1]: float(line.split(" ", 1)[0])
               for path in out.glob("*.txt") for line in path.read_text().splitlines()}
    assert figures["test_itself"] >= 0.35 and figures["test_in_a_child"] >= 0.55 and figures["test_idle"] < 0.2
    ranked = summary(out).splitlines()
    assert ranked[0].startswith("3 tests, ")
    tests = [line.split("::")[-1] for line in ranked if "::" in line]
    assert tests == ["test_in_a_child", "test_itself", "test_idle"]


def test_a_folder_with_nothing_recorded_is_a_clear_error(tmp_path):
    with pytest.raises(SystemExit, match="no test's CPU recorded there"):
        summary(tmp_path)
