"""The README's main job runs in fresh processes and proves exactly-once delivery."""

from __future__ import annotations

import subprocess
import sys


def test_demo_resumes_on_another_world_size_exactly(tmp_path):
    """2 ranks x 2 workers, then 1 rank x 2 workers, all real processes (gloo).

    The merged checkpoint of two ranks resumes on one: a world size the checkpoint was
    not written on. Two ranks and one, rather than four and two, because each rank
    starts an interpreter and a fork server (both import torch), the bulk of the time.
    """
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "streaming",
            "demo",
            "--workdir",
            str(tmp_path),
            "--world-size",
            "2",
            "--resume-world-size",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "duplicates: 0, missing: 0, rows from after the checkpoint: 0" in result.stdout
    assert "trained 40 steps on 2 ranks x 2 workers" in result.stdout
    assert "resumed on 1 ranks x 2 workers" in result.stdout
    assert "OK: every planned sample was delivered exactly once" in result.stdout


def test_cli_usage_error_exits_2():
    result = subprocess.run(
        [sys.executable, "-m", "streaming", "frobnicate"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert "invalid choice" in result.stderr
