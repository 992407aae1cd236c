"""scripts/torch_index.py: setup.sh takes torch's CPU build from PyTorch's CPU index on a machine without a GPU
where that index answers, and otherwise falls back to pip's configured indexes (offline here) and says so."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
from pathlib import Path

SCRIPTS = Path(__file__).parent.parent / "scripts"


class _Index(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        found = self.path == "/whl/cpu/torch/"
        self.send_response(200 if found else 404)
        self.end_headers()
        self.wfile.write(b"<a href='torch-2.13.0+cpu.whl'>torch</a>" if found else b"")

    def log_message(self, *args):
        pass


def _run(index: str, path: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAPO_TORCH_INDEX": index, "PATH": path}
    return subprocess.run([sys.executable, str(SCRIPTS / "torch_index.py")], env=env, capture_output=True,
                          text=True, timeout=60)


def test_cpu_index_when_it_answers_and_no_gpu(tmp_path):
    server = http.server.HTTPServer(("127.0.0.1", 0), _Index)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        index = f"http://127.0.0.1:{server.server_port}/whl/cpu"
        run = _run(index, str(tmp_path))  # no nvidia-smi on this PATH
        assert run.returncode == 0, run.stderr
        assert run.stdout.split() == ["--extra-index-url", index]
        assert "CPU build" in run.stderr
        unreachable = _run(f"http://127.0.0.1:{server.server_port}/missing", str(tmp_path))
    finally:
        server.shutdown()
    assert unreachable.stdout.strip() == "" and "not reachable" in unreachable.stderr


def test_a_gpu_machine_keeps_pips_indexes(tmp_path):
    (tmp_path / "nvidia-smi").write_text("#!/bin/sh\nexit 0\n")
    (tmp_path / "nvidia-smi").chmod(0o755)
    run = _run("http://127.0.0.1:9/unused", str(tmp_path))
    assert run.stdout.strip() == "" and "GPU" in run.stderr


def test_setup_sh_passes_its_arguments_to_the_torch_install():
    setup = (SCRIPTS / "setup.sh").read_text()
    assert '$("$VENV/bin/python" scripts/torch_index.py) "torch==' in setup
