"""Warnings about a setup that runs but would not train what the user meant; each said once, at start."""

from __future__ import annotations

import logging

from rapo_trl.protocol import TOOL_TAGS

logger = logging.getLogger("rapo_trl.trainer")

PEFT_MIN_LEARNING_RATE = 1e-5
"""Below this a LoRA adapter barely moves in a short run (GRPOConfig's inherited default is 1e-6)."""


def warn_if_nothing_to_retrieve(args, store) -> None:
    """Hybrid rollouts are configured but the store cannot feed them."""
    if args.retrieve_prob <= 0 or args.num_hybrid_generations == 0:
        return
    if store is None:
        logger.warning("RAPO: hybrid rollouts are configured (retrieve_prob=%s) but no trace_store was given: "
                       "nothing is retrieved and training is agentic GRPO. Pass trace_store=TraceStore(...) "
                       "built with build_from_agent / add_from_dataset, or set retrieve_prob=0.", args.retrieve_prob)
    elif hasattr(store, "__len__") and len(store) == 0:
        logger.warning("RAPO: the trace store %r is empty: every retrieval will insert the fallback text, not "
                       "a retrieved step. Fill it first (TraceStore.build_from_agent, add_from_dataset or "
                       "`rapo build-store`).", store)


def warn_if_learning_rate_too_low_for_peft(model, learning_rate: float) -> None:
    if hasattr(model, "peft_config") and learning_rate < PEFT_MIN_LEARNING_RATE:
        logger.warning(
            "RAPO: a PEFT adapter is training at learning_rate=%g; adapters barely move below %g in a short run "
            "(GRPOConfig's default 1e-6 is meant for full fine-tuning). LoRA usually wants ~1e-4: set "
            "RAPOConfig(learning_rate=...).", learning_rate, PEFT_MIN_LEARNING_RATE,
        )


def warn_if_prompt_and_tools_differ(dataset, tool_tags: list[str]) -> None:
    """The first training prompt should teach exactly the built-in tools the trainer runs."""
    try:
        prompt = dataset[0]["prompt"]
    except (TypeError, KeyError, IndexError, NotImplementedError):  # streaming or unusual datasets: no check
        return
    text = _system_text(prompt)
    taught = {tag for tag in TOOL_TAGS if f"<{tag}>" in text}
    running = {tag for tag in TOOL_TAGS if tag in tool_tags}
    for tag in sorted(taught - running):
        logger.warning("RAPO: the training prompts teach <%s> but the trainer runs no %s tool, so every such call "
                       "fails. Build the rows with to_rapo_rows(..., tools=<the tools you pass>) or add the tool.",
                       tag, tag)
    for tag in sorted(running - taught) if taught else ():
        logger.warning("RAPO: the trainer runs a <%s> tool that the training prompts never mention. Build the rows "
                       "with to_rapo_rows(..., tools=<the tools you pass>).", tag)


def _system_text(prompt) -> str:
    """A conversation's system messages; a plain-text prompt as a whole (its instructions are inline)."""
    if isinstance(prompt, list):
        return "\n".join(str(m.get("content", "")) for m in prompt if isinstance(m, dict) and m.get("role") == "system")
    return str(prompt)
