"""Each epoch's prompt order as an uninterrupted run walks it, also in a run resumed in a later epoch.

TRL's ``RepeatSampler`` draws one permutation per epoch from one generator, seeded once: epoch e's order is its
(e+1)-th draw. A run resumed in epoch e >= 1 builds a fresh sampler, whose first draw is epoch 0's order, so it would
walk epoch e in epoch 0's order (and, resumed at an epoch boundary, train those prompts again in the same order).
transformers calls ``set_epoch(e)`` on the sampler before each epoch; here it replays the draws of the epochs before
e, so every epoch walks the order of the uninterrupted run.
"""

from __future__ import annotations

import torch
from trl.trainer.utils import RepeatSampler


class ResumableRepeatSampler(RepeatSampler):
    """``RepeatSampler`` whose ``set_epoch(e)`` puts its generator where an uninterrupted run's is before epoch e."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._draws = 0  # permutations drawn since the generator was seeded

    @classmethod
    def like(cls, sampler: RepeatSampler) -> ResumableRepeatSampler:
        return cls(sampler.data_source, sampler.mini_repeat_count, sampler.batch_size, sampler.repeat_count,
                   sampler.shuffle, sampler.seed)

    def set_epoch(self, epoch: int) -> None:
        if not self.shuffle or self.seed is None or epoch == self._draws:
            return
        self.generator.manual_seed(self.seed)
        for _ in range(epoch):
            torch.randperm(self.num_samples, generator=self.generator)
        self._draws = epoch

    def __iter__(self):
        if self.shuffle:
            self._draws += 1
        return super().__iter__()


def resumable(sampler):
    """TRL's training sampler, as a :class:`ResumableRepeatSampler` when it is a plain ``RepeatSampler``."""
    return ResumableRepeatSampler.like(sampler) if type(sampler) is RepeatSampler else sampler
