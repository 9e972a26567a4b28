"""The commit a calibration run measured, shared by the two report scripts
(tests/conformance/report.py and tests/conformance/limiters/report.py): each
row they write into docs/measurements/calibration.md carries it."""

import os
import subprocess


def measured_at():
    """The commit this run measured: the page stamps each row with it."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=os.path.dirname(os.path.abspath(__file__)),
            capture_output=True, text=True, check=True,
        )
        return out.stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown commit"
