#!/usr/bin/env python3
"""The GPT of worker/models/gpt_model.cc in PyTorch eager: forward + backward of one
training step (no optimizer; pstrain's runs on the servers), timed on the
same device as bench/worker_bench (a GPU, or the CPU with --device=cpu
--threads=N), same shapes, same dtype. Prints JSON.

The model is pstrain's: byte tokens (vocabulary 256), learned token and
position embeddings, pre-norm blocks (LayerNorm eps 1e-5, q|k|v in one
biased linear, causal softmax attention, output projection, GELU tanh MLP of
4x width), a final LayerNorm and an unbiased, untied head; the loss is the
mean next-byte cross-entropy.

  python3 bench/torch_gpt_step.py --layers=6 --width=384 --heads=6 \
      --context=256 --batch=16 --dtypes=fp32,bf16 --attention=manual,sdpa

dtype fp32: plain fp32 (TF32 off, PyTorch's default for matmuls). dtype
bf16: fp32 weights under torch.autocast(bfloat16), which rounds every
matrix product's inputs to bf16 (pstrain's --compute_dtype=bf16 rounds the
dense products' inputs). attention "manual" materialises the scores and the
softmax as pstrain does; "sdpa" is F.scaled_dot_product_attention (fused,
flash or memory-efficient kernels), PyTorch's fastest path (PyTorch 2.0 and
later; an older one, like Debian 12's 1.13, measures "manual" only).

  python3 bench/torch_gpt_step.py --device=cpu --threads=1 --layers=2 \
      --width=128 --heads=4 --context=64 --batch=16 --dtypes=fp32
"""
import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


class Block(nn.Module):
    def __init__(self, width, heads, attention):
        super().__init__()
        self.heads, self.attention = heads, attention
        self.ln1 = nn.LayerNorm(width, eps=1e-5)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.ln2 = nn.LayerNorm(width, eps=1e-5)
        self.fc = nn.Linear(width, 4 * width)
        self.mlp_proj = nn.Linear(4 * width, width)

    def forward(self, x, mask):
        b, t, c = x.shape
        h, d = self.heads, c // self.heads
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, h, d).transpose(1, 2) for z in (q, k, v))
        if self.attention == "sdpa":
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / d**0.5)
            att = att.masked_fill(mask[:t, :t], float("-inf")).softmax(dim=-1)
            y = att @ v
        y = y.transpose(1, 2).reshape(b, t, c)
        x = x + self.proj(y)
        return x + self.mlp_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    def __init__(self, layers, width, heads, context, attention):
        super().__init__()
        self.wte = nn.Embedding(256, width)
        self.wpe = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads, attention) for _ in range(layers))
        self.lnf = nn.LayerNorm(width, eps=1e-5)
        self.head = nn.Linear(width, 256, bias=False)
        self.register_buffer(
            "mask", torch.triu(torch.ones(context, context, dtype=torch.bool), diagonal=1))

    def forward(self, tokens, targets):
        t = tokens.shape[1]
        x = self.wte(tokens) + self.wpe(torch.arange(t, device=tokens.device))
        for blk in self.blocks:
            x = blk(x, self.mask)
        logits = self.head(self.lnf(x))
        return F.cross_entropy(logits.float().view(-1, 256), targets.view(-1))


def synchronize(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize()


def measure(args, dtype, attention):
    torch.manual_seed(1)
    dev = torch.device(args.device)
    model = Gpt(args.layers, args.width, args.heads, args.context, attention).to(dev)
    tokens = torch.randint(0, 256, (args.batch, args.context), device=dev)
    targets = torch.randint(0, 256, (args.batch, args.context), device=dev)
    # bf16 and fp16: autocast, as a PyTorch user trains in them (fp16's
    # loss scaling only multiplies the loss here: there is no optimizer step).
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(dtype)
    # tf32: fp32 whose matrix products (and cuDNN's) may use TF32 tensor
    # cores, as allow_tf32 says (off by default in PyTorch, as in pstrain).
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    torch.backends.cudnn.allow_tf32 = dtype == "tf32"
    ctx = (torch.autocast(dev.type, dtype=half) if half is not None
           else torch.autocast(dev.type, enabled=False))

    def step():
        model.zero_grad(set_to_none=True)
        with ctx:
            loss = model(tokens, targets)
        loss.backward()
        return loss

    for _ in range(3):
        step()
    synchronize(dev)
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = []
    loss = None
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        synchronize(dev)
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    peak = torch.cuda.max_memory_allocated() if dev.type == "cuda" else None
    return {
        "dtype": dtype, "attention": attention,
        "step_ms": round(med * 1e3, 3),
        "step_ms_min": round(min(times) * 1e3, 3), "step_ms_max": round(max(times) * 1e3, 3),
        "tokens_per_s": round(args.batch * args.context / med),
        "peak_device_mib": None if peak is None else round(peak / 2**20, 1),
        "loss": round(loss.item(), 4),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=384)
    p.add_argument("--heads", type=int, default=6)
    p.add_argument("--context", type=int, default=256)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--dtypes", default="fp32,bf16")
    p.add_argument("--attention", default="manual,sdpa")
    p.add_argument("--device", default="cuda", help="cuda, cuda:N or cpu")
    p.add_argument("--threads", type=int, default=0,
                   help="CPU threads (torch.set_num_threads; 0: PyTorch's default). OpenBLAS, "
                   "which runs the matrix products, takes its own from OPENBLAS_NUM_THREADS "
                   "(default: one a core)")
    args = p.parse_args()
    if args.threads > 0:
        torch.set_num_threads(args.threads)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    attentions = args.attention.split(",")
    if "sdpa" in attentions and not hasattr(F, "scaled_dot_product_attention"):
        if attentions == ["sdpa"]:
            p.error(f"--attention=sdpa needs PyTorch 2.0 or later (this is {torch.__version__})")
        attentions.remove("sdpa")
    runs = [measure(args, d, a) for d in args.dtypes.split(",") for a in attentions]
    dev = torch.device(args.device)
    print(json.dumps({
        "bench": "torch_gpt_step", "torch": torch.__version__,
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "threads": torch.get_num_threads(),
        "model": {"layers": args.layers, "width": args.width, "heads": args.heads,
                  "context": args.context, "batch": args.batch,
                  "tokens_per_step": args.batch * args.context},
        "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
