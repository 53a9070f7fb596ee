"""A LoRA fine-tune of the fortunes transformer on another text: a pstrain
worker, or alone with --alone.

The base is examples/torch/transformer_fortunes.py's model, loaded from
--base: a safetensors file (what `psctl export` writes of its job) or a
torch.save'd state_dict (its --weights_out). Every base parameter is
frozen (requires_grad=False, so it stays on the workers) and low-rank
adapters are added to each block's MLP (linear1, linear2) and to its
attention's output projection (out_proj). nn.MultiheadAttention keeps the
query/key/value projection as one raw Parameter (in_proj_weight), which is
left without an adapter. Only the adapters are trainable, so only they go
to the servers. The target text is the fortune file `literature`, which
the base never saw; every 20th of its fortunes is held out to validate
(its last 5% would be a single long dialogue, too few to judge by).

As a worker (the job file names the optimizer, batch and clocks):

    PSTRAIN_SCHEDULER=127.0.0.1:PORT python3 examples/torch/lora_fortunes.py \\
        --base=transformer.safetensors

Alone, torch.optim.Adam on the same global batches:

    python3 examples/torch/lora_fortunes.py --alone --base=transformer.pt

Both print the validation loss (nats per byte) on `literature` before and
after the fine-tune.
"""

import argparse
import json
import math
import os
import pathlib
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

# transformer_fortunes beside this script.
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import pstrain.torch as pst
from pstrain.checkpoint import load_safetensors
from transformer_fortunes import (FORTUNES, ByteTransformer, ByteWindows,
                                  add_common_args, byte_tensor, evaluate, train)

SEPARATOR = b"\n%\n"  # the line between two fortunes


class LoRALinear(nn.Module):
    """A frozen nn.Linear plus a trainable low-rank update:
    y = x (W + s B A)^T + b, with A [rank, in] (random), B [out, rank]
    (zero, so the module starts as the base layer) and s = alpha / rank.

    The update is merged into `weight` rather than added to the output,
    because nn.MultiheadAttention reads out_proj.weight and out_proj.bias
    instead of calling out_proj.
    """

    def __init__(self, base, rank, alpha):
        super().__init__()
        if rank < 1:
            raise ValueError("LoRA rank %d < 1" % rank)
        self.base = base.requires_grad_(False)
        like = {"device": base.weight.device, "dtype": base.weight.dtype}
        self.lora_a = nn.Parameter(torch.empty(rank, base.in_features, **like))
        self.lora_b = nn.Parameter(torch.zeros(base.out_features, rank, **like))
        nn.init.kaiming_uniform_(self.lora_a, a=math.sqrt(5))  # nn.Linear's own init
        self.scale = alpha / rank

    @property
    def weight(self):
        return self.base.weight + self.scale * (self.lora_b @ self.lora_a)

    @property
    def bias(self):
        return self.base.bias

    def forward(self, x):
        return F.linear(x, self.weight, self.bias)


def add_lora(model, rank, alpha):
    """Freezes model's parameters and puts adapters on each block's
    linear1, linear2 and self_attn.out_proj."""
    model.requires_grad_(False)
    for block in model.blocks.layers:
        block.linear1 = LoRALinear(block.linear1, rank, alpha)
        block.linear2 = LoRALinear(block.linear2, rank, alpha)
        block.self_attn.out_proj = LoRALinear(block.self_attn.out_proj, rank, alpha)


def load_base(path):
    """The base state_dict: a .safetensors file, else a torch.save'd one."""
    if path.endswith(".safetensors"):
        return load_safetensors(path)
    state = torch.load(path, map_location="cpu")
    if not isinstance(state, dict):
        raise ValueError("%s holds a %s, not a state_dict" % (path, type(state).__name__))
    return state


def split_fortunes(path, context, every=20):
    """(training windows, validation windows) of the fortune file at path:
    every `every`-th fortune is held out for validation, the others train."""
    fortunes = pathlib.Path(path).read_bytes().split(SEPARATOR)
    if len(fortunes) < every:
        raise ValueError("%s: %d fortunes (separated by %% lines); at least %d are needed"
                         % (path, len(fortunes), every))
    train_part = [f for i, f in enumerate(fortunes) if i % every != every - 1]
    valid_part = fortunes[every - 1::every]
    return tuple(ByteWindows(byte_tensor(SEPARATOR.join(part)), context)
                 for part in (train_part, valid_part))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base", required=True,
                   help="the base weights: FILE.safetensors (psctl export) or a "
                        "torch.save'd state_dict")
    add_common_args(p, lr=2e-3)
    p.add_argument("--result_json",
                   help='write {"validation_loss_before", "validation_loss", '
                        '"trainable_parameters", "frozen_parameters", "seconds"} here')
    p.add_argument("--heads", type=int, default=4, help="the base's attention heads")
    p.add_argument("--rank", type=int, default=8, help="the adapters' rank")
    p.add_argument("--alpha", type=float, default=16.0, help="the adapters' scale is alpha/rank")
    p.add_argument("--text", default=str(FORTUNES / "literature"),
                   help="the target text: a fortune file (fortunes separated by %% lines)")
    return p.parse_args()


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    if not args.alone:
        pst.init(scheduler=args.scheduler)
    model = ByteTransformer.from_state_dict(load_base(args.base), heads=args.heads).to(args.device)
    train_set, valid_set = split_fortunes(args.text, model.context)
    loss_before, _ = evaluate(model, valid_set, args.device)
    print("validation loss of the base %.4f nats/byte" % loss_before, flush=True)
    torch.manual_seed(args.torch_seed)
    add_lora(model, args.rank, args.alpha)
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen = sum(p.numel() for p in model.parameters() if not p.requires_grad)
    print("%d trainable parameters (the adapters), %d frozen" % (trainable, frozen), flush=True)
    seconds = train(args, model, train_set)
    loss, accuracy = evaluate(model, valid_set, args.device)
    if not args.alone:
        pst.finish(accuracy=accuracy)
    print("final validation loss %.4f nats/byte (%.4f before the fine-tune; next-byte "
          "accuracy %.4f; %.1f s of training)" % (loss, loss_before, accuracy, seconds),
          flush=True)
    if args.weights_out:
        torch.save(model.state_dict(), args.weights_out)
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump({"validation_loss_before": loss_before, "validation_loss": loss,
                       "trainable_parameters": trainable, "frozen_parameters": frozen,
                       "seconds": seconds}, f)


if __name__ == "__main__":
    main()
