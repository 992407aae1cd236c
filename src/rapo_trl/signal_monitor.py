"""Notices when a run has lost its learning signal, and says what to change.

GRPO-style advantages are zero in a group whose rewards are all equal, so steps where every group is flat
(all wrong, all right, or all malformed) train nothing; rollouts cut by the budget score as failures
whatever they did; a step whose every tool call failed (a broken sandbox, a missing binary) teaches the
policy that tools do not work. All are silent in the loss curve, so the trainer warns once, with the fix.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FLAT_GROUPS_ADVICE = (
    "every group's rewards have been equal for {steps} steps, so all advantages are zero and nothing is "
    "learned (mean reward {reward:.3f}). Make the training questions ones the model solves sometimes "
    "(an easier task difficulty or template subset, or a longer SFT warm start), or raise num_generations "
    "or temperature."
)
TRUNCATION_ADVICE = (
    "{share:.0%} of rollouts were truncated in each of the last {steps} steps; a truncated rollout scores as "
    "a failure whatever it did. Raise max_turn_tokens (tokens per step) or max_completion_length, or lower "
    "max_tool_calls."
)

TOOLS_FAILING_ADVICE = (
    "every tool call of the last step failed ({calls} calls); first errors: {errors}. If the tool itself is "
    "broken (a sandbox that cannot start, a missing binary or corpus), the policy is learning that tools do not "
    "work: check it outside training, e.g. PythonTool().run('print(1)'). If the calls themselves are wrong, "
    "training goes on and the rewards decide."
)
THREAD_BOUND_ADVICE = (
    "a JSON tool call failed with an error that names a thread ({error}). Calls run on worker threads, each under "
    "json_tool_timeout; an environment whose methods need the thread that made their resources (a sqlite3 "
    "connection opened in reset, signal.alarm) fails on every call there. Set json_tool_timeout=None to run the "
    "calls one after another on the trainer's thread, as TRL's GRPOTrainer does."
)


@dataclass
class SignalMonitor:
    """Counts consecutive signal-less steps; ``update`` returns the warnings due (each at most once)."""

    patience: int = 3
    """Consecutive bad steps before a warning; 0 disables the monitor."""
    truncation_threshold: float = 0.5
    """Share of truncated rollouts above which a step counts as mostly truncated."""
    tolerance: float = 1e-6
    """Rewards closer than this count as equal."""
    json_calls_on_workers: bool = False
    """JSON tool calls run on worker threads (``json_tool_timeout`` set): a call failing on thread affinity says so."""
    flat_steps: int = 0
    truncated_steps: int = 0
    warned: set = field(default_factory=set)

    def update(self, rewards: list[float], group_size: int, truncated: list[bool]) -> list[str]:
        if self.patience <= 0 or not rewards:
            return []
        groups = [rewards[i : i + group_size] for i in range(0, len(rewards), group_size)]
        flat = all(max(g) - min(g) <= self.tolerance for g in groups)
        self.flat_steps = self.flat_steps + 1 if flat else 0
        share = sum(truncated) / len(truncated) if truncated else 0.0
        self.truncated_steps = self.truncated_steps + 1 if share > self.truncation_threshold else 0
        due = []
        if self.flat_steps >= self.patience and "flat" not in self.warned:
            self.warned.add("flat")
            due.append(FLAT_GROUPS_ADVICE.format(steps=self.flat_steps, reward=sum(rewards) / len(rewards)))
        if self.truncated_steps >= self.patience and "truncated" not in self.warned:
            self.warned.add("truncated")
            due.append(TRUNCATION_ADVICE.format(share=share, steps=self.truncated_steps))
        return due

    def update_tools(self, calls: int, errors: list[tuple[str, str]]) -> list[str]:
        """The warnings due when a step made tool calls and every one failed, and when a JSON call failed on a
        worker thread for being there (``errors``: (tag, message))."""
        if self.patience <= 0:
            return []
        due = []
        thread_bound = [f"<{tag}>: {message}" for tag, message in errors if "thread" in message.lower()]
        if self.json_calls_on_workers and thread_bound and "threads" not in self.warned:
            self.warned.add("threads")
            due.append(THREAD_BOUND_ADVICE.format(error=thread_bound[0]))
        if calls and len(errors) >= calls and "tools" not in self.warned:
            self.warned.add("tools")
            first = dict.fromkeys(f"<{tag}>: {message}" for tag, message in errors)
            due.append(TOOLS_FAILING_ADVICE.format(calls=calls, errors="; ".join(list(first)[:3])))
        return due
