"""argparse as every ``rapo`` command uses it: exact option names, one-line errors that suggest a fix."""

from __future__ import annotations

import argparse
import difflib
import re


def option_names(name: str) -> list[str]:
    """``--top_k`` and ``--top-k``: both spellings, as TRL's (and transformers') HfArgumentParser takes fields."""
    return [f"--{name}"] + ([f"--{name.replace('_', '-')}"] if "_" in name else [])


# Names users bring from other libraries, and the field meant: closer in meaning than in spelling
# (difflib offers `local_rank` for `lora_rank`).
SYNONYMS = {"lora_rank": "lora_r", "rank": "lora_r", "lr": "learning_rate", "batch_size": "per_device_train_batch_size"}

# RAPOConfig fields that are gone, and what took their place: the one line a recipe still naming them gets.
_STORE_SETTING = ("was moved to the trace store's own settings: StoreConfig.{0} ({1}), set where the store is made "
                  "(TraceStore(path, config=StoreConfig({0}=...))); the trainer uses the store as given")
REPLACED = {
    "retrieve_when": "was replaced by retrieve_at (where a hybrid rollout retrieves: start, tool_step, "
                     "plan, first_tool_step) and retrieve_failed_groups_max_reward (retrieve only in groups whose on-policy "
                     "rollouts failed)",
    "retrieve_prob_schedule": "was replaced by retrieve_prob_final (unset: p constant; a value: p decays linearly "
                              "from retrieve_prob to it at the last step)",
    "guide_failed_groups": "was replaced by retrieve_failed_groups_max_reward (unset: off; 0.0 gives the old "
                           "default threshold)",
    "group_failed_reward": "was replaced by retrieve_failed_groups_max_reward (unset: off)",
    "retrieval_top_k": _STORE_SETTING.format("top_k", "default 3, the paper's"),
    "min_trace_reward": _STORE_SETTING.format("min_reward", "default 0.0, the paper's"),
    "fallback_text": _STORE_SETTING.format("fallback_text", "default: a note to reason alone"),
    "entropy_first_tokens": "was renamed step_entropy_first_tokens",
    "entropy_top_k": "was renamed step_entropy_top_k",
    "dynamic_sampling": "was replaced by dynamic_sampling_max_rounds (0: off; 2 was the default when on)",
    "grow_store": "was replaced by store_growth_min_reward (unset: off; 1.0 was the default when on)",
    "grow_store_min_reward": "was replaced by store_growth_min_reward (unset: off)",
    "trim_padding": "was removed: the loss forward always drops the columns that are padding in every row",
    "share_prompt_forward": "was removed: the loss forward always runs each distinct prompt of a micro-batch once "
                            "(TRL's forward where the model cannot)",
}


def replaced_field(word: str) -> str | None:
    """``"retrieve_when was replaced by ..."`` when ``word`` (a key or ``--flag``) names a field in ``REPLACED``."""
    name = word.lstrip("-").replace("-", "_")
    return f"{name} {REPLACED[name]}" if name in REPLACED else None


def closest(word: str, known) -> str | None:
    """The one of ``known`` that ``word`` most likely misspells (or names as another library does), if any."""
    known = list(known)
    dashes = word[: len(word) - len(word.lstrip("-"))]
    meant = SYNONYMS.get(word.lstrip("-").replace("-", "_"))
    if meant is not None and dashes + meant in known:
        return dashes + meant
    close = difflib.get_close_matches(word, known, n=1)
    return close[0] if close else None


def did_you_mean(word: str, known) -> str:
    """``"; did you mean --learning_rate?"`` when ``word`` is close to one of ``known``, else ``""``."""
    close = closest(word, known)
    return f"; did you mean {close}?" if close else ""


def _known(parser: argparse.ArgumentParser, commands: bool = False):
    """The option strings (or with ``commands``, the subcommand names) of ``parser`` and its subcommands."""
    for action in parser._actions:
        if not commands:
            yield from action.option_strings
        if isinstance(action, argparse._SubParsersAction):
            if commands:
                yield from action.choices
            for sub in action.choices.values():
                yield from _known(sub, commands)


class ArgumentParser(argparse.ArgumentParser):
    """No prefix matching (``--learning_rat`` is not taken as ``--learning_rate``: a typo must not pass
    silently), and an error is one line that suggests the option meant."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):
        if message.startswith("unrecognized arguments: "):
            options = [word for word in message.split(": ", 1)[1].split() if word.startswith("-")]
            option = options[0].split("=", 1)[0] if options else None
            replaced = option and replaced_field(option)
            message += f"; {replaced}" if replaced else did_you_mean(option, _known(self)) if option else ""
        choice = re.search(r"invalid choice: '?([^'\s]+)", message)
        if choice and not message.startswith("argument -"):  # a mistyped subcommand (an option lists its choices)
            message += did_you_mean(choice.group(1), _known(self, commands=True))
        self.exit(2, f"{self.prog}: error: {message} (see `{self.prog} --help`)\n")
