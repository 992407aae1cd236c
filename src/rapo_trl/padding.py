"""Drop the padding columns a micro-batch does not need before the loss forward.

TRL pads a whole generation batch to its longest prompt (left) and longest completion (right), then
splits it into micro-batches of ``per_device_train_batch_size`` rows. A micro-batch of short rows still
carries every column of the longest one; the forward, backward and LM head pay for each. Columns in
which every row of the micro-batch is padding (``prompt_mask`` all 0 on the left, ``completion_mask``
all 0 on the right) carry no loss and are attended by no real token, so dropping them leaves the loss
and its gradients unchanged: with rotary position embeddings the attention scores depend on relative
positions only, so removing left padding shifts every position alike (equal to float rounding).
"""

from __future__ import annotations

import torch

PROMPT_KEYS = ("prompt_ids", "prompt_mask")
# Batches with these carry per-image or per-token side inputs whose layout we do not slice.
_UNSLICED_KEYS = ("pixel_values", "image_grid_thw", "token_type_ids", "mm_token_type_ids", "pixel_attention_mask")


def trim_padding_columns(inputs: dict, multiple: int | None = None) -> dict:
    """``inputs`` with leading all-padding prompt columns and trailing all-padding completion columns removed.

    ``multiple``: TRL's ``pad_to_multiple_of``; the prompt and completion each keep a multiple of it (TRL padded
    both to one, so the rounded widths fit). Every tensor of shape ``(B, T_completion, ...)`` (ids, masks,
    old/ref/sampling log-probs, per-token advantages) is cut to the same columns. Returns ``inputs`` itself when
    nothing can be dropped or the batch has side inputs (images) whose layout this does not know.
    """
    if any(inputs.get(key) is not None for key in _UNSLICED_KEYS):
        return inputs
    prompt_mask, completion_mask = inputs["prompt_mask"], inputs["completion_mask"]
    rows, prompt_len = prompt_mask.shape
    completion_len = completion_mask.shape[1]
    prompt_used = prompt_mask.bool().any(dim=0).nonzero()
    first = int(prompt_used[0]) if len(prompt_used) else prompt_len
    completion_used = completion_mask.bool().any(dim=0).nonzero()
    # Keep at least one completion column: TRL's metrics index the last position.
    end = int(completion_used[-1]) + 1 if len(completion_used) else 1
    if multiple:
        first = max(prompt_len - _rounded_up(prompt_len - first, multiple), 0)
        end = min(_rounded_up(end, multiple), completion_len)
    if first == 0 and end == completion_len:
        return inputs
    trimmed = dict(inputs)
    for key in PROMPT_KEYS:
        trimmed[key] = inputs[key][:, first:]
    for key, value in inputs.items():
        if key in PROMPT_KEYS or not isinstance(value, torch.Tensor) or value.dim() < 2:
            continue
        if value.shape[0] == rows and value.shape[1] == completion_len:
            trimmed[key] = value[:, :end]
    return trimmed


def _rounded_up(width: int, multiple: int) -> int:
    return -(-width // multiple) * multiple
