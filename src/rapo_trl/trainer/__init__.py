"""RAPOTrainer and the small parts it wires together (one concern per module)."""

from rapo_trl.trainer.resilience.checkpoint import RAPO_STATE_FILE
from rapo_trl.trainer.trainer import RAPOTrainer

__all__ = ["RAPO_STATE_FILE", "RAPOTrainer"]
