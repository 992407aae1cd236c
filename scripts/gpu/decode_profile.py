"""Where a decode step's time goes on the GPU (step d of scripts/gpu/step.sh): SmolLM2-135M in bf16 at batch 8,
the model's forward alone (one token, KV cache) against the rollout backend's turn (KV loop and plain generate),
and torch.profiler's top operators of the KV loop by CPU time."""

import time

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, DynamicCache

from rapo_trl.models import smollm2_path
from rapo_trl.rollout import SamplingSettings, TransformersBackend
from rapo_trl.tasks import load_task, to_rapo_rows
from rapo_trl.tools import PythonTool

path = smollm2_path()
tok = AutoTokenizer.from_pretrained(path)
model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16).to("cuda").eval()
rows = to_rapo_rows(load_task("arithmetic", "eval", n=1), tools=[PythonTool()])
prompt = list(tok.apply_chat_template(rows[0]["prompt"], add_generation_prompt=True, tokenize=True, return_dict=False))
batch, new = 8, 64


def synced(fn):
    torch.cuda.synchronize()
    start = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - start, out


with torch.no_grad():
    ids = torch.tensor([prompt] * batch, device="cuda")
    cache = DynamicCache()
    model(input_ids=ids, use_cache=True, past_key_values=cache)
    step = ids[:, -1:]
    for _ in range(5):
        model(input_ids=step, use_cache=True, past_key_values=cache)
    seconds, _ = synced(lambda: [model(input_ids=step, use_cache=True, past_key_values=cache) for _ in range(50)])
print(f"model forward alone, batch {batch}, one token: {1000 * seconds / 50:.1f} ms/step")

sampling = SamplingSettings(temperature=1.0)
for label, reuse in (("KV loop", True), ("plain generate", False)):
    backend = TransformersBackend(model, tok, sampling, reuse_kv=reuse)
    backend.generate([prompt] * batch, [8] * batch, [])  # warm-up
    seconds, outs = synced(lambda b=backend: b.generate([prompt] * batch, [new] * batch, ["</python>"]))
    steps = max(len(o.token_ids) for o in outs)
    print(f"{label}: {seconds:.2f} s for {steps} steps of batch {batch}: {1000 * seconds / max(steps, 1):.1f} ms/step, "
          f"{sum(len(o.token_ids) for o in outs) / seconds:.0f} tok/s")

backend = TransformersBackend(model, tok, sampling)
with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]) as prof:
    backend.generate([prompt] * batch, [32] * batch, [])
print(prof.key_averages().table(sort_by="cpu_time_total", row_limit=25))
