"""rapo_trl.internals: every private TRL/transformers piece RAPO uses is listed and present in what is installed."""

from __future__ import annotations

import re
from pathlib import Path

from trl import GRPOTrainer

from rapo_trl.internals import INTERNALS, Internal, check_internals, problem_with

SRC = Path(__file__).resolve().parents[1] / "src" / "rapo_trl"


def test_every_listed_internal_is_present_in_the_installed_libraries():
    assert check_internals() == []


def test_a_removed_hook_is_named(monkeypatch):
    monkeypatch.delattr(GRPOTrainer, "_calculate_rewards")
    (problem,) = check_internals()
    assert "GRPOTrainer._calculate_rewards" in problem and "missing" in problem and "reward" in problem


def test_a_changed_signature_is_named(monkeypatch):
    def renamed(self, model, batch):  # "inputs" renamed
        return 0

    monkeypatch.setattr(GRPOTrainer, "_compute_loss", renamed)
    problems = check_internals()
    assert any("_compute_loss" in p and "['inputs']" in p for p in problems), problems


class HooksInAnotherOrder:
    def __init__(self):
        self.rollout_func = None

    def _generate_and_score_completions(self, inputs):
        rewards = self._calculate_rewards(inputs)  # scored before generated: RAPO's hand-over would break
        return self._generate(inputs), rewards


def test_a_changed_call_order_is_named():
    internal = Internal(f"{__name__}:HooksInAnotherOrder", "_generate_and_score_completions", "test", ("inputs",),
                        calls_in_order=("self._generate(", "self._calculate_rewards("))
    problem = problem_with(internal)
    assert problem is not None and "self._calculate_rewards(" in problem
    assert problem_with(Internal(f"{__name__}:HooksInAnotherOrder", "rollout_func", "test", attribute=True)) is None


def _private_names(path: Path, receivers: str) -> set[str]:
    return set(re.findall(rf"\b(?:{receivers})\._([a-z]\w*)", path.read_text()))


def test_every_private_trl_or_transformers_name_the_code_uses_is_listed():
    """A new use of a TRL/transformers private name must be added to INTERNALS (and so be checked)."""
    import transformers
    from transformers.cache_utils import DynamicLayer

    listed = {i.name for i in INTERNALS}
    ours = {"pending_ratio_shift", "signal_monitor"}  # RAPOTrainer's own private attributes
    used = set()
    for path in (SRC / "trainer").glob("*.py"):
        used |= {f"_{n}" for n in _private_names(path, r"self|super\(\)|trainer|engine") if n not in ours}
    kv_decode = SRC / "rollout" / "backends" / "kv_decode.py"
    used |= {f"_{n}" for n in _private_names(kv_decode, r"inner|layer|super\(\)")}

    def provided_by_libraries(name: str) -> bool:
        owners = (GRPOTrainer, transformers.GenerationMixin, DynamicLayer)
        if any(hasattr(owner, name) for owner in owners):
            return True
        import inspect

        return f"self.{name} =" in inspect.getsource(GRPOTrainer.__init__)

    # _PreallocatedLayer's own buffer helpers are rapo_trl's, not transformers'.
    library_names = {n for n in used if provided_by_libraries(n)}
    unlisted = library_names - listed
    assert not unlisted, f"private TRL/transformers names used but not in rapo_trl.internals.INTERNALS: {unlisted}"
    assert {"_calculate_rewards", "_tokenize_prompts", "_metrics", "_get_logits_processor"} <= library_names


def test_a_renamed_cache_argument_of_the_decoder_forward_is_named(monkeypatch):
    """transformers 5.24 renamed ``past_key_values`` to ``cache``; the next rename must fail here, by name."""
    from transformers import Qwen2ForCausalLM

    def forward(self, input_ids=None, attention_mask=None, position_ids=None, kv_state=None, logits_to_keep=0):
        return None

    monkeypatch.setattr(Qwen2ForCausalLM, "forward", forward)
    (problem,) = check_internals()
    assert "Qwen2ForCausalLM.forward" in problem and "['cache', 'past_key_values']" in problem
    assert "kv_state" in problem

