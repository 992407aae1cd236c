"""Decode speed on CUDA with and without SDPA's cuDNN backend (TransformersBackend(avoid_cudnn_attention=...)), side
by side in one process. A random-weight Llama with SmolLM2-135M's shapes (30 layers, hidden 576, 9/3 heads) and the
tests' offline tokenizer: the timing depends on shapes, not weights, and needs no payload. Rows run to their budget
(EOS suppressed), so every path decodes the same number of steps."""

import os
import tempfile
import time

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, LogitsProcessor, LogitsProcessorList

import rapo_trl.models as models
from rapo_trl.rollout import SamplingSettings, TransformersBackend

folder = tempfile.mkdtemp()
models.qwen25_chat_template = lambda: ""  # the template comes from trl, which this probe does not need
models.build_tiny_model(folder)
tok = AutoTokenizer.from_pretrained(folder)
config = LlamaConfig(vocab_size=len(tok), hidden_size=576, intermediate_size=1536, num_hidden_layers=int(os.environ.get("PROBE_LAYERS", 30)),
                     num_attention_heads=9, num_key_value_heads=3, max_position_embeddings=2048, tie_word_embeddings=True,
                     eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
torch.manual_seed(0)
DEVICE = os.environ.get("PROBE_DEVICE", "cuda")  # cpu: a local check of the script
model = LlamaForCausalLM(config).to(DEVICE, torch.bfloat16).eval()


def sync():
    if DEVICE == "cuda":
        torch.cuda.synchronize()


class NoEos(LogitsProcessor):
    def __call__(self, input_ids, scores):
        scores[:, tok.eos_token_id] = -float("inf")
        return scores


prompt = tok("Compute the total number of books the library owns at the end of the year. " * 4)["input_ids"]
where = torch.cuda.get_device_name(0) if DEVICE == "cuda" else DEVICE
print(f"torch {torch.__version__}, {where}, prompt {len(prompt)} tokens")
rows = {}
for _repeat in range(2):
    for avoid in (True, False):
        for reuse in (True, False):
            backend = TransformersBackend(model, tok, SamplingSettings(temperature=1.0), reuse_kv=reuse,
                                          logits_processor=LogitsProcessorList([NoEos()]), avoid_cudnn_attention=avoid)
            for batch in (8, 64):
                backend.generate([prompt] * batch, [4] * batch, [])  # warm-up of this shape family
                sync()
                start = time.perf_counter()
                outs = backend.generate([prompt] * batch, [64] * batch, [])
                sync()
                seconds = time.perf_counter() - start
                key = (batch, "KV loop" if reuse else "plain generate", "flash/efficient" if avoid else "cuDNN allowed")
                rows.setdefault(key, []).append((seconds, sum(len(o.token_ids) for o in outs)))
print("| batch | path | attention | ms per decode step (best of 2) | tok/s |")
print("|---|---|---|---|---|")
for (batch, path, attention), runs in sorted(rows.items()):
    seconds, tokens = min(runs)
    print(f"| {batch} | {path} | {attention} | {1000 * seconds / 64:.1f} | {tokens / seconds:.0f} |")
