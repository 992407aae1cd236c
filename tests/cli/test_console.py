"""The `rapo` command's logging under a multi-process launch."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

LOG_A_LINE = """
import logging
from rapo_trl.cli.console import configure_console
configure_console()
logging.getLogger("rapo_trl.cli.warm_start").info("an info line")
logging.getLogger("rapo_trl.cli.warm_start").warning("a warning")
"""


@pytest.mark.parametrize("rank", ["0", "1"])
def test_info_lines_are_logged_by_the_launch_s_first_process_alone(rank):
    # torchrun runs `rapo train` in every process: each logged its INFO lines (reusing a warm start, SFT's loss),
    # so they came once per process; warnings still come from every process, whichever it concerns.
    env = {**os.environ, "RANK": rank}
    done = subprocess.run([sys.executable, "-c", LOG_A_LINE], env=env, capture_output=True, text=True, check=True)
    assert ("an info line" in done.stderr) == (rank == "0")
    assert "a warning" in done.stderr
