"""A question's id and a split key hash its text one way: the values stores, datasets and run records hold must not
change with the code that makes them."""

from __future__ import annotations

import subprocess
import sys

from rapo_trl.question_ids import question_id_of
from rapo_trl.tasks.splits import split_of, stable_hash

# Known values: the first 12 hex digits of each text's SHA-1.
PINNED = {"What is 17 * 23?": ("307620786386", "train"), "Compute 0": ("70613c41e66a", "eval")}


def test_ids_and_split_keys_keep_their_known_values():
    for text, (digest, split) in PINNED.items():
        assert question_id_of(text) == stable_hash(text) == digest
        assert split_of(text) == split


def test_either_module_imports_first():
    for first, second in (("rapo_trl.question_ids", "rapo_trl.tasks"), ("rapo_trl.tasks.splits", "rapo_trl.question_ids")):
        subprocess.run([sys.executable, "-c", f"import {first}, {second}"], check=True)
