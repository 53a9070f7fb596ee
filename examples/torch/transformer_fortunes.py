"""A byte-level transformer language model on Debian's fortunes: a pstrain
worker, or alone with --alone.

The corpus is the plain-text fortune files of /usr/share/games/fortunes
(not the *.dat indexes nor the *.u8 links, and not `literature`, which
examples/torch/lora_fortunes.py fine-tunes on), concatenated in name order;
the last 5% is the validation text. An example is a window of `context`
bytes and the bytes that follow each of them.

As a worker (the job file names the optimizer, batch and clocks):

    PSTRAIN_SCHEDULER=127.0.0.1:PORT python3 examples/torch/transformer_fortunes.py

Alone, torch.optim.Adam on the same global batches the workers train on:

    python3 examples/torch/transformer_fortunes.py --alone --clocks=300 --lr=3e-3

Both print the final validation loss (nats per byte).
"""

import argparse
import json
import math
import pathlib
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data


import pstrain.torch as pst

FORTUNES = pathlib.Path("/usr/share/games/fortunes")
VALIDATION_FRACTION = 0.05
EVAL_WINDOWS = 512  # validation windows evaluated at most


class ByteTransformer(nn.Module):
    """A causal transformer over bytes: token and learned position
    embeddings, pre-norm nn.TransformerEncoderLayer blocks (GELU MLP 4x
    wide, no dropout), a final LayerNorm and a linear head to 256 logits."""

    def __init__(self, context=64, width=128, layers=2, heads=4):
        super().__init__()
        self.context = context
        self.tokens = nn.Embedding(256, width)
        self.positions = nn.Embedding(context, width)
        block = nn.TransformerEncoderLayer(width, heads, dim_feedforward=4 * width, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, 256)
        # True above the diagonal: position t attends to positions <= t.
        self.register_buffer("causal_mask",
                             torch.ones(context, context, dtype=torch.bool).triu(1),
                             persistent=False)

    @classmethod
    def from_state_dict(cls, state, heads=4):
        """The model whose parameters are `state` (context, width and layers
        read from its shapes; heads cannot be, so it is given)."""
        if "tokens.weight" not in state or "positions.weight" not in state:
            raise ValueError("not a ByteTransformer state dict: no tokens.weight or "
                             "positions.weight among %d tensors" % len(state))
        context, width = state["positions.weight"].shape
        layers = len({name.split(".")[2] for name in state if name.startswith("blocks.layers.")})
        model = cls(context=context, width=width, layers=layers, heads=heads)
        model.load_state_dict(state, strict=True)
        return model

    def forward(self, x):
        """Next-byte logits [batch, time, 256] of bytes x [batch, time]."""
        t = x.shape[1]
        h = self.tokens(x) + self.positions(torch.arange(t, device=x.device))
        h = self.blocks(h, mask=self.causal_mask[:t, :t])
        return self.head(self.norm(h))


class ByteWindows(torch.utils.data.Dataset):
    """The non-overlapping windows of `data` (uint8): example i is
    (data[i*c : i*c+c], data[i*c+1 : i*c+c+1]) as int64, c the context."""

    def __init__(self, data, context):
        if len(data) <= context:
            raise ValueError("%d bytes make no window of %d bytes and its next bytes"
                             % (len(data), context))
        self.data = data
        self.context = context

    def __len__(self):
        return (len(self.data) - 1) // self.context

    def __getitem__(self, i):
        begin = i * self.context
        window = self.data[begin:begin + self.context + 1].long()
        return window[:-1], window[1:]


def fortune_files(root=FORTUNES, exclude=("literature",)):
    """The plain-text fortune files under root, in name order."""
    files = sorted(p for p in root.iterdir()
                   if p.is_file() and p.suffix not in (".dat", ".u8") and p.name not in exclude)
    if not files:
        raise FileNotFoundError("no fortune files in %s (Debian's `fortunes` package)" % root)
    return files


def byte_tensor(data):
    """bytes as a uint8 tensor (a copy)."""
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def read_corpus(files):
    """The files' bytes concatenated, as a uint8 tensor."""
    return byte_tensor(b"".join(f.read_bytes() for f in files))


def split(data, context):
    """(training windows, validation windows): the last 5% of data validates."""
    cut = int(len(data) * (1 - VALIDATION_FRACTION))
    return ByteWindows(data[:cut], context), ByteWindows(data[cut:], context)


def lm_loss(logits, y):
    """Mean next-byte cross-entropy (nats per byte)."""
    return F.cross_entropy(logits.flatten(0, 1), y.flatten())


def evaluate(model, dataset, device):
    """(mean cross-entropy in nats per byte, next-byte accuracy) over the
    first EVAL_WINDOWS windows of dataset."""
    subset = torch.utils.data.Subset(dataset, range(min(EVAL_WINDOWS, len(dataset))))
    model.eval()
    loss, correct, count = 0.0, 0, 0
    with torch.no_grad():
        for x, y in torch.utils.data.DataLoader(subset, batch_size=128):
            x, y = x.to(device), y.to(device)
            logits = model(x)
            loss += float(F.cross_entropy(logits.flatten(0, 1), y.flatten(), reduction="sum"))
            correct += int((logits.argmax(-1) == y).sum())
            count += y.numel()
    model.train()
    return loss / count, correct / count


def add_common_args(p, lr):
    """The flags this example shares with lora_fortunes.py."""
    p.add_argument("--alone", action="store_true",
                   help="train in this process, without a cluster")
    p.add_argument("--scheduler", help="HOST:PORT (default: $PSTRAIN_SCHEDULER)")
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--data_dir", default=str(FORTUNES),
                   help="the fortune files (a bundle's data/fortunes on a machine without them)")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--torch_seed", type=int, default=0, help="torch.manual_seed for the init")
    p.add_argument("--weights_out", help="torch.save(model.state_dict()) here at the end")
    p.add_argument("--log_every", type=int, default=50, help="iterations between progress lines")
    alone = p.add_argument_group("--alone (a cluster takes these from its job)")
    alone.add_argument("--lr", type=float, default=lr, help="Adam's learning rate")
    alone.add_argument("--batch_size", type=int, default=32, help="the global batch")
    alone.add_argument("--clocks", type=int, default=300)
    alone.add_argument("--seed", type=int, default=42, help="the job's seed: the data order")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_common_args(p, lr=3e-3)
    p.add_argument("--result_json", help='write {"validation_loss", "seconds"} here')
    p.add_argument("--context", type=int, default=64, help="bytes per window")
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    return p.parse_args()


def train_alone(args, model, train):
    """torch.optim.Adam over the global batches pstrain's workers would train on."""
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=args.lr)
    for clock in range(args.clocks):
        indices = pst.batch_indices(clock, seed=args.seed, train_size=len(train),
                                    batch_size=args.batch_size)
        x, y = torch.utils.data.default_collate([train[i] for i in indices])
        opt.zero_grad()
        loss = lm_loss(model(x.to(args.device)), y.to(args.device))
        loss.backward()
        opt.step()
        log_progress(args, clock, loss)


def train_in_cluster(args, model, train):
    """A pstrain worker: the servers run the job's optimizer on the
    parameters with requires_grad=True."""
    opt = pst.Optimizer(model)
    for iteration, (x, y) in enumerate(pst.batches(train)):
        x, y = x.to(args.device), y.to(args.device)
        logits = model(x)
        loss = lm_loss(logits, y)
        loss.backward()
        pst.report(loss, correct=int((logits.argmax(-1) == y).sum()), predicted=y.numel())
        opt.step()
        log_progress(args, iteration, loss)


def train(args, model, train_set):
    """Trains model alone or as a worker; returns the seconds it took."""
    start = time.monotonic()
    (train_alone if args.alone else train_in_cluster)(args, model, train_set)
    return time.monotonic() - start


def log_progress(args, iteration, loss):
    if args.log_every > 0 and iteration % args.log_every == 0:
        print("iteration %d loss %.4f" % (iteration, loss.item()), flush=True)


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    if not args.alone:
        pst.init(scheduler=args.scheduler)
    train_set, valid_set = split(read_corpus(fortune_files(pathlib.Path(args.data_dir))), args.context)
    torch.manual_seed(args.torch_seed)
    model = ByteTransformer(args.context, args.width, args.layers, args.heads).to(args.device)
    seconds = train(args, model, train_set)
    loss, accuracy = evaluate(model, valid_set, args.device)
    if not args.alone:
        pst.finish(accuracy=accuracy)
    print("final validation loss %.4f nats/byte (%.3f bits/byte, next-byte accuracy %.4f; "
          "%.1f s of training)" % (loss, loss / math.log(2), accuracy, seconds), flush=True)
    if args.weights_out:
        torch.save(model.state_dict(), args.weights_out)
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump({"validation_loss": loss, "seconds": seconds}, f)


if __name__ == "__main__":
    main()
