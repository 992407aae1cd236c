"""RAPO's metrics reach the experiment tracker `report_to` names (TensorBoard, via the `tensorboard` extra)."""

from __future__ import annotations

import pytest
from datasets import Dataset
from transformers import AutoTokenizer

from rapo_trl.config import RAPOConfig
from rapo_trl.trainer import RAPOTrainer
from tests.helpers.fakes import EchoTool, FixedStore
from tests.helpers.trainers import common_args

pytest.importorskip("tensorboard")


def test_rapo_metrics_are_written_to_tensorboard(tiny_model_dir, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    args = RAPOConfig(**common_args(tmp_path, max_steps=1, max_completion_length=16, report_to="tensorboard"),
                      max_turn_tokens=8, retrieve_prob=1.0)
    prompts = Dataset.from_list([{"prompt": [{"role": "user", "content": f"Q{i}"}]} for i in range(4)])

    def length_reward(completion_ids, **kwargs):
        return [float(len(c) % 5) for c in completion_ids]

    trainer = RAPOTrainer(str(tiny_model_dir), length_reward, args=args, train_dataset=prompts, processing_class=tok,
                          trace_store=FixedStore(), tools=[EchoTool()])
    trainer.train()
    events = sorted(tmp_path.rglob("events.out.tfevents.*"))
    assert events, "no TensorBoard event file was written"
    tags = set()
    for path in events:
        accumulator = EventAccumulator(str(path))
        accumulator.Reload()
        tags.update(accumulator.Tags()["scalars"])
    for metric in ("rapo/hybrid_share", "rapo/retrieve_prob", "rapo/truncated_rate", "reward"):
        assert any(tag.endswith(metric) for tag in tags), (metric, sorted(tags))
