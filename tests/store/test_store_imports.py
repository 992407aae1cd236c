"""A process that only writes and reads a store (the lock's holders, ``rapo store stats``, a store server's client)
does not load torch: seconds of import on every such process."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap


def test_writing_and_reading_a_store_with_a_hashing_embedder_loads_no_torch(tmp_path):
    code = textwrap.dedent("""
        import json, sys
        from rapo_trl.embeddings import HashingEmbedder
        from rapo_trl.store import StoreConfig, TraceStore
        store = TraceStore(sys.argv[1], embedder=HashingEmbedder(64), config=StoreConfig(show_progress=False))
        added = store.add_trajectories(["<python>print(1)</python><result>1</result><answer>1</answer>"], [1.0], ["q1"])
        found = store.select(["<python>print(1)</python>"], top_k=1)
        store.close()
        print(json.dumps({"added": added, "found": len(found), "torch": "torch" in sys.modules}))
    """)
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path / "store")], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-3000:]
    seen = json.loads(run.stdout.strip().splitlines()[-1])
    assert seen["added"] > 0 and seen["found"] == 1
    assert seen["torch"] is False
