"""What a trained run leaves beside its model for ``rapo plot`` and ``rapo eval``: TRL's logged history and its plots."""

from __future__ import annotations


def save_history_and_plots(trainer, output_dir: str) -> None:
    """``trainer_state.json`` (the logged history ``rapo plot`` redraws from) and the PNGs beside the model."""
    trainer.save_state()
    if not trainer.is_world_process_zero():
        return
    from rapo_trl.plots import PLOTS_DIR, plot_run

    try:
        plot_run(output_dir)
    except ValueError as error:  # nothing was logged (e.g. logging_steps beyond max_steps): say so, go on
        print(f"No plots written: {error}")
        return
    print(f"Plots in {output_dir}/{PLOTS_DIR}/ (redraw with `rapo plot {output_dir}`).")
