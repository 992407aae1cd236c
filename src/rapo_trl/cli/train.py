"""``rapo train``: RAPOTrainer from a YAML recipe."""

from __future__ import annotations

from contextlib import nullcontext
from pathlib import Path

from rapo_trl.cli.batch_checks import check_batch_shape, check_report_to
from rapo_trl.cli.common import (
    GRPO_SAME_ROLLOUTS_DIR,
    USER_TASKS,
    UsageError,
    check_model,
    check_quantization,
    check_store_location,
    count_line,
    eval_splits,
    load_questions,
    open_store,
    task_split,
    tool_names,
    training_rows,
    warm_start_collection,
)
from rapo_trl.cli.console import is_main_process, say
from rapo_trl.cli.environment import check_environment, check_tool_protocol
from rapo_trl.cli.grpo_alongside import check_grpo_alongside, grpo_alongside
from rapo_trl.cli.grpo_baseline import train_grpo_baseline
from rapo_trl.cli.rewards import training_rewards
from rapo_trl.cli.run_record import (
    record_run_finished,
    run_id_for,
    stored_questions_record,
    unstamp_baseline,
    write_run_record,
)
from rapo_trl.cli.saved_history import save_history_and_plots
from rapo_trl.cli.trainer_build import build_trainer, load_policy_source, load_training_data


def _wants_store(script, rapo_args) -> bool:
    return bool(_retrieves(rapo_args) or script.sft_warmup_steps or script.sft_store_steps)


def _retrieves(rapo_args) -> bool:
    # trainer.checks.may_retrieve's rule, here without the imports of rapo_trl.trainer and rapo_trl.core (torch,
    # TRL), which the command's early checks run before: a ramp up from p = 0 retrieves too.
    return rapo_args.num_hybrid_generations != 0 and max(rapo_args.retrieve_prob, rapo_args.retrieve_prob_final or 0.0) > 0


def check_store_not_empty(store, script, rapo_args) -> None:
    """Refuse to retrieve from an empty store (every retrieval would insert the fallback text) unless asked to."""
    if store is None or not _retrieves(rapo_args) or script.allow_empty_store or len(store) > 0:
        return
    raise UsageError(f"the trace store at {store.location} (collection '{store.collection_name}') is empty, so every "
                     "retrieval would insert the fallback text: fill it with `rapo build-store`, turn retrieval off "
                     "(--num_hybrid_generations 0 or --retrieve_prob 0), or pass --allow_empty_store")


def check(script, rapo_args, model_args) -> None:
    """Every input train can check before TRL, torch or a model loads, beyond the script's own arguments, which
    `read_recipe` checked as it read them."""
    check_batch_shape(rapo_args)
    check_report_to(rapo_args)
    check_environment(script, "train")
    check_tool_protocol(script, rapo_args.tool_protocol)
    check_model(model_args.model_name_or_path, model_args.model_revision)
    check_quantization(model_args)
    if getattr(rapo_args, "push_to_hub", False):
        from rapo_trl.cli.push import check_can_push, check_repo_id

        check_repo_id(rapo_args.hub_model_id, rapo_args.output_dir)  # before training: the push comes at its end
        check_can_push(getattr(rapo_args, "hub_token", None))
    if script.environment_factory is None or script.reward_funcs is not None:
        training_rewards(script, rapo_args.reward_weights)  # a reward that exists, weighted one way
    if script.sft_same_time and script.sft_warmup_steps <= 0:
        raise UsageError("sft_same_time continues the SFT warm start; set sft_warmup_steps > 0")
    if script.sft_store_steps < 0 or script.sft_warmup_steps < 0:
        raise UsageError("sft_warmup_steps and sft_store_steps count steps: 0 or more")
    if script.sft_batch_size < 1:
        raise UsageError(f"sft_batch_size must be >= 1 (trajectories an SFT step), got {script.sft_batch_size}")
    if script.sft_learning_rate < 0:
        raise UsageError(f"sft_learning_rate must be >= 0, got {script.sft_learning_rate}")
    if rapo_args.max_steps == 0:
        # Trainer would take one step at a learning rate of 0 and report a trained run
        raise UsageError("max_steps must be >= 1, or -1 to train num_train_epochs, got 0")
    if not 0.0 <= script.sft_retrieved_share <= 1.0:
        raise UsageError(f"sft_retrieved_share is a share of the warm start's questions: 0 to 1, not "
                         f"{script.sft_retrieved_share}")
    check_grpo_alongside(script)
    if _wants_store(script, rapo_args):
        check_store_location(script, must_exist=True)
        check_store_collections(script, rapo_args)


def check_store_collections(script, rapo_args) -> None:
    """The collections train reads exist, and the one it retrieves from is not empty. Chroma opens a store in well
    under a second, so a wrong ``store_collection`` answers before TRL, torch and the model load."""
    with open_store(script, must_exist=True) as store:
        check_store_not_empty(store, script, rapo_args)
    if script.sft_warmup_steps > 0 and warm_start_collection(script) != script.store_collection:
        open_store(script, must_exist=True, collection=warm_start_collection(script)).close()


def check_store_holds_no_eval_question(script, stores: dict, first_keys: dict | None = None) -> None:
    """Refuse, in one line, a collection (``name -> store``) holding a trajectory of an eval question: build-store run
    with other data settings (``eval_fraction``, ``task_seed``, GSM8K's ``eval_size``, another dataset) draws its
    questions from this recipe's eval set, and retrieval or SFT would then show the policy their solutions.
    ``first_keys`` (``name -> stored_first_keys``) spares reading a collection's keys again where they were read."""
    from rapo_trl.store.agent import stored_first_keys

    held_out = _eval_rows(script)
    for name, store in stores.items():
        keys = first_keys[name] if first_keys is not None else stored_first_keys(store)
        leaked = _stored_eval_questions(store, keys, held_out)
        if leaked:
            split = next(iter(leaked.values()))
            raise UsageError(f"collection {name!r} at {store.location} holds trajectories of {len(leaked)} questions "
                             f"of the eval set {split!r}: rapo build-store ran with other data settings than this "
                             "recipe (eval_fraction, task_seed, eval_size, dataset), so training would see held-out "
                             "solutions; build the store again with this recipe's data settings")


def _stored_eval_questions(store, first_keys: set[str], eval_rows: dict) -> dict[str, str]:
    """``question_id -> eval set`` of the eval questions ``store`` holds trajectories of: found by id, or by text up to
    spacing and case (an eval file that asks a training question again, exported otherwise, gives it another id);
    ``first_keys`` are the store's `stored_first_keys`."""
    from rapo_trl.store.agent import stored_question_ids
    from rapo_trl.store.steps import preprocess_context
    from rapo_trl.tasks.held_out import question_ids, same_question_key

    ids = stored_question_ids(store)
    texts = {same_question_key(key) for key in first_keys}

    def stored(question_id: str, question: str) -> bool:
        key = preprocess_context(question, store.config.key_max_chars, store.config.system_prompt)
        return question_id in ids or same_question_key(key) in texts

    leaked: dict[str, str] = {}
    for split, rows in eval_rows.items():
        for question_id, question in zip(question_ids(rows), rows["question"]):
            if stored(question_id, question):
                leaked.setdefault(question_id, split)
    return leaked


def check_sft_sources(script, rows, demo_rows, store, demo_store) -> None:
    """Each SFT stage the run makes has stored trajectories to imitate: SFT on the store comes after the warm start,
    which would otherwise train for minutes before the store is found to hold none of RL's questions."""
    from rapo_trl.cli.warm_start import SFT_MIN_REWARD, check_sft_source

    if demo_rows is not None:
        check_sft_source(demo_rows, demo_store, SFT_MIN_REWARD, "the SFT warm start (sft_warmup_steps)",
                         f"the demonstrated questions (split {task_split(script, 'demo')!r})",
                         "run `rapo build-store` with this recipe first")
    if script.sft_store_steps > 0:
        check_sft_source(rows, store, SFT_MIN_REWARD, "SFT on the store (sft_store_steps)",
                         f"RL's own questions (split {task_split(script, 'train')!r})",
                         "build a store of them with `rapo build-store` and store_split equal to train_split (into a "
                         "new store_path or store_collection if this one holds other questions), or set "
                         "sft_store_steps to 0")


def _eval_rows(script) -> dict:
    """``eval set -> rows`` of every question the recipe holds out; for your own data every held-out row, not the first
    ``eval_size`` alone (a later ``rapo eval`` with a larger ``eval_size`` asks them too)."""
    import dataclasses

    whole = dataclasses.replace(script, eval_size=None) if script.task in USER_TASKS else script
    return {split: load_questions(whole, split) for split in eval_splits(script)}


def run(script, rapo_args, model_args, *, checked: bool = False) -> dict:
    """``checked``: `check` has passed these inputs already, as the ``rapo`` command checks them before TRL imports;
    checking again would open the store and look the model up a second time."""
    from rapo_trl.hardware import check_trainer_device

    check_trainer_device(script.device, rapo_args.use_cpu)
    if not checked:
        check(script, rapo_args, model_args)
    resume = resume_from(rapo_args.resume_from_checkpoint, rapo_args.output_dir)  # before anything loads
    # Stamped in each baseline this run finishes and written in its record: rapo eval scores no earlier run's baseline
    # beside this run's model. A resumed run keeps its run's id.
    run_id = run_id_for(rapo_args.output_dir, resume)
    data = load_training_data(script, rapo_args)
    rows = data.rows
    say(count_line("Training on", script, {task_split(script, "train"): rows}))
    if data.eval_rows is not None:
        # TRL evaluates during training on eval_dataset: the held-out questions rapo eval asks, never trained on.
        say(count_line("Evaluating during training on", script, {eval_splits(script)[0]: data.eval_rows}))
    # The warm start imitates the demonstrated questions (demo_split), which may differ from the RL questions.
    same = task_split(script, "demo") == task_split(script, "train")
    demo_rows = (rows if same else training_rows(script, "demo", data.tools)) if script.sft_warmup_steps > 0 else None
    if demo_rows is not None and not same:
        say(count_line("Warm start on", script, {task_split(script, "demo"): demo_rows}))
    store = open_store(script, must_exist=True) if _wants_store(script, rapo_args) else None
    check_store_not_empty(store, script, rapo_args)
    # The warm start's trajectories: the store's own, or the demonstrated questions' collection beside a store of
    # RL's questions (store_split; build-store fills both).
    demo_store = store
    if demo_rows is not None and warm_start_collection(script) != script.store_collection:
        demo_store = open_store(script, must_exist=True, collection=warm_start_collection(script))
    from rapo_trl.store.agent import stored_first_keys

    stores = {} if store is None else {store.collection_name: store, demo_store.collection_name: demo_store}
    # Read once for the check and the run record: each read goes through every record of the collection.
    first_keys = {name: stored_first_keys(opened) for name, opened in stores.items()}
    if stores:  # an environment's store too: build-store keys it by the same question ids
        check_store_holds_no_eval_question(script, stores, first_keys)
    trained_from = _stores_trained_from(script, rapo_args, store, demo_store if demo_rows is not None else None)
    check_sft_sources(script, rows, demo_rows, store, demo_store)
    # Only now, every input checked: the model.
    source = load_policy_source(rapo_args, model_args)
    model_path = source.path  # the model the warm start begins from: the pushed adapter's base
    from rapo_trl.cli.push import base_model_name
    from rapo_trl.cli.warm_start import SFT_MIN_REWARD, SFT_SAME_TIME_DIR

    pushed_base = base_model_name(script.base_model_name, model_args.model_name_or_path, model_path)
    peft_config, warm = source.peft_config, None
    lora_run = peft_config is not None
    sft = dict(tokenizer=source.tokenizer, output_dir=rapo_args.output_dir, learning_rate=script.sft_learning_rate,
               min_reward=SFT_MIN_REWARD, use_cpu=rapo_args.use_cpu,
               seed=rapo_args.seed if script.sft_seed is None else script.sft_seed, bf16=rapo_args.bf16,
               fp16=rapo_args.fp16, batch_size=script.sft_batch_size, model_init_kwargs=source.init_kwargs,
               lora=peft_config, run_id=run_id, chat_template_kwargs=rapo_args.chat_template_kwargs)
    if script.sft_warmup_steps > 0:
        from rapo_trl.cli.warm_start import warm_start

        # With LoRA, RAPO trains the warm start's adapter further over the base (never merged into half-precision
        # weights); a run that trains every weight starts from the merge.
        warm = warm_start(model_path, merge=not lora_run, rows=demo_rows, store=demo_store,
                          steps=script.sft_warmup_steps, retrieved_share=script.sft_retrieved_share, **sft)
    if script.sft_store_steps > 0:
        from rapo_trl.cli.warm_start import SFT_ON_STORE_DIR, warm_start

        # SFT-then-RL: the warm start (or the base) imitates the store's trajectories of RL's own questions, what
        # retrieval would have shown, before RL begins from it.
        warm = warm_start(model_path if lora_run or warm is None else warm, merge=not lora_run, rows=rows,
                          store=store, steps=script.sft_store_steps, folder=SFT_ON_STORE_DIR,
                          start_adapter=warm if lora_run else None, **sft)

    if resume is not None and is_main_process():
        # The run keeps its id, but the baselines made from RAPO's result (its time, its steps) are an earlier
        # session's until this one makes them again after its RAPO, which trains further.
        for folder in (SFT_SAME_TIME_DIR, GRPO_SAME_ROLLOUTS_DIR):
            unstamp_baseline(Path(rapo_args.output_dir) / folder)
    # Each arm starts from a freshly loaded `warm` (the warm start, or SFT on the store), else the model itself.
    alongside = grpo_alongside(script, rapo_args, model_args, warm, run_id) if script.grpo_alongside else nullcontext()
    with alongside:
        trainer = build_trainer(data, source, warm, rapo_args, store)
        trainer.run_id = run_id  # in each checkpoint: whose it is, beside the record
        from rapo_trl.model_card import dataset_hub_id

        trainer.dataset_id = dataset_hub_id(script.dataset_name)  # before training: each checkpoint writes the card
        if script.sft_same_time:
            from rapo_trl.cli.trained_time import TrainedSeconds

            trainer.add_callback(TrainedSeconds())  # RL's time over every session: train_runtime is the last one's
        if trainer.is_world_process_zero():  # before training: a stopped run's checkpoints are evaluated as trained
            write_run_record(rapo_args.output_dir, tool_names(script) if data.tools else [], trainer.tool_protocol,
                             script.environment_factory, script.task, base_model=pushed_base,
                             trained_questions=_questions(rows, demo_rows), baselines=_baselines(script),
                             run_id=run_id, stored_questions=stored_questions_record(trained_from, first_keys),
                             finished=False)  # until its model is saved: an earlier run's may lie there till then
        result = trainer.train(resume_from_checkpoint=resume)
        trainer.save_model(rapo_args.output_dir)
        if trainer.is_world_process_zero():
            record_run_finished(rapo_args.output_dir)
            dropped = drop_replaced_evaluation(rapo_args.output_dir)
            if dropped:
                say(f"Removed {', '.join(dropped)}: they scored the model this run replaced (`rapo eval` scores "
                    "this one).")
        if script.sft_same_time:
            from rapo_trl.cli.warm_start import SFT_SAME_TIME_DIR, warm_start

            seconds = max(TrainedSeconds.of(trainer), result.metrics["train_runtime"])

            # The fair baseline: RL's starting point trained further by SFT for as long as RAPO trained; only
            # evaluated. With LoRA, its adapter trained further; otherwise a LoRA over the merged starting point.
            warm_start(model_path if lora_run else warm, rows=demo_rows, store=demo_store,
                       steps=script.sft_warmup_steps, max_seconds=seconds,
                       folder=SFT_SAME_TIME_DIR, start_adapter=warm if lora_run else None,
                       retrieved_share=script.sft_retrieved_share, **sft)
        save_history_and_plots(trainer, rapo_args.output_dir)
        # RAPO's card (paper, recipe, base model by hub id or the name given) in place of PEFT's adapter template.
        from rapo_trl.model_card import base_model_hub_id

        trainer.base_model_id = script.base_model_name or base_model_hub_id(model_args.model_name_or_path)
        trainer.create_model_card()
    # Alongside, the baseline has finished here: a failed push (retried with `rapo push`) cannot cost it.
    if rapo_args.push_to_hub and trainer.is_world_process_zero():
        _push(script, rapo_args, pushed_base)
    say(f"Trained {trainer.state.global_step} steps in {result.metrics['train_runtime']:.1f}s; "
          f"saved to {rapo_args.output_dir}.")
    if script.grpo_same_rollouts and not script.grpo_alongside:
        steps = trainer.state.global_step
        del trainer  # the RAPO policy goes before the baseline's loads: never two in memory
        _train_grpo_after_rapo(data, source, warm, rapo_args, steps, run_id)
    return result.metrics


EVAL_RESULTS = ("eval_results.json", "eval_results.md")
"""What ``rapo eval`` writes beside the model it scored."""


def drop_replaced_evaluation(output_dir: str) -> list[str]:
    """Remove ``rapo eval``'s results of the model this run has just replaced in ``output_dir``, returning the names
    removed: left there, the run's plots would draw them as its pass@1 and ``rapo push`` would upload them beside a
    model they never scored."""
    present = [Path(output_dir) / name for name in EVAL_RESULTS if (Path(output_dir) / name).exists()]
    for path in present:
        path.unlink()
    return [path.name for path in present]


def _baselines(script) -> list[str]:
    """The models this run makes beside the trained one, by ``rapo eval``'s names."""
    made = {"warm_start": script.sft_warmup_steps > 0, "sft_on_store": script.sft_store_steps > 0,
            "sft_same_time": script.sft_same_time, "grpo_same_rollouts": script.grpo_same_rollouts}
    return [name for name, on in made.items() if on]


def _stores_trained_from(script, rapo_args, store, demo_store) -> dict:
    """``collection name -> store`` of the collections whose solutions the run shows the policy: the store when RL
    retrieves from it or SFT on the store imitates it, and the warm start's collection (``demo_store``, ``None``
    without a warm start). Their questions are no more held out than the trained ones."""
    used = {}
    if store is not None and (_retrieves(rapo_args) or script.sft_store_steps > 0):
        used[store.collection_name] = store
    if demo_store is not None:
        used[demo_store.collection_name] = demo_store
    return used


def _questions(*row_sets) -> list[str]:
    """The question texts of the rows the run trains on (RL's, the warm start's); an environment's rows may have
    none."""
    return [question for rows in row_sets if rows is not None and "question" in rows.column_names
            for question in rows["question"]]


def _train_grpo_after_rapo(data, source, warm, rapo_args, steps: int, run_id: str | None) -> None:
    """The GRPO baseline in this process, once RAPO's policy is freed, for as many ``steps`` as RAPO trained."""
    import gc

    from rapo_trl.memory import release_freed_memory

    gc.collect()
    release_freed_memory()
    train_grpo_baseline(data, source, warm, rapo_args, steps, run_id)


def resume_from(value, output_dir: str) -> str | None:
    """The checkpoint to resume from: ``true`` (or the bare flag) is the latest whole one in ``output_dir`` of the run
    its record names (``checkpoint_to_resume``); ``false`` none (RAPOTrainer.train then moves the earlier run's checkpoints aside,
    ``set_aside_checkpoints``); a folder must exist and be whole. Unset, it is none when ``output_dir`` holds no
    whole checkpoint: a run started over would save its own checkpoints among an earlier run's, so that needs
    ``false``. Refused in one line before anything loads."""
    from rapo_trl.trainer.resilience.checkpoint import checked_resume, last_complete_checkpoint

    if value is None:
        earlier = last_complete_checkpoint(output_dir, resuming=False)
        if earlier is not None:
            raise UsageError(f"output_dir {output_dir} holds {Path(earlier).name} of an earlier run: pass "
                             f"--resume_from_checkpoint to go on from its newest whole checkpoint, or "
                             f"--resume_from_checkpoint false to train from the start (its checkpoints are moved into "
                             "a folder earlier-run-<time> there)")
        return None
    if isinstance(value, bool):
        value = value or None
    elif value.strip().lower() in ("true", "yes", "1"):
        value = True
    elif value.strip().lower() in ("false", "no", "0", "none", ""):
        value = None
    elif not Path(value).is_dir():
        raise UsageError(f"resume_from_checkpoint {value!r} is not a folder; give a checkpoint folder "
                         f"({output_dir}/checkpoint-N) or `--resume_from_checkpoint` alone for the newest whole one")
    if value is None:
        return None
    try:
        return checked_resume(value, output_dir)
    except ValueError as error:
        raise UsageError(str(error)) from None


def _push(script, rapo_args, base: str) -> None:
    from rapo_trl.cli.push import push_run

    repo_id = rapo_args.hub_model_id or Path(rapo_args.output_dir).absolute().name
    try:
        repo, base = push_run(rapo_args.output_dir, repo_id, base, include_warm_start=script.push_warm_start,
                              token=rapo_args.hub_token, private=rapo_args.hub_private_repo,
                              revision=rapo_args.hub_revision)
    except (OSError, RuntimeError, ValueError) as error:  # the Hub or the network: the trained run is saved
        raise RuntimeError(f"the push to {repo_id} failed ({type(error).__name__}: {error}); the run is saved in "
                           f"{rapo_args.output_dir}: retry with `{retry_command(script, rapo_args, repo_id)}`") from error
    print(f"Pushed to https://huggingface.co/{repo} (adapter base: {base}).")


def retry_command(script, rapo_args, repo_id: str) -> str:
    """The `rapo push` command that pushes as this run's push was asked to: a private repo stays private, the branch
    and the warm-start folders are the recipe's (the token is left out: it is a secret, and the saved login is used)."""
    import shlex

    words = ["rapo", "push", rapo_args.output_dir, "--hub_model_id", repo_id]
    if rapo_args.hub_private_repo:
        words.append("--hub_private_repo")
    if rapo_args.hub_revision:
        words += ["--hub_revision", rapo_args.hub_revision]
    if script.push_warm_start:
        words.append("--push_warm_start")
    return shlex.join(words)
