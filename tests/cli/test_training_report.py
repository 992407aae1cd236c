"""The per-step training table of ``rapo eval``'s report, from logged histories."""

import json

from rapo_trl.cli.training_report import training_steps, training_table


def _run(folder, history):
    folder.mkdir()
    (folder / "trainer_state.json").write_text(json.dumps({"log_history": history}))
    return str(folder)


def test_each_rl_run_gives_its_logged_rewards_per_step_and_sft_folders_none(tmp_path):
    rapo = _run(tmp_path / "rapo", [
        {"step": 1, "reward": 0.25, "rapo/reward_on_policy": 0.0, "rapo/reward_hybrid_retrieved": 0.5, "loss": 1.0},
        {"step": 2, "reward": 0.5, "rapo/reward_on_policy": 0.25},  # no row retrieved: no hybrid reward logged
        {"step": 2, "train_runtime": 9.0},  # the closing summary has no reward
    ])
    grpo = _run(tmp_path / "grpo", [{"step": 1, "reward": 0.125}, {"step": 2, "reward": 0.375}])
    (tmp_path / "sft").mkdir()
    steps = training_steps({"sft_same_time": str(tmp_path / "sft"), "grpo_same_rollouts": grpo, "trained": rapo})
    assert list(steps) == ["grpo_same_rollouts", "trained"]
    assert steps["trained"] == [
        {"step": 1, "reward": 0.25, "rapo/reward_on_policy": 0.0, "rapo/reward_hybrid_retrieved": 0.5},
        {"step": 2, "reward": 0.5, "rapo/reward_on_policy": 0.25},
    ]
    lines = training_table(steps).splitlines()
    assert lines[2] == ("| step | grpo_same_rollouts: reward | trained: reward | trained: on-policy "
                        "| trained: hybrid, retrieved |")
    assert lines[4:] == ["| 1 | 0.125 | 0.250 | 0.000 | 0.500 |", "| 2 | 0.375 | 0.500 | 0.250 | - |"]


def test_no_rl_run_no_table(tmp_path):
    (tmp_path / "sft").mkdir()
    assert training_steps({"warm_start": str(tmp_path / "sft")}) == {}
    assert training_table({}) == ""
