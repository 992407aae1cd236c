"""Fault handling, apart from the step's own logic: RAPO's state in a checkpoint and whole-checkpoint saves
(``checkpoint.py``), the generation a checkpoint falls inside (``generation_buffer.py``), the epoch order a resumed run walks (``epoch_order.py``), taking back what interrupted steps grew
into the store (``growth_rollback.py``), a SIGTERM stop at the end of a step (``sigterm_stop.py``) and an unreachable
store (``store_outage.py``). The trainer reaches it through one mixin, ``checkpointing.CheckpointingMixin``; the
only other things it takes from here are the run id and tag it stamps on the records it grows
(``growth_rollback.new_run_id``, ``growth_tag``)."""
