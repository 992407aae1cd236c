"""``rapo eval``, ``build-store`` and ``train`` put their models where the hardware rule says.

A GPU is patched in (``torch.cuda.is_available``/``is_bf16_supported``) and the loads are recorded, so
these run on the CPU; ``test_eval_runs_on_cuda`` runs the evaluation on a real GPU where there is one.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from transformers import PreTrainedModel
from trl import ModelConfig

from rapo_trl.cli.arguments import RAPOScriptArguments
from tests.helpers.hardware import fake_gpu, fresh_hardware_probes, no_gpu  # noqa: F401


class Stop(Exception):
    """Raised by a recorder once it has seen what it was asked for."""


def eval_rows(n: int = 2):
    from rapo_trl.tasks import PYTHON_SYSTEM_PROMPT, load_task, to_rapo_rows

    return to_rapo_rows(load_task("arithmetic", split="eval", n=n, seed=0), system_prompt=PYTHON_SYSTEM_PROMPT)


ROLLOUT_ARGS = SimpleNamespace(max_completion_length=16, max_turn_tokens=8, temperature=1.0, use_cpu=False, seed=0,
                               max_tool_calls=3, max_tool_result_chars=4000, answer_stop="</answer>", reward_weights=None,
                               chat_template_kwargs=None)


@pytest.fixture
def loads(monkeypatch):
    """Records each model load's device_map/dtype, then loads for real on the CPU in fp32."""
    asked = []
    real = PreTrainedModel.from_pretrained.__func__

    def recording(cls, path, *args, **kwargs):
        asked.append((kwargs.get("device_map"), kwargs.get("dtype")))
        return real(cls, path, *args, **{**kwargs, "device_map": "cpu", "dtype": torch.float32})

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(recording))
    return asked


@pytest.mark.parametrize("native_bf16, dtype", [(True, torch.bfloat16), (False, torch.float16)])
def test_eval_asks_for_the_gpu(monkeypatch, loads, tiny_model_dir, native_bf16, dtype):
    from rapo_trl.cli.evaluate import evaluate_model

    fake_gpu(monkeypatch, native_bf16)
    evaluate_model(str(tiny_model_dir), eval_rows(), [], ROLLOUT_ARGS, 2)
    assert loads == [("cuda", dtype)]


def test_eval_device_option_wins(monkeypatch, loads, tiny_model_dir):
    from rapo_trl.cli.evaluate import evaluate_model

    fake_gpu(monkeypatch, native_bf16=True)
    evaluate_model(str(tiny_model_dir), eval_rows(), [], ROLLOUT_ARGS, 2, "cpu")
    assert loads == [("cpu", torch.float32)]


def test_build_store_model_agent_asks_for_the_gpu(monkeypatch, tiny_model_dir, tmp_path):
    from rapo_trl.cli import build_store

    fake_gpu(monkeypatch, native_bf16=True)
    asked = []

    def recording(cls, path, *args, **kwargs):
        asked.append((kwargs.get("device_map"), kwargs.get("dtype")))
        raise Stop

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(recording))
    # the command line leaves dtype unset (None) unless the recipe sets it: then the hardware decides
    model_args = ModelConfig(dtype=None)
    rapo_args = SimpleNamespace(**vars(ROLLOUT_ARGS), trust_remote_code=False, model_init_kwargs=None)
    for device, expected in ((None, ("cuda", torch.bfloat16)), ("cpu", ("cpu", torch.float32))):
        script = RAPOScriptArguments(agent=str(tiny_model_dir), train_size=2, store_path=str(tmp_path / "store"),
                                     device=device)
        with pytest.raises(Stop):
            build_store.run(script, rapo_args, model_args)
        assert asked.pop() == expected


@pytest.mark.parametrize(
    "gpu, use_cpu, explicit, expected",
    [
        ("ampere", False, None, (True, False)),
        ("t4", False, None, (False, True)),
        ("ampere", True, None, (False, False)),  # the trainer on the CPU: fp32
        (None, False, None, (False, False)),
        ("ampere", False, (False, False), (False, False)),  # the run's own precision wins
    ],
)
def test_warm_start_precision_follows_the_rule(monkeypatch, tmp_path, gpu, use_cpu, explicit, expected):
    import trl

    from rapo_trl.cli.warm_start import warm_start
    from rapo_trl.embeddings import HashingEmbedder
    from rapo_trl.store import TraceStore

    if gpu:
        fake_gpu(monkeypatch, native_bf16=gpu == "ampere")
    else:
        no_gpu(monkeypatch)
    asked = []

    def recording(**kwargs):
        asked.append((kwargs["bf16"], kwargs["fp16"], kwargs["use_cpu"]))
        raise Stop

    monkeypatch.setattr(trl, "SFTConfig", recording)
    store = TraceStore(tmp_path / "store", embedder=HashingEmbedder())
    store.add_trajectories(["<python>print(6 * 7)</python>\n<answer>\\boxed{42}</answer>"], [1.0], ["q1"],
                           prompts=["six times seven"])
    rows = [{"prompt": [{"role": "user", "content": "six times seven"}], "question_id": "q1"}]
    precision = dict(zip(("bf16", "fp16"), explicit, strict=True)) if explicit else {}
    with pytest.raises(Stop):
        warm_start("unused", None, rows, store, str(tmp_path), steps=1, learning_rate=1e-4, min_reward=1.0,
                   use_cpu=use_cpu, seed=0, **precision)
    assert asked == [(*expected, use_cpu)]


def test_train_device_must_match_where_the_trainer_runs(monkeypatch):
    from rapo_trl.cli import train

    fake_gpu(monkeypatch, native_bf16=True)
    with pytest.raises(ValueError, match="--use_cpu true"):
        train.run(RAPOScriptArguments(device="cpu"), ROLLOUT_ARGS, SimpleNamespace(model_name_or_path="unused"))
    no_gpu(monkeypatch)
    with pytest.raises(ValueError, match="no CUDA GPU"):
        train.run(RAPOScriptArguments(device="cuda"), ROLLOUT_ARGS, SimpleNamespace(model_name_or_path="unused"))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_eval_runs_on_cuda(tiny_model_dir, monkeypatch):
    """On a real GPU the evaluation's model lives there, in the rule's precision, and finishes."""
    from rapo_trl.cli import evaluate

    loaded = []
    real = evaluate.load_policy

    def keep(*args, **kwargs):
        loaded.append(real(*args, **kwargs))
        return loaded[-1]

    monkeypatch.setattr(evaluate, "load_policy", keep)
    evaluate.evaluate_model(str(tiny_model_dir), eval_rows(4), [], ROLLOUT_ARGS, 4)
    (model, _), = loaded
    expected = torch.bfloat16 if torch.cuda.is_bf16_supported(including_emulation=False) else torch.float16
    assert {(p.device.type, p.dtype) for p in model.parameters()} == {("cuda", expected)}


@pytest.mark.parametrize("flag, expected", [([], ("cuda", torch.bfloat16)), (["--device", "cpu"], ("cpu", torch.float32))])
def test_eval_command_line_device_reaches_the_loader(monkeypatch, loads, tiny_model_dir, tmp_path, flag, expected):
    """The whole `rapo eval` path: YAML + `--device` parsed, then every model loaded where it says."""
    from rapo_trl.cli import evaluate, parse_recipe

    recipe = tmp_path / "recipe.yaml"
    recipe.write_text(f"task: arithmetic\neval_size: 2\nmodel_name_or_path: {tiny_model_dir}\n"
                      f"eval_model: {tiny_model_dir}\noutput_dir: {tmp_path / 'out'}\nuse_cpu: true\nbf16: false\n"
                      "max_completion_length: 16\nmax_turn_tokens: 8\nreport_to: none\n")
    script, rapo_args, model_args = parse_recipe("eval", ["--config", str(recipe), *flag])
    fake_gpu(monkeypatch, native_bf16=True)
    evaluate.run(script, rapo_args, model_args)
    assert loads and set(loads) == {expected}


def test_the_trainer_config_is_a_copy_and_the_recipe_stays_as_parsed(tmp_path):
    from rapo_trl.cli.trainer_build import with_values
    from rapo_trl.config import RAPOConfig

    recipe = RAPOConfig(output_dir=str(tmp_path), num_generations=2, per_device_train_batch_size=2,
                        push_to_hub=True, hub_model_id="me/run", report_to="none")
    trainer_args = with_values(recipe, push_to_hub=False, reward_weights=[1.0, 0.5], model_init_kwargs={"dtype": "bf16"})
    assert (trainer_args.push_to_hub, trainer_args.reward_weights) == (False, [1.0, 0.5])
    assert recipe.push_to_hub and recipe.reward_weights is None and recipe.model_init_kwargs is None
    assert trainer_args.to_dict()["use_cpu"] == recipe.to_dict()["use_cpu"]
    with pytest.raises(AttributeError, match="no field"):
        with_values(recipe, push_to_hbu=False)
