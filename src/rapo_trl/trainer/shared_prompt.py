"""The group's prompt once in the loss: one forward per distinct prompt, its keys and values reused by every row.

A GRPO batch holds G completions of each prompt, and TRL's loss forward runs every row over prompt and
completion alike; in the demo 57 % of the loss tokens are copies of a group's prompt. Here a micro-batch's
distinct prompts (all but their last token) run once, their per-layer keys and values are expanded to the
rows by index, and the rows run only their last prompt token and completion on top of that cache. Positions,
masks and the scored labels are those of TRL's forward (``positions = 0..T-1`` over the padded row, the
completion's tokens labelled), so log-probs equal TRL's to float rounding; gradients reach the prompt's
activations through the expansion, summed over its rows. With dropout in training mode (LoRA dropout) the prompt's
dropout mask is drawn once per prompt rather than once per row: the same objective in expectation, not the same
sample of it.

TRL shuffles a generation batch's rows before splitting it into micro-batches, so a micro-batch of a few rows
rarely holds two of one group. Where every micro-batch of a generation feeds the same optimizer step (gradient
accumulation over the whole generation batch, one iteration), the order of rows does not change the gradient,
and :func:`rows_in_generation_order` puts them back in generation order: consecutive rows, one group's.

Used only where that holds (otherwise the trainer says why, once, and runs TRL's forward): a decoder whose
``forward`` takes a cache, full-attention ``DynamicLayer`` caches, no gradient checkpointing (recomputation would drop
the cache), no prompt-learning PEFT adapter (prompt or prefix tuning: PEFT's forward adds its virtual tokens or
replaces the cache on every call) and no multimodal inputs. Under several processes the model comes wrapped
(DistributedDataParallel): the checks read the model inside, and both forwards go through the wrapper, which hands
the cache on and reduces the gradient once, after the backward that spans them.
"""

from __future__ import annotations

import logging

import torch
from transformers.cache_utils import DynamicCache, DynamicLayer
from trl.trainer.utils import split_tensor_dict

from rapo_trl.rollout.backends.kv_decode import (
    cache_argument,
    last_position,
    prompt_learning_unavailable,
    unwrapped_model,
)

logger = logging.getLogger("rapo_trl.trainer")


def distinct_prompts(input_ids: torch.Tensor, attention_mask: torch.Tensor, prompt_len: int):
    """``(first, inverse)``: the first row of each distinct prompt and, per row, the index of its prompt;
    ``None`` when every row's prompt is its own (nothing to share) or the prompt is a single column."""
    if prompt_len < 2:
        return None
    prompt_mask = attention_mask[:, :prompt_len]
    key = torch.cat([input_ids[:, :prompt_len] * prompt_mask, prompt_mask], dim=1)
    unique, inverse = torch.unique(key, dim=0, return_inverse=True)
    if len(unique) == len(key):
        return None
    first = torch.stack([(inverse == u).nonzero()[0, 0] for u in range(len(unique))])
    return first, inverse


def shared_prompt_unavailable(model) -> str | None:
    """Why ``model`` cannot score with a shared prompt cache, in words, or None when it can."""
    inner = unwrapped_model(model)
    if getattr(inner.config, "is_encoder_decoder", False):
        return "the model is an encoder-decoder"
    reason = prompt_learning_unavailable(model)  # both forwards would get the virtual tokens, or PEFT's cache
    if reason is not None:
        return reason
    if cache_argument(model) is None:
        return f"{type(inner).__name__}.forward takes no KV cache argument"
    if getattr(inner, "is_gradient_checkpointing", False):
        return "gradient checkpointing recomputes layers without the cache"
    try:
        layers = DynamicCache(config=inner.config.get_text_config()).layers
    except Exception as error:  # noqa: BLE001 - any config the cache cannot be built from is a no
        return f"a DynamicCache cannot be built from the model's config ({error})"
    if not layers or any(type(layer) is not DynamicLayer for layer in layers):
        return "the model's cache is not made of full-attention DynamicLayer layers"
    return None


def score_with_shared_prompt(model, input_ids, attention_mask, logits_to_keep: int, compute_entropy: bool, groups):
    """TRL's fused-head log-probs (and entropies) of the last ``logits_to_keep`` tokens, prompts run once.

    ``groups`` is :func:`distinct_prompts`' answer for these rows. Returns ``(logps, entropies)`` shaped
    ``(B, logits_to_keep)`` like ``GRPOTrainer._get_per_token_logps_and_entropies``.
    """
    first, inverse = groups
    prompt_len = input_ids.size(1) - logits_to_keep
    head = prompt_len - 1  # the prompt's last token runs with the completion: its output scores the first token
    cache = DynamicCache(config=unwrapped_model(model).config.get_text_config())
    name = cache_argument(model)
    model(input_ids=input_ids[first, :head], attention_mask=attention_mask[first, :head], use_cache=True,
          logits_to_keep=last_position(head, input_ids.device), **{name: cache})
    for layer in cache.layers:  # rows of one prompt share its keys/values; backward sums their gradients
        layer.keys = layer.keys.index_select(0, inverse)
        layer.values = layer.values.index_select(0, inverse)
    tail_ids = input_ids[:, head:]
    labels = tail_ids.masked_fill(attention_mask[:, head:] == 0, -100)
    labels[:, :-logits_to_keep] = -100
    outputs = model(input_ids=tail_ids, attention_mask=attention_mask, labels=labels, fused_lm_head=True,
                    **{name: cache})
    logps = outputs.log_probs[:, -logits_to_keep:]
    entropies = outputs.entropy[:, -logits_to_keep:] if compute_entropy else None
    return logps, entropies


def scores_with_shared_prompts(model, input_ids, attention_mask, logits_to_keep: int, batch_size: int | None,
                               compute_entropy: bool, trl_scores, autocast):
    """``GRPOTrainer._get_per_token_logps_and_entropies``' answer with each distinct prompt of a chunk run once, or
    None where no chunk shares a prompt or the model cannot take the shared cache (said once, with the reason).
    ``trl_scores(ids, mask)`` is TRL's own scoring of a chunk; ``autocast()`` the trainer's mixed-precision context."""
    batch_size = batch_size or input_ids.size(0)
    prompt_len = input_ids.size(1) - logits_to_keep
    chunks = [(start, distinct_prompts(input_ids[start:start + batch_size],
                                       attention_mask[start:start + batch_size], prompt_len))
              for start in range(0, input_ids.size(0), batch_size)]
    if all(groups is None for _, groups in chunks):
        return None
    reason = shared_prompt_unavailable(model)
    if reason is not None:  # e.g. gradient checkpointing, on by default in GRPOConfig
        if reason not in _SAID:
            _SAID.add(reason)
            logger.warning("RAPO: the shared prompt forward is off for this model (%s): every row runs its prompt in the "
                           "loss, as in TRL.", reason)
        return None
    logps, entropies = [], []
    for start, groups in chunks:
        ids, mask = input_ids[start:start + batch_size], attention_mask[start:start + batch_size]
        if groups is None:
            chunk_logps, chunk_entropies, _ = trl_scores(ids, mask)
        else:
            with autocast():
                chunk_logps, chunk_entropies = score_with_shared_prompt(model, ids, mask, logits_to_keep,
                                                                        compute_entropy, groups)
        logps.append(chunk_logps)
        entropies.append(chunk_entropies)
    return torch.cat(logps), torch.cat(entropies) if compute_entropy else None, None


_SAID: set[str] = set()
"""Why the shared prompt could not serve, each reason said once per process."""

ROW_ADDITIVE_LOSS_TYPES = ("grpo", "dr_grpo", "dapo", "cispo", "sapo", "luspo", "vespo")
"""TRL loss types whose accumulated loss is the same however a generation's rows are split into equal micro-batches:
a per-row term averaged over the batch, or tokens over a normalizer fixed for the generation (not ``bnpo``)."""


def regroups_micro_batches(args, num_iterations: int, aux_loss_enabled: bool = False) -> bool:
    """Whether micro-batches may hold consecutive rows (one group's prompt each) instead of TRL's shuffled ones:
    only where that provably leaves the update unchanged. Every micro-batch of a generation is accumulated into one
    optimizer step, the loss is a sum over rows (not bnpo's per-micro-batch token mean) and nothing is selected or
    averaged per micro-batch (top-entropy tokens, the entropy bonus, an MoE router's load-balancing loss:
    ``aux_loss_enabled``, GRPOTrainer's attribute of that name)."""
    return (args.per_device_train_batch_size > 1 and num_iterations == 1 and not aux_loss_enabled
            and args.steps_per_generation == args.gradient_accumulation_steps
            and args.loss_type in ROW_ADDITIVE_LOSS_TYPES and args.top_entropy_quantile >= 1.0
            and args.entropy_coef == 0.0 and not args.use_adaptive_entropy)


ROW_KEY = "rapo_row"
"""Each row's index in its generation batch, carried through TRL's shuffle."""


def rows_in_generation_order(chunks: list[dict]) -> list[dict]:
    """TRL's micro-batches of one generation (shuffled), re-split with their rows in generation order, and within
    each run of rows that share a prompt, longest completion first.

    A micro-batch is padded to its longest row: pairing a group's rows by length (rather than in sampling order)
    keeps a short row from paying for a long one. Any order gives the same update where this is used
    (:func:`regroups_micro_batches`); this one costs the fewest padded positions."""
    keys = chunks[0].keys()
    whole = {}
    for key in keys:
        values = [chunk[key] for chunk in chunks]
        first = values[0]
        if isinstance(first, torch.Tensor) and first.ndim >= 1:
            whole[key] = torch.cat(values)
        elif isinstance(first, list):
            whole[key] = [item for value in values for item in value]
        else:  # scalars and None are the same in every chunk
            whole[key] = first
    order = _longest_first_within_prompts(whole, torch.argsort(whole[ROW_KEY]))
    for key, value in whole.items():
        if isinstance(value, torch.Tensor) and value.ndim >= 1:
            whole[key] = value[order]
        elif isinstance(value, list):
            whole[key] = [value[i] for i in order.tolist()]
    return split_tensor_dict(whole, len(chunks))


def _longest_first_within_prompts(whole: dict, order: torch.Tensor) -> torch.Tensor:
    """``order`` (generation order) with each run of consecutive rows of one prompt sorted longest completion
    first; runs keep their place. Without the columns that tell prompts and lengths, ``order`` as it is."""
    if not {"prompt_ids", "prompt_mask", "completion_mask"} <= whole.keys():
        return order
    prompts = (whole["prompt_ids"] * whole["prompt_mask"])[order]
    new_run = torch.ones(len(order), dtype=torch.long, device=order.device)
    new_run[1:] = (prompts[1:] != prompts[:-1]).any(dim=1).long()
    run = torch.cumsum(new_run, 0)
    length = whole["completion_mask"][order].sum(dim=1).long()
    key = run * (whole["completion_mask"].size(1) + 1) - length  # by run, then longest first
    return order[torch.sort(key, stable=True).indices]
