"""RAPOTrainer's model card, as a mixin before GRPOTrainer: TRL's card for this trainer plus RAPO's recipe and any
`rapo eval` table (built by ``rapo_trl.model_card``), written to ``output_dir/README.md``, also in place of the
empty template PEFT saves beside an adapter."""

from __future__ import annotations

import os


class ModelCardMixin:
    """Overrides TRL's ``create_model_card`` and Trainer's ``_save`` (checked by ``rapo_trl.internals``); needs
    ``_tag_names``, ``_name`` and ``_paper`` on the trainer, which ``rapo_trl.model_card`` reads."""

    def create_model_card(self, model_name=None, dataset_name=None, tags=None, **kwargs):
        """TRL's card for this trainer (paper, tags, citation) plus RAPO's recipe and any `rapo eval` table,
        written to ``output_dir/README.md``; see `rapo_trl.model_card`."""
        if not self.is_world_process_zero():
            return
        from rapo_trl.model_card import build_model_card

        card = build_model_card(
            self,
            model_name=model_name,
            dataset_name=dataset_name,
            tags=tags,
            base_model=kwargs.get("base_model"),
            evaluation=kwargs.get("evaluation"),
        )
        output_dir = kwargs.get("output_dir") or self.args.output_dir
        os.makedirs(output_dir, exist_ok=True)
        path = os.path.join(output_dir, "README.md")
        # A card written again with the model unchanged since this trainer last wrote it there (push_to_hub saves
        # before it uploads) keeps the table add_evaluation put in since: it scored this model. A model trained
        # further, or another trainer's, gets none.
        written = self.__dict__.setdefault("_card_written_at_step", {})
        key = os.path.abspath(output_dir)
        if kwargs.get("evaluation") is None and written.get(key) == self.state.global_step and os.path.isfile(path):
            from rapo_trl.model_card import card_with_evaluation_section, evaluation_section_of

            with open(path) as file:
                kept = evaluation_section_of(file.read())
            if kept:
                card = type(card)(card_with_evaluation_section(str(card), kept))
        written[key] = self.state.global_step
        card.save(path)

    def _save(self, output_dir=None, state_dict=None):
        super()._save(output_dir, state_dict)
        # PEFT's save_pretrained leaves its empty card template (with a local base path): put RAPO's card in
        # its place. Checkpoints are left as they are (TRL writes the card to output_dir when it saves one).
        folder = output_dir or self.args.output_dir
        if self.is_world_process_zero() and not os.path.basename(os.path.normpath(folder)).startswith(
            "checkpoint-"
        ):
            self.create_model_card(output_dir=folder)
