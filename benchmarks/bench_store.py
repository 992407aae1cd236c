"""Trace-store benchmark at the paper's scale (169,489 step records).

What it measures:
  * build: keys/s of the real all-MiniLM-L6-v2 embedder (fp32 and bf16 probed, the faster one used)
    on realistic synthetic keys, and records/s of indexing into Chroma through ``TraceStore.add_records``;
  * ``select`` for a batch of 64 contexts at 10k, 100k and 170k records: embedding (real MiniLM)
    and search, p50/p99, wall and CPU time. The search is measured side by side in one process,
    variants alternating batch by batch: ``old`` (the first implementation: one Chroma query with
    metadatas for all 3x64 neighbours, rule in Python), ``new`` (query with distances only, rewards
    from the store's in-memory map, one ``get`` for the 64 winners), ``new, cold map`` (a second
    store object whose reward map is emptied before every batch: the candidates' rewards come from
    one extra ``get``) and ``local hnsw`` (``StoreConfig(local_index="hnsw")``: hnswlib in-process,
    one ``get`` for the winners; only when hnswlib is installed);
  * recall@3 of Chroma's HNSW against exact numpy search on the same vectors, and an ``ef_search``
    sweep at the largest size.

Embedding 170k keys with MiniLM takes 10+ minutes on 2 cores, so the real model embeds a sample
(``--embed-sample`` keys); the other records get synthetic vectors clustered around those real ones
(one centre per question, noise on top), and build time at full scale = measured indexing time +
embedding time extrapolated from the measured keys/s. The output says so.

    python benchmarks/bench_store.py            # full (about 18 minutes on a busy 2-core machine)
    python benchmarks/bench_store.py --quick    # smoke run (small sizes, under a minute)
    python benchmarks/bench_store.py --synthetic-only --ef-sweep ""   # search latency only, no model

``--synthetic-only`` loads no model: cluster centres are random unit vectors and the queries are
perturbed stored vectors (no embedding or build-throughput figures).
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # common.py, however this is loaded
from common import machine_info, markdown_table, native_bf16, use_offline_environment  # noqa: E402

use_offline_environment()  # before sentence-transformers and chromadb are imported

import numpy as np  # noqa: E402

PAPER_RECORDS = 169_489

_NAMES = ["Ava", "Liam", "Noah", "Mia", "Zoe", "Omar", "Ines", "Ravi", "Kenji", "Lena", "Tariq", "Sofia"]
_ITEMS = ["apples", "pencils", "tickets", "books", "marbles", "cupcakes", "stamps", "bolts", "tiles", "seeds"]
_TOPICS = ["the Treaty of Westphalia", "the river Danube", "the composer of Rusalka", "the tallest peak in Chile",
           "the first transatlantic cable", "the inventor of the stethoscope", "the capital of Bhutan",
           "the author of Solaris", "the longest bridge in Denmark", "the founder of the Red Cross"]


def _math_question(rng: random.Random) -> tuple[str, list[str]]:
    name, item = rng.choice(_NAMES), rng.choice(_ITEMS)
    a, b, c = rng.randint(3, 90), rng.randint(2, 15), rng.randint(2, 9)
    question = (f"{name} buys {a} boxes of {item}. Each box holds {b} {item}, and {name} gives away "
                f"{c} {item} to each of {rng.randint(2, 8)} friends. How many {item} are left?")
    steps = []
    for turn in range(rng.choice([1, 2, 2, 3, 3, 3, 4])):
        x, y = rng.randint(2, 999), rng.randint(2, 99)
        steps.append(
            f"<think>\nStep {turn + 1}: I need the total number of {item} first, then subtract what was given "
            f"away. Let me verify {x} * {y} and the remaining count with Python to avoid arithmetic slips."
            f"\n</think>\n<python>\ntotal = {a} * {b}\ngiven = {c} * {y % 8 + 2}\nprint(total, given, total - given, "
            f"{x} * {y})\n</python>\n<result>\n{a * b} {c * (y % 8 + 2)} {a * b - c * (y % 8 + 2)} {x * y}\n</result>"
        )
    steps.append(f"<think>\nThe computation checks out, so the answer is {a * b - c}.\n</think>\n"
                  f"<answer>\nThe number left is \\boxed{{{a * b - c}}}.\n</answer>")
    return question, steps


def _qa_question(rng: random.Random) -> tuple[str, list[str]]:
    topic, other = rng.choice(_TOPICS), rng.choice(_TOPICS)
    year = rng.randint(1600, 2020)
    question = f"Which event happened first: the founding year of {topic} or the birth of {other}'s mentor?"
    steps = []
    for turn in range(rng.choice([1, 2, 2, 3, 3])):
        query = rng.choice([topic, other, f"{topic} year", f"{other} mentor born"])
        steps.append(
            f"<think>\nI should look up {query} to compare the dates (attempt {turn + 1}).\n</think>\n"
            f"<search>\n{query}\n</search>\n<result>\nDoc 1: {query.title()} is documented in {year + turn} "
            f"by several sources, including regional archives.\nDoc 2: Records of {other} mention a mentor "
            f"born in {year - rng.randint(5, 60)}; see also {rng.choice(_TOPICS)}.\n</result>"
        )
    steps.append(f"<think>\nComparing {year} with the mentor's birth year, the mentor came first.\n</think>\n"
                 f"<answer>\n\\boxed{{the birth of {other}'s mentor}}\n</answer>")
    return question, steps


def synthetic_records(n_records: int, seed: int = 0):
    """Step records from synthetic tagged trajectories: 5 per question, mixed math/QA."""
    from rapo_trl.store import step_records

    rng = random.Random(seed)
    records, question_index = [], 0
    while len(records) < n_records:
        maker = _math_question if question_index % 2 == 0 else _qa_question
        for sample in range(5):
            question, steps = maker(random.Random(seed * 1_000_003 + question_index * 7 + sample))
            reward = round(rng.choice([1.0, 1.1, 0.5, 0.0, -1.0]), 2)
            records += step_records("\n".join(steps), reward, f"q{question_index}", question, "bench")
        question_index += 1
    return records[:n_records]


def query_contexts(n: int, seed: int = 12345) -> list[str]:
    """Held-out raw contexts (question + some completed steps), as the rollout would send."""
    rng = random.Random(seed)
    contexts = []
    for index in range(n):
        question, steps = (_math_question if index % 2 else _qa_question)(rng)
        done = rng.randint(1, max(1, len(steps) - 1))
        contexts.append("<|im_start|>user\n" + question + "<|im_end|>\n<|im_start|>assistant\n"
                        + "\n".join(steps[:done]))
    return contexts


def clustered_vectors(real: np.ndarray, question_ids: list[str], n: int, seed: int = 0) -> np.ndarray:
    """Synthetic vectors shaped like MiniLM keys: each question gets a centre near a real key vector;
    its records scatter around that centre."""
    rng = np.random.default_rng(seed)
    dim = real.shape[1]
    questions = sorted(set(question_ids[:n]), key=lambda q: int(q[1:]))
    centre_of = {q: i for i, q in enumerate(questions)}
    picks = rng.integers(0, len(real), size=len(questions))
    centres = real[picks] + rng.normal(0, 0.35 / np.sqrt(dim), size=(len(questions), dim))
    rows = np.array([centre_of[q] for q in question_ids[:n]])
    vectors = centres[rows] + rng.normal(0, 0.25 / np.sqrt(dim), size=(n, dim))
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors.astype(np.float32)


def recall_at_k(store_vectors: np.ndarray, queries: np.ndarray, found: list[list[int]], k: int) -> float:
    """Tie-tolerant recall@k: a found record counts if it is at least as similar as the k-th exact one."""
    sims = queries @ store_vectors.T
    kth = -np.partition(-sims, k - 1, axis=1)[:, k - 1]
    hits = [sum(sims[i, j] >= kth[i] - 1e-5 for j in row[:k]) for i, row in enumerate(found)]
    return float(np.sum(hits) / (k * len(found)))


def reopen(store_dir, embedder, config):
    """A fresh client on the store, so index settings changed on disk take effect."""
    from chromadb.api.shared_system_client import SharedSystemClient

    from rapo_trl.store import TraceStore

    SharedSystemClient.clear_system_cache()
    return TraceStore(store_dir, collection="bench", embedder=embedder, config=config)


def legacy_select(store, vectors):
    """The first ``select_embedded``: one query with metadatas for every neighbour, rule in Python."""
    from rapo_trl.store.selection import choose, fallback

    config = store.config
    result = store.collection.query(
        query_embeddings=np.asarray(vectors, dtype=np.float32), n_results=config.top_k,
        include=["metadatas", "distances"],
    )
    return [
        choose(ids, distances, metadatas, config.hnsw_space, config.min_reward, config.fallback_text)
        if ids else fallback(config.fallback_text)
        for ids, distances, metadatas in zip(result["ids"], result["distances"], result["metadatas"], strict=True)
    ]


def percentiles(values: list[float]) -> tuple[float, float]:
    return float(np.percentile(values, 50) * 1000), float(np.percentile(values, 99) * 1000)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, few repetitions (smoke run)")
    parser.add_argument("--records", type=int, default=PAPER_RECORDS)
    parser.add_argument("--sizes", default="10000,100000,169489", help="store sizes to measure select at")
    parser.add_argument("--embed-sample", type=int, default=256, help="keys embedded by the real model")
    parser.add_argument("--search-reps", type=int, default=40, help="64-context batches searched per size")
    parser.add_argument("--embed-reps", type=int, default=2, help="64-context batches embedded per size")
    parser.add_argument("--ef-sweep", default="10,20,40,100,200")
    parser.add_argument("--dir", default=None, help="where to build the store (default: a temp dir)")
    parser.add_argument("--synthetic-only", action="store_true",
                        help="no model: random cluster centres and synthetic queries (search latency only)")
    args = parser.parse_args(argv)
    if args.quick:
        args.records, args.sizes, args.embed_sample = 6000, "1000,3000,6000", 64
        args.search_reps, args.embed_reps, args.ef_sweep = 10, 1, "20,100"
    sizes = [int(s) for s in args.sizes.split(",")]
    batch = 64

    from rapo_trl.embeddings import SentenceTransformerEmbedder
    from rapo_trl.store import StoreConfig, TraceStore

    info = machine_info("chromadb", "sentence-transformers", "numpy")
    print("machine:", ", ".join(f"{k}={v}" for k, v in info.items()))
    print(f"config: records={args.records} sizes={sizes} embed_sample={args.embed_sample} "
          f"search_reps={args.search_reps} embed_reps={args.embed_reps} batch={batch}", flush=True)

    clock = time.perf_counter()
    records = synthetic_records(args.records)
    gen_s = time.perf_counter() - clock
    key_chars = np.mean([len(r.key) for r in records])
    value_chars = np.mean([len(r.value) for r in records])
    print(f"synthetic records: {len(records)} from {len({r.question_id for r in records})} questions in "
          f"{gen_s:.1f}s; mean key {key_chars:.0f} chars, mean value {value_chars:.0f} chars", flush=True)

    rates, key_rate, precision, sample_keys = {}, float("nan"), "none", []
    rng = np.random.default_rng(0)
    if args.synthetic_only:
        from rapo_trl.embeddings import HashingEmbedder

        embedder = HashingEmbedder(384, name="bench-synthetic-384")  # names the store; never embeds keys
        real = rng.normal(size=(256, 384))
        real = (real / np.linalg.norm(real, axis=1, keepdims=True)).astype(np.float32)
        sample_rows = np.zeros(0, dtype=int)
    else:
        # --- embedding throughput with the real model: bf16 only pays off on CPUs with native bf16 ---
        sample_rows = np.sort(rng.choice(len(records), size=min(args.embed_sample, len(records)), replace=False))
        sample_keys = [records[i].key for i in sample_rows]
        probe = sample_keys[: min(32, len(sample_keys))]
        rates = {}
        for precision in ("fp32", "bf16"):
            # Without native bf16 (AVX512-BF16/AMX) torch emulates it and it is far slower: probe less.
            keys = probe if precision == "fp32" or native_bf16() else probe[:8]
            candidate = SentenceTransformerEmbedder(bf16=precision == "bf16", name="all-MiniLM-L6-v2")
            candidate.embed(keys[:2])  # warm-up
            clock = time.perf_counter()
            candidate.embed(keys)
            rates[precision] = (len(keys) / (time.perf_counter() - clock), candidate, len(keys))
        precision = max(rates, key=lambda p: rates[p][0])
        embedder = rates[precision][1]
        clock = time.perf_counter()
        real = embedder.embed(sample_keys)
        key_rate = len(sample_keys) / (time.perf_counter() - clock)
        print(f"embedding keys (MiniLM): probe of {len(probe)} keys fp32 {rates['fp32'][0]:.1f}/s, bf16 "
              f"{rates['bf16'][0]:.1f}/s -> using {precision}: {key_rate:.1f} keys/s on {len(sample_keys)} keys",
              flush=True)

    vectors = clustered_vectors(real, [r.question_id for r in records], len(records))
    if len(sample_rows):
        vectors[sample_rows] = real  # the sampled records keep their real vectors

    store_dir = args.dir or tempfile.mkdtemp(prefix="bench_store_")
    config = StoreConfig(show_progress=False, write_batch_size=2048)
    store = TraceStore(store_dir, collection="bench", embedder=embedder, config=config)
    e50 = e99 = float("nan")
    if not args.synthetic_only:
        # --- queries: held-out contexts, embedded by the real model ---
        contexts = query_contexts(batch * max(args.embed_reps, 1))
        # Query embedding does not depend on the store's size: measured once, one embed call per
        # batch, exactly as select() does it; these vectors are then the real queries for every size.
        embed, parts = [], []
        for rep in range(args.embed_reps):
            clock = time.perf_counter()
            parts.append(embedder.embed([store.preprocess(c) for c in contexts[rep * batch:(rep + 1) * batch]]))
            embed.append(time.perf_counter() - clock)
        query_vectors = np.concatenate(parts)
        e50, e99 = percentiles(embed)
        print(f"query embedding, batch of {batch}: p50 {e50:.0f} ms over {len(embed)} batches", flush=True)
    synthetic_queries = vectors[rng.choice(len(records), size=batch * 4, replace=False)]
    synthetic_queries = synthetic_queries + rng.normal(0, 0.2 / np.sqrt(vectors.shape[1]), synthetic_queries.shape)
    synthetic_queries = (synthetic_queries / np.linalg.norm(synthetic_queries, axis=1, keepdims=True)).astype(np.float32)
    if args.synthetic_only:
        query_vectors = synthetic_queries
    try:
        import hnswlib  # noqa: F401

        variants = ["old", "new", "new, cold map", "local hnsw"]
    except ImportError:
        variants = ["old", "new", "new, cold map"]
        print("hnswlib not installed: no local-index variant", flush=True)
    # Three store objects on one directory and one client: the writer (its map is filled by its own
    # writes), a reader whose reward map is emptied before each batch, and one with the local index.
    cold = TraceStore(store_dir, collection="bench", embedder=embedder, config=config)
    fast = None
    local_s = []

    rows = []
    index_s = check_s = 0.0
    built = 0
    row_of = {r.record_id: i for i, r in enumerate(records)}
    for size in sizes:
        size = min(size, len(records))
        written = store.add_records_timed(records[built:size], embeddings=vectors[built:size])
        index_s += written.index_s
        check_s += written.check_s
        built = size
        assert len(store) == size, (len(store), size)
        if "local hnsw" in variants:
            clock = time.perf_counter()
            if fast is None:
                fast_config = StoreConfig(show_progress=False, local_index="hnsw", local_index_sync_s=1e9)
                fast = TraceStore(store_dir, collection="bench", embedder=embedder, config=fast_config)
                fast.build_local_index()
            else:
                fast.sync_local_index()  # picks up what the writer added since
            local_s.append(time.perf_counter() - clock)
        wall = {v: [] for v in variants}
        cpu = {v: [] for v in variants}
        same = True
        for rep in range(args.search_reps):
            q = query_vectors[(rep * batch) % len(query_vectors):][:batch]
            if len(q) < batch:
                q = query_vectors[:batch]
            chosen = {}
            order = variants if rep % 2 == 0 else variants[::-1]  # alternate, so drift hits all alike
            for variant in order:
                if variant == "new, cold map":
                    cold.forget_rewards()
                clock, cpu_clock = time.perf_counter(), time.process_time()
                if variant == "old":
                    chosen[variant] = legacy_select(store, q)
                else:
                    target = {"new": store, "new, cold map": cold, "local hnsw": fast}[variant]
                    chosen[variant] = target.select_embedded(q)
                cpu[variant].append(time.process_time() - cpu_clock)
                wall[variant].append(time.perf_counter() - clock)
            ids = {v: [r.record_id for r in chosen[v]] for v in chosen}
            same = same and ids["old"] == ids["new"] == ids["new, cold map"]
        found_real = store.collection.query(query_embeddings=query_vectors, n_results=3, include=[])["ids"]
        found_syn = store.collection.query(query_embeddings=synthetic_queries, n_results=3, include=[])["ids"]
        recall_real = recall_at_k(vectors[:size], query_vectors, [[row_of[i] for i in r] for r in found_real], 3)
        recall_syn = recall_at_k(vectors[:size], synthetic_queries, [[row_of[i] for i in r] for r in found_syn], 3)
        recall_local = float("nan")
        if fast is not None:
            found_local = fast._local.knn(synthetic_queries, 3)[0]
            recall_local = recall_at_k(vectors[:size], synthetic_queries, [[row_of[i] for i in r] for r in found_local], 3)
        stats = {v: (*percentiles(wall[v]), float(np.median(cpu[v]) * 1000)) for v in variants}
        rows.append((size, e50, e99, stats, recall_real, recall_syn, recall_local, same, os.getloadavg()[0]))
        print(f"  {size} records: " + "; ".join(f"{v} p50 {stats[v][0]:.1f} ms (cpu {stats[v][2]:.1f})" for v in variants)
              + f"; same choices old/new: {same}; recall@3 {recall_real:.3f}/{recall_syn:.3f}, local {recall_local:.3f}"
              f" (indexing so far {index_s:.1f}s, load {os.getloadavg()[0]:.1f})", flush=True)

    size_bytes = store.stats()["folder_bytes"]  # the store is the folder's one collection
    # --- ef_search sweep at the largest size ---
    sweep = []
    default_ef = config.hnsw_ef_search
    for ef in [int(e) for e in args.ef_sweep.split(",") if e.strip()]:
        # ef_search is persisted with the collection but a loaded index keeps its value: reopen.
        store.collection.modify(configuration={"hnsw": {"ef_search": ef}})
        store = reopen(store_dir, embedder, config)
        times = []
        for _rep in range(max(10, args.search_reps // 2)):
            clock = time.perf_counter()
            store.select_embedded(query_vectors[:batch])
            times.append(time.perf_counter() - clock)
        found_real = store.collection.query(query_embeddings=query_vectors, n_results=3, include=[])["ids"]
        found_syn = store.collection.query(query_embeddings=synthetic_queries, n_results=3, include=[])["ids"]
        sweep.append((ef, percentiles(times)[0],
                      recall_at_k(vectors[:built], query_vectors, [[row_of[i] for i in r] for r in found_real], 3),
                      recall_at_k(vectors[:built], synthetic_queries, [[row_of[i] for i in r] for r in found_syn], 3)))
        print(f"  ef_search {ef}: search p50 {sweep[-1][1]:.1f} ms, recall@3 {sweep[-1][2]:.3f}/{sweep[-1][3]:.3f}",
              flush=True)

    embed_full_s = args.records / key_rate
    total = built
    print()
    print(f"## Trace store benchmark ({'quick' if args.quick else 'synthetic-only' if args.synthetic_only else 'full'})")
    print(f"machine: {info['cpu']}, {info['cpus']} cores, native bf16 {info['native_bf16']} (load avg {info['load_avg'][0]} at start), "
          f"python {info['python']}, chromadb {info['chromadb']}, torch {info['torch']}, "
          f"sentence-transformers {info['sentence-transformers']}, numpy {info['numpy']}")
    if args.synthetic_only:
        print(f"data: {total} synthetic step records ({len({r.question_id for r in records})} questions x 5 "
              f"trajectories, math + search QA), keys {key_chars:.0f} chars, values {value_chars:.0f} chars mean; "
              "no model: vectors clustered around 256 random unit vectors, queries are perturbed stored vectors.")
    else:
        print(f"data: {total} synthetic step records ({len({r.question_id for r in records})} questions x 5 "
              f"trajectories, math + search QA), keys {key_chars:.0f} chars, values {value_chars:.0f} chars mean; "
              f"{len(sample_keys)} keys embedded by MiniLM, the rest synthetic vectors clustered around them.")
        build_s = embed_full_s + index_s + check_s
        steps = [[f"embed keys, MiniLM {name} (probe)", count, f"{count / rate:.1f}", f"{rate:.1f}", "measured"]
                 for name, (rate, _, count) in rates.items()]
        steps += [
            [f"embed keys, MiniLM {precision}", len(sample_keys), f"{len(sample_keys) / key_rate:.1f}",
             f"{key_rate:.1f}", "measured"],
            [f"embed keys, MiniLM {precision}", total, f"{embed_full_s:.0f}", f"{key_rate:.1f}", "extrapolated"],
            ["index (Chroma add + id check)", total, f"{index_s + check_s:.1f}", f"{total / (index_s + check_s):.0f}",
             "measured"],
            ["**build total**", total, f"{build_s:.0f}", f"{total / build_s:.1f}", "embed extrapolated + index measured"],
        ]
        print()
        print("\n".join(markdown_table(["build step", "records", "seconds", "records/s", "note"], steps, "lrrrl")))
    print(f"\nstore on disk at {total} records: {size_bytes / 1e6:.0f} MB")
    print()
    print(f"select, batch of {batch} contexts (ef_search={default_ef}, top_k=3), search part, {args.search_reps} "
          "batches per size, variants alternating in one process; wall p50/p99 and median CPU time of the "
          "process (all threads), ms. Embedding (real MiniLM) does not depend on the store size: "
          f"p50 {e50:.0f} ms, p99 {e99:.0f} ms.")
    print()
    print("| records | load 1m | " + " | ".join(f"{v} p50 | {v} p99 | {v} cpu" for v in variants)
          + " | same choices old/new | recall@3 Chroma real q | recall@3 Chroma synth q | recall@3 local synth q |")
    print("|---:|---:|" + "---:|---:|---:|" * len(variants) + "---|---:|---:|---:|")
    for size, _e50, _e99, stats, rr, rs, rl, same, load in rows:
        cells = " | ".join(f"{stats[v][0]:.1f} | {stats[v][1]:.1f} | {stats[v][2]:.1f}" for v in variants)
        print(f"| {size} | {load:.1f} | {cells} | {'yes' if same else 'NO'} | {rr:.3f} | {rs:.3f} | {rl:.3f} |")
    if local_s:
        print(f"\nlocal hnsw index: built at {rows[0][0]} records in {local_s[0]:.1f} s, then synced after each "
              "growth in " + ", ".join(f"{t:.1f} s" for t in local_s[1:]) + " (reads ids + new embeddings from Chroma)")
    print()
    if sweep:
        print(f"ef_search sweep at {built} records (select_embedded of {batch} vectors, p50; set on disk, store reopened):")
        print()
        print("\n".join(markdown_table(["ef_search", "search p50 ms", "recall@3 real q", "recall@3 synth q"],
                                       [[ef, f"{ms:.1f}", f"{rr:.3f}", f"{rs:.3f}"] for ef, ms, rr, rs in sweep],
                                       "rrrr")))
    last = rows[-1][3]
    print(f"\nfloor (search p50 <= 30 ms at {rows[-1][0]} records, wall under load {rows[-1][8]:.1f}): "
          + ", ".join(f"{v} {'met' if last[v][0] <= 30.0 else 'NOT met'} ({last[v][0]:.1f} ms)" for v in variants))
    if args.dir is None:
        shutil.rmtree(store_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
