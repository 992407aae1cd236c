"""RAPO against GRPO and SFT-then-GRPO on one recipe, several seeds: does retrieving off-policy steps make RL learn
better than the GRPO it extends?

Every run is what a user runs: ``rapo train`` on the comparison recipe (``configs/comparison_cpu.yaml``) with its
arm's flags and seed, then ``rapo eval`` of the trained model alone. All arms and seeds start from one SFT warm start
(``--sft_seed 0``: made by the first run, reused by the others through its cache key), train on the same RL
questions with the same rollouts per step, and are scored on the same sets:

    reward_only_fresh   fresh questions of RL's own stories (never a training row): mean@4 and greedy pass@1
    heldout_stories     the same programs told in stories nothing trained on: greedy pass@1

Arms (flags over the recipe):

    grpo            no hybrid rows, p = 0: GRPO through RAPOTrainer
    rapo_paper      the recipe's RAPO: N_hybrid = G/2, p = 0.5, a = 0.2, m = 0.05, retrieval after tool steps
    rapo_guided     RAPO retrieving only at the plan boundary (``GUIDED``): the stored first step, the rest the policy's
    sft_then_grpo   SFT on the store's trajectories of RL's own questions (``--sft_store_steps``), then GRPO
    sft_then_rapo_guided  the same SFT on the store, then ``rapo_guided``: does retrieval add to what SFT on the same
                    trajectories taught (not one of the comparison's four arms; run on its own)

The levers that make guidance transfer to the unguided policy, each over ``rapo_guided`` (run on request):

    rapo_guided_token          learn the stored step's tokens (``TOKEN_LEARNING``: w = 2, log-likelihood)
    rapo_guided_token_failed   ... and retrieve only in groups whose on-policy rows all failed, p = 1 there
    rapo_guided_failed         failed groups only, p = 1, no token learning
    rapo_guided_token_anneal   token learning, p annealed to 0 over the run
    rapo_guided_token_onpolicy token learning, the outcome advantage's baseline from the on-policy rows only
    sft_then_rapo_guided_token_failed  SFT on the store, then ``rapo_guided_token_failed``
    rapo_prefix_token_failed   ``rapo_guided_token_failed`` with the stored first step at the start, as the policy's
                               own step (``PREFIX``: an off-policy prefix, LUFFY and Prefix-RFT) instead of a
                               ``<retrieve>`` block after its plan
    sft_then_rapo_prefix_token_failed  SFT on the store, then ``rapo_prefix_token_failed``
    rapo_prefix_imitate_failed ``rapo_prefix_token_failed`` with every stored step shown learned, weighted by its
                               trajectory's reward rather than by its row's advantage (``IMITATE``): a prefixed row
                               that still fails teaches its stored step too
    sft_then_rapo_prefix_imitate_failed  SFT on the store, then ``rapo_prefix_imitate_failed``

The fidelity check, beside ``rapo_paper`` of the same seed:

    rapo_paper_scored_blocks   the paper's options, the reward read from the whole response, retrieved blocks
                               included, as the reference code scores it (a handed answer followed by the policy's
                               own is two answers)

Another recipe file can stand in for the comparison's (``--recipe``); the code version then hashes that file's
settings, so its runs are never taken for the comparison recipe's. Each finished run is appended to the ``comparison`` list of ``benchmarks/results/learning.json`` at once (a file
lock lets two processes run side by side); ``learning_comparison.md`` and ``learning_comparison.png`` are redrawn
from every record, so runs may finish in different sittings. A run already recorded for the same arm, seed, flags
and code (the git tree of ``src`` and the recipe's settings) is skipped, so the same command picks up where the records stop.
Each run saves a checkpoint every step, so a run killed with its machine goes on from its last whole step (exactly,
as the trainer resumes) when the same command runs again.

    .venv/bin/python benchmarks/bench_comparison.py --arms grpo rapo_paper --seeds 0 1 2
    .venv/bin/python benchmarks/bench_comparison.py --arms grpo sft_then_grpo --seeds 0 1 2 --rescore 128
    .venv/bin/python benchmarks/bench_comparison.py --report-only

``--rescore N`` trains nothing: it scores recorded runs again on N fresh questions (the records' own 64 first, the
same questions in the same order) and appends each score to ``learning.json``'s ``rescored`` list, so that finalists
pair question by question on a wider set.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402
    RESULTS,
    machine_info,
    run_rapo,
    store_built_once,
    train_from_shared_warm_start,
    update_results,
    use_offline_environment,
)

use_offline_environment()

RECIPE = "configs/comparison_cpu.yaml"
"""The comparison's recipe; ``--recipe`` runs the arms on another."""
RETRIEVAL_OFF = ["--num_hybrid_generations", "0", "--retrieve_prob", "0", "--retrieve_own_question", "false"]
"""GRPO from the recipe: no hybrid row, and the recipe's retrieval-only option at its default, which changes nothing
trained without retrieval and leaves the trainer nothing to warn of as ignored."""
GUIDED = ["--retrieve_at", "plan"]
"""The guided option of ``rapo_guided``: one retrieval, after the policy's first plan, of its question's stored first
step; the second operation and the answer stay the policy's own. ``learning_regime.md``: from the warm start that has
seen retrieved blocks (``sft_retrieved_share``), rows shown the first step succeed on 8/25 (on-policy 10/64) and none
is handed the answer; after a tool step, a stored step is the final answer in most rows."""
PREFIX = ["--retrieve_at", "start", "--retrieved_step_as_own", "true"]
"""The prefix option: before the policy writes anything, its question's stored first step begins the completion as
the policy's own step (no preface, no ``<retrieve>`` tags), scored with the rest of the rollout; guidance as
``<retrieve>`` context did not transfer to the unassisted policy, an off-policy prefix in the policy's own position is
what the methods that transfer (LUFFY, Prefix-RFT) train on."""
SFT_STORE_STEPS = 30
"""SFT-then-GRPO's SFT steps on the store: one pass over the best trajectory of each of RL's 128 questions, 4 a step."""
SFT_ON_STORE = ["--sft_store_steps", str(SFT_STORE_STEPS)]
TOKEN_LEARNING = ["--retrieved_token_loss_weight", "2", "--retrieved_token_shaping", "null"]
"""Learn the stored step's own tokens: at w = 1 a stored token gets ~1/20 of one SFT step's push on this recipe
(lr 2e-4 against SFT's 1e-3, normalised over ~16 rows' tokens), and LUFFY's shaping divides it by ~4 more; so w = 2
with log-likelihood."""
IMITATE = ["--retrieved_token_credit", "stored_reward"]
"""Learn every stored step shown, at the token-learning weight times its trajectory's reward (1 for a right answer:
retrieval takes the best of the question's records, none at or below the store's ``min_reward``, so a partly right
one only where no record of the question is right), whatever its row scored: with the row's advantage as the gate, the
token loss of ``rapo_guided_token_failed`` fired in no step where its guided rows all failed again."""
FAILED_GROUPS = ["--retrieve_failed_groups_max_reward", "0", "--retrieve_prob", "1"]
"""Retrieve only in groups whose on-policy rows all scored at most 0, and always there: groups with on-policy
signal stay GRPO's."""
ARMS = {
    "grpo": RETRIEVAL_OFF,
    "rapo_paper": [],
    "rapo_guided": GUIDED,
    "sft_then_grpo": [*RETRIEVAL_OFF, *SFT_ON_STORE],
    "sft_then_rapo_guided": [*GUIDED, *SFT_ON_STORE],
    "rapo_guided_token": [*GUIDED, *TOKEN_LEARNING],
    "rapo_guided_token_failed": [*GUIDED, *TOKEN_LEARNING, *FAILED_GROUPS],
    "rapo_guided_failed": [*GUIDED, *FAILED_GROUPS],
    "rapo_guided_token_anneal": [*GUIDED, *TOKEN_LEARNING, "--retrieve_prob_final", "0"],
    "sft_then_rapo_guided_token_failed": [*GUIDED, *TOKEN_LEARNING, *FAILED_GROUPS, *SFT_ON_STORE],
    "rapo_guided_token_onpolicy": [*GUIDED, *TOKEN_LEARNING, "--advantage_baseline", "on_policy"],
    "rapo_paper_scored_blocks": ["--score_retrieved_blocks", "true"],
    "rapo_prefix_token_failed": [*PREFIX, *TOKEN_LEARNING, *FAILED_GROUPS],
    "sft_then_rapo_prefix_token_failed": [*PREFIX, *TOKEN_LEARNING, *FAILED_GROUPS, *SFT_ON_STORE],
    "rapo_prefix_imitate_failed": [*PREFIX, *TOKEN_LEARNING, *IMITATE, *FAILED_GROUPS],
    "sft_then_rapo_prefix_imitate_failed": [*PREFIX, *TOKEN_LEARNING, *IMITATE, *FAILED_GROUPS, *SFT_ON_STORE],
}
"""Arm -> the flags it adds to the recipe."""
COMPARED_ARMS = ("grpo", "rapo_paper", "rapo_guided", "sft_then_grpo")
"""The comparison's arms, run by default; the others answer a follow-up question when asked for."""
SFT_SEED = 0
WARM_START_DIR = "sft-warm-start"
FRESH, HELDOUT = "reward_only_fresh", "heldout_stories"
LOGGED = ("reward", "rapo/reward_on_policy", "rapo/reward_hybrid_retrieved", "rapo/retrieved_answer_share",
          "rapo/retrieved_own_question_share", "rapo/positive_advantage_share_retrieved", "rapo/retrieval_rate",
          "rapo/step_has_signal", "tools/failure_frequency", "loss", "entropy", "completions/mean_length",
          "rapo/on_policy_negative_share", "rapo/on_policy_advantage_sum", "rapo/positive_advantage_mass_on_policy",
          "rapo/positive_advantage_mass_retrieved", "rapo/retrieved_token_loss", "rapo/retrieved_token_logp")
"""The training log's names each record keeps per step (``None`` at a step that did not log one)."""
JSON_PATH = RESULTS / "learning.json"
KEY = "comparison"
RESCORED = "rescored"
"""``learning.json``'s list of runs scored again on more fresh questions (``--rescore``)."""


def main(argv=None) -> None:
    args = parse_args(argv)
    if not args.report_only:
        workdir = Path(args.workdir)
        store = store_built_once(workdir, args.recipe)
        version = {"commit": git("rev-parse", "HEAD"), "code": code_version(args.recipe)}
        for seed in args.seeds:
            for arm in args.arms:
                if recorded(arm, seed, version["code"], run_flags(arm, seed, args.steps)):
                    print(f"comparison: {arm} seed {seed} on code {version['code']} is recorded; skipped", flush=True)
                    continue
                record = run_one(arm, seed, workdir, store, args.steps, version, args.recipe)
                append(record)
                remove_checkpoints(workdir / f"{arm}-seed{seed}")
                write_report()
                print(f"comparison: {arm} seed {seed} done, fresh mean@4 {fresh_mean(record):.3f}", flush=True)
        if args.rescore:
            rescore_recorded(args, workdir, store, version)
        elif args.eval_warm_start and not recorded("warm_start", SFT_SEED, version["code"], []):
            append(eval_warm_start(workdir, store, version, args.recipe))
    write_report()


def rescore_recorded(args, workdir: Path, store: Path, version: dict) -> None:
    """Score the recorded runs of ``--arms`` x ``--seeds`` (and the warm start, with ``--eval-warm-start``) again on
    ``--rescore`` fresh questions, no retraining; each score is appended to ``rescored`` at once."""
    runs = [(arm, seed, run_flags(arm, seed, args.steps)) for seed in args.seeds for arm in args.arms]
    if args.eval_warm_start:
        runs.append(("warm_start", SFT_SEED, []))
    for arm, seed, flags in runs:
        if not recorded(arm, seed, version["code"], flags):
            print(f"comparison: {arm} seed {seed} is not recorded on code {version['code']}; not rescored", flush=True)
        elif rescored(arm, seed, version["code"], args.rescore):
            print(f"comparison: {arm} seed {seed} is rescored on {args.rescore} questions; skipped", flush=True)
        else:
            model = workdir / (WARM_START_DIR if arm == "warm_start" else f"{arm}-seed{seed}")
            record = rescore(arm, seed, model, store, args.rescore, version, args.recipe)
            append(record, RESCORED)
            print(f"comparison: {arm} seed {seed} on {args.rescore} fresh questions, mean@4 {fresh_mean(record):.3f}",
                  flush=True)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", default="runs/comparison")
    parser.add_argument("--recipe", default=RECIPE, help="the recipe every arm's flags go over (its settings are part "
                        "of the code version)")
    parser.add_argument("--arms", nargs="*", default=list(COMPARED_ARMS), choices=list(ARMS),
                        help="none, with --eval-warm-start: score the warm start alone")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--eval-warm-start", action="store_true", help="also score the shared warm start, once")
    parser.add_argument("--rescore", type=int, metavar="N", help="no training: score the recorded runs of --arms and "
                        "--seeds (and the warm start, with --eval-warm-start) again on N fresh questions, mean@k and "
                        "greedy, recorded under 'rescored' (the first 64 are the records' own questions)")
    parser.add_argument("--report-only", action="store_true")
    return parser.parse_args(argv)


def git(*arguments: str) -> str:
    root = Path(__file__).resolve().parent.parent
    return subprocess.run(["git", *arguments], cwd=root, capture_output=True, text=True, check=True).stdout.strip()


def code_version(recipe: str = RECIPE) -> str:
    """The version the runs compare on: the git tree of the package and the recipe's settings (its parsed YAML, so a
    comment does not count). A commit that changes neither (a report, another arm's flags) keeps the runs recorded."""
    import hashlib

    import yaml

    settings = json.dumps(yaml.safe_load((Path(__file__).resolve().parent.parent / recipe).read_text()), sort_keys=True)
    return f"{git('rev-parse', 'HEAD:src')[:12]}-{hashlib.sha256(settings.encode()).hexdigest()[:12]}"


def records(key: str = KEY) -> list[dict]:
    return json.loads(JSON_PATH.read_text()).get(key, []) if JSON_PATH.exists() else []


def append(record: dict, key: str = KEY) -> None:
    update_results(JSON_PATH, lambda data: data.setdefault(key, []).append(record))


def recorded(arm: str, seed: int, code: str, flags: list[str]) -> bool:
    return any(r["arm"] == arm and r["seed"] == seed and r.get("code") == code and r["flags"] == flags
               for r in records())


CHECKPOINTS = ("--save_strategy", "steps", "--save_steps", "1", "--save_total_limit", "2")
"""Each step saved (the two newest kept), so a run killed with its machine goes on from its last step in the next
sitting, exactly as if it had not stopped; not among a record's flags: saving changes no number of the run."""


def remove_checkpoints(output: Path) -> None:
    """A recorded run's checkpoints: kept until its record is written (an eval killed part way resumes at the end)."""
    import shutil

    for folder in output.glob("checkpoint-*"):
        shutil.rmtree(folder)


def run_flags(arm: str, seed: int, steps: int) -> list[str]:
    return ["--seed", str(seed), "--sft_seed", str(SFT_SEED), "--max_steps", str(steps), "--sft_same_time", "false",
            *ARMS[arm]]


def run_one(arm: str, seed: int, workdir: Path, store: Path, steps: int, version: dict, recipe: str = RECIPE) -> dict:
    output = workdir / f"{arm}-seed{seed}"
    flags = run_flags(arm, seed, steps)
    train_seconds, resumed_from = train_from_shared_warm_start(output, workdir / WARM_START_DIR, "--config", recipe,
                                                               "--store_path", str(store), *flags, *CHECKPOINTS,
                                                               resume=True)
    scores, eval_seconds = evaluate(output, store, recipe)
    resumed = {"resumed_from_step": resumed_from} if resumed_from else {}
    return make_record(arm, seed, flags, recipe, version, steps, step_logs(output / "trainer_state.json"), scores,
                       eval_seconds, train_seconds=round(train_seconds, 1), **resumed)


def step_logs(trainer_state: Path) -> list[dict]:
    """The training steps' log entries of a run (or checkpoint) from its ``trainer_state.json``."""
    return [e for e in json.loads(trainer_state.read_text())["log_history"] if "reward" in e]


def make_record(arm: str, seed: int, flags: list[str], recipe: str, version: dict, steps: int, logs: list[dict],
                scores: dict, eval_seconds: float, **extra) -> dict:
    """One ``comparison`` record: the run's identity, its machine, its logged steps and its scores."""
    timing = {**extra, "eval_seconds": round(eval_seconds, 1)}
    return {"arm": arm, "seed": seed, "flags": flags, "recipe": recipe, **version, "steps": steps,
            "machine": machine_info(), **timing, "per_step": {name: [e.get(name) for e in logs] for name in LOGGED},
            "eval": scores, "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def evaluate(model: Path, store: Path, recipe: str = RECIPE) -> tuple[dict, float]:
    """``rapo eval`` of ``model`` alone: mean@4 and greedy on the fresh questions, greedy on the held-out stories.
    Each set's scores carry its questions' ids and, in their order, each question's greedy 0/1 and sampled passes
    out of k (``correct_by_question``, ``sampled_correct_by_question``), so arms pair question by question."""
    started = time.perf_counter()
    run_rapo(*eval_arguments(model, store, recipe))
    return read_scores(model / "eval_results.json"), time.perf_counter() - started


def eval_arguments(model: Path, store: Path, recipe: str = RECIPE) -> list[str]:
    """The ``rapo eval`` arguments that score ``model`` alone, as every comparison record is scored (a baseline its
    run made beside it, SFT on the store, is not scored: the records keep the trained model's scores alone)."""
    return ["eval", "--config", recipe, "--eval_model", str(model), "--store_path", str(store), "--eval_splits", FRESH,
            HELDOUT, "--eval_sampled_splits", FRESH, "--eval_base", "false", "--eval_models", "trained",
            "--eval_sampled_models", "trained", "--eval_report", ""]


def read_scores(results: Path, names: tuple[str, ...] = (FRESH, HELDOUT)) -> dict:
    """The trained model's scores on each set of ``names``, with the set's question ids, from an eval results file."""
    sets = json.loads(results.read_text())["sets"]
    return {name: {**sets[name]["rows"]["trained"], "question_ids": sets[name]["question_ids"]} for name in names}


def rescored(arm: str, seed: int, code: str, questions: int) -> bool:
    return any(r["arm"] == arm and r["seed"] == seed and r.get("code") == code and r["questions"] == questions
               for r in records(RESCORED))


def rescore(arm: str, seed: int, model: Path, store: Path, questions: int, version: dict,
            recipe: str = RECIPE) -> dict:
    """``model`` scored on ``questions`` fresh questions: mean@k and greedy, each question's counts and ids. Its
    ``eval_results.json`` (the record's own scores) is left as it was; this score is kept beside it."""
    kept = model / "eval_results.json"
    saved = kept.read_bytes() if kept.exists() else None
    report = model / f"eval_results_{questions}_fresh.json"
    started = time.perf_counter()
    try:
        run_rapo(*rescore_arguments(model, store, questions, recipe, report))
    finally:
        if saved is not None:
            kept.write_bytes(saved)
    scores = read_scores(report, (FRESH,))
    return {"arm": arm, "seed": seed, "questions": questions, "recipe": recipe, **version, "machine": machine_info(),
            "eval_seconds": round(time.perf_counter() - started, 1), "eval": scores,
            "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def rescore_arguments(model: Path, store: Path, questions: int, recipe: str, report: Path) -> list[str]:
    """``eval_arguments`` on the fresh questions alone, ``questions`` of them, the results also written to ``report``."""
    return ["eval", "--config", recipe, "--eval_model", str(model), "--store_path", str(store), "--eval_splits", FRESH,
            "--eval_sampled_splits", FRESH, "--eval_size", str(questions), "--eval_sample_size", str(questions),
            "--eval_base", "false", "--eval_models", "trained", "--eval_sampled_models", "trained", "--eval_report",
            str(report)]


def eval_warm_start(workdir: Path, store: Path, version: dict, recipe: str = RECIPE) -> dict:
    scores, seconds = evaluate(workdir / WARM_START_DIR, store, recipe)
    return warm_start_record(recipe, version, scores, seconds)


def warm_start_record(recipe: str, version: dict, scores: dict, eval_seconds: float) -> dict:
    record = make_record("warm_start", SFT_SEED, [], recipe, version, 0, [], scores, eval_seconds)
    return {**record, "per_step": {}}


def fresh_mean(record: dict) -> float:
    return record["eval"][FRESH]["mean@k"]


def write_report() -> None:
    from learning_comparison_report import write

    write(records(), RESULTS / "learning_comparison.md", RESULTS / "learning_comparison.png", list(ARMS),
          records(RESCORED))


if __name__ == "__main__":
    main()
