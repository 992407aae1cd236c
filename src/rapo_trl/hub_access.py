"""Whether the Hugging Face Hub can be reached and pushed to, asked before anything loads or trains: a push comes at
the end of a run, and transformers' ``Trainer`` creates the repo only after the model has loaded."""

from __future__ import annotations

import os


def hub_offline() -> bool:
    """Whether the Hub is offline: huggingface_hub's flag (read when it was imported) or the environment now."""
    from huggingface_hub import constants

    env = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return bool(constants.HF_HUB_OFFLINE) or env.upper() in {"1", "ON", "YES", "TRUE"}


def push_problem(token: str | None, push_later: str) -> str | None:
    """Why a push cannot happen (the Hub offline, no token to push with), or ``None``. ``push_later``: how to push
    once the run has ended, for the message."""
    if hub_offline():
        return f"push_to_hub needs the Hub, but HF_HUB_OFFLINE is set: unset it, or leave out push_to_hub and {push_later}"
    from huggingface_hub import get_token

    if not (token or get_token()):
        return ("push_to_hub needs a Hugging Face token: run `hf auth login` (or set HF_TOKEN, or hub_token) first, "
                f"or leave out push_to_hub and {push_later}")
    return None
