"""The agent's prompts are the ids GRPOTrainer rolls out from, so evaluation and store building see RL's format."""

from __future__ import annotations

from transformers import AutoTokenizer

from rapo_trl.rollout.agent import RolloutAgent


def test_a_text_prompt_gets_the_special_tokens_trl_gives_it(tiny_model, tiny_model_dir):
    model, _ = tiny_model
    # A tokenizer that opens every text with BOS, as Llama's and Gemma's do.
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir, bos_token="<|endoftext|>", add_bos_token=True)
    agent = RolloutAgent(model, tokenizer)
    # GRPOTrainer._tokenize_prompts encodes a text prompt as processing_class(text=prompts): special tokens added.
    trl_ids = tokenizer(text=["What is 6 * 7?"])["input_ids"][0]
    assert trl_ids[0] == tokenizer.bos_token_id
    assert agent.prompt_ids("What is 6 * 7?") == trl_ids
