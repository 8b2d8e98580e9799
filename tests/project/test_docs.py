"""Every Python example of the documentation runs.

The rule: every fenced block opened with a line that is exactly ```` ```python ````
in ``docs/*.md`` is a complete script, and runs on its own in a fresh process (as
``example.py`` in an empty folder, so worker processes can re-import it), unless its
first line is ``# not run``. Examples build their own tiny tables in temporary
folders. The example of a page in ``RUN_ELSEWHERE`` runs in the test named there
instead (once, with more checks), not here. Other fences (``bash``, ``text``) are
not run; the command line they show is tested by ``test_cli.py``. README.md's
examples run the same way.

The site itself is built with warnings as errors by ``scripts/test.sh``.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys

import pytest

import streaming

from doc_examples import DOCS, examples, python_blocks

EXAMPLES = examples()
RUN_ELSEWHERE = {
    # run from a wheel installed in a fresh venv, outside the checkout, as a user runs them
    "remote-tables.md": "tests/testing/test_installed.py::test_the_remote_tables_example_runs_installed",
    "testing.md": "tests/testing/test_installed.py::test_the_testing_example_runs_installed",
    # its two-node job runs once, there, with what every rank trained checked too
    "multinode.md": "tests/jobs/test_multinode.py::test_a_killed_rank_and_torchrun_restarts_both_nodes",
    # its Ray cluster and restart run once, there, with what every Ray worker trained checked too
    "ray.md": "tests/jobs/test_ray.py::test_the_ray_example_restarts_a_killed_worker",
}


def test_the_docs_have_examples():
    pages = {param.values[0] for param in EXAMPLES}
    for page in (
        "getting-started.md",
        "checkpointing.md",
        "resuming.md",
        "workers.md",
        "distributed.md",
        "multinode.md",
        "ray.md",
    ):
        assert page in pages, f"{page} has no runnable python example"


def test_examples_run_elsewhere_are_run_there():
    for page, test in RUN_ELSEWHERE.items():
        path, name = test.split("::")
        source = (DOCS.parent / path).read_text()
        assert f"def {name}(" in source and f'param.values[0] == "{page}"' in source, (
            f"{test} must run the example of docs/{page}"
        )
        assert len([param for param in EXAMPLES if param.values[0] == page]) == 1, page


@pytest.mark.parametrize(("page", "line", "code"), [p for p in EXAMPLES if p.values[0] not in RUN_ELSEWHERE])
def test_example_runs(page, line, code, tmp_path, short_tmp):
    script = tmp_path / "example.py"
    script.write_text(code)
    scratch = short_tmp
    # the installed package only, as a user has it: no checkout on the path (benchmarks/ is not there)
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"} | {"TMPDIR": str(scratch)}
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, (
        f"the example at docs/{page} line {line} failed:\n{result.stdout}\n{result.stderr}"
    )


def test_errors_page_names_every_exception_and_warning():
    text = (DOCS / "errors.md").read_text()
    public = [name for name in streaming.__all__ if name.endswith(("Error", "Warning"))]
    missing = [name for name in public if name not in text]
    assert not missing, f"docs/errors.md does not mention {missing}"


def test_python_blocks_are_found_and_skipped_by_the_rule():
    text = "intro\n```python\nprint(1)\n```\n\n```bash\nls\n```\n```python\n# not run\nx\n```\n"
    assert python_blocks(text) == [(3, "print(1)\n"), (10, "# not run\nx\n")]


def test_the_readme_install_builds_a_wheel_that_installs_and_runs(tmp_path):
    """The package is on no index: README's ``pip wheel`` of a checkout gives a wheel
    that installs (here offline, dependencies taken from this environment) and runs."""
    root = DOCS.parent
    section = (root / "README.md").read_text().split("## Install", 1)[1].split("\n## ", 1)[0]
    assert "pip wheel --no-deps -w dist ." in section and "pip install .\n" in section, section
    source = tmp_path / "checkout"  # what a checkout holds to build from, without our build outputs
    shutil.copytree(root / "streaming", source / "streaming", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, source / name)
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input"]
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    run = functools.partial(subprocess.run, env=env, capture_output=True, text=True, timeout=300, check=True)
    run([*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w", "dist", "."], cwd=source)
    (wheel,) = (source / "dist").glob("lance_streaming-*-py3-none-any.whl")
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages", str(venv)])
    python = venv / "bin" / "python"
    run([*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)], cwd=tmp_path)
    where = run([str(python), "-c", "import streaming; print(streaming.__file__)"], cwd=tmp_path).stdout
    assert where.startswith(str(venv)), f"imported {where}, not the installed wheel"
    usage = run([str(venv / "bin" / "lance-streaming"), "--help"], cwd=tmp_path).stdout
    assert "usage: lance-streaming" in usage
