"""The SFT warm start reassembles each question's best stored trajectory."""

from rapo_trl.cli.warm_start import trajectories_from_store
from rapo_trl.embeddings import HashingEmbedder
from rapo_trl.store import TraceStore

GOOD = "<think>compute</think>\n<python>\nprint(6 * 7)\n</python>\n<result>\n42\n</result>\n<answer>\\boxed{42}</answer>"
BAD = "<think>guess</think>\n<python>\nprint(6 + 7)\n</python>\n<result>\n13\n</result>\n<answer>\\boxed{13}</answer>"


def test_best_trajectory_per_question_is_reassembled(tmp_path):
    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder())
    store.add_trajectories([GOOD, BAD, BAD], [1.0, 0.0, 0.5], ["q1", "q1", "q2"], prompts=["six times seven"] * 3)
    found = trajectories_from_store(store, min_reward=1.0)
    assert set(found) == {"q1"}  # q2's only trajectory is below the threshold
    assert found["q1"].split() == GOOD.split()  # same text, step by step
