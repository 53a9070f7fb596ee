"""A tiny pstrain.torch worker for the failure and bad-input tests: a
2-layer MLP (16 -> 32 -> 4) on a synthetic set made from a fixed torch seed,
so that it trains in milliseconds a clock.

    PSTRAIN_SCHEDULER=127.0.0.1:PORT python3 tests/python/tiny_worker.py \
        --result_json=out.json [--sleep_ms=20] [--model=mlp|bias_mismatch|double]

It writes --result_json at the end, whether it trained or failed:
{"ok": bool, "exception": class name or null, "bases": [...], "message":
str, "seconds": float, "steps": int, "rank": int or null; with
--save_at_clock, "state_dict_seconds": how long opt.state_dict() took}. An exception is
raised again after that (exit 1, the worker reported FAILED); a clean run
ends with pst.finish() and exit 0.
"""

import argparse
import json
import os
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data

import pstrain.torch as pst

INPUTS, HIDDEN, CLASSES = 16, 32, 4
TRAIN_SIZE = 2048
DATA_SEED = 1234


class Tiny(nn.Module):
    """fc1.weight [32, 16], fc1.bias [32], fc2.weight [4, 32], fc2.bias [4];
    bias_shape replaces fc1.bias's shape (the 2nd parameter; [1] still
    broadcasts in the forward); batch_norm puts a BatchNorm1d(32) (`bn`:
    weight, bias and the buffers running_mean, running_var,
    num_batches_tracked) after fc1."""

    def __init__(self, bias_shape=None, batch_norm=False):
        super().__init__()
        self.fc1 = nn.Linear(INPUTS, HIDDEN)
        if bias_shape is not None:
            self.fc1.bias = nn.Parameter(torch.zeros(bias_shape))
        self.bn = nn.BatchNorm1d(HIDDEN) if batch_norm else nn.Identity()
        self.fc2 = nn.Linear(HIDDEN, CLASSES)

    def forward(self, x):
        return self.fc2(F.relu(self.bn(self.fc1(x))))


def buffer_sums(model):
    """[sum of running_mean, sum of running_var, num_batches_tracked] of
    model.bn (a BatchNorm1d)."""
    bn = model.bn
    return [float(bn.running_mean.sum()), float(bn.running_var.sum()),
            int(bn.num_batches_tracked)]


class IndexedSet(torch.utils.data.Dataset):
    """`data`'s examples with their index: (x, y, i)."""

    def __init__(self, data):
        self.data = data

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.data[i] + (i,)


def synthetic_set():
    """TRAIN_SIZE points in 16 dimensions, labelled by a fixed random linear
    map's argmax: the same set in every process."""
    g = torch.Generator().manual_seed(DATA_SEED)
    x = torch.randn(TRAIN_SIZE, INPUTS, generator=g)
    w = torch.randn(INPUTS, CLASSES, generator=g)
    return torch.utils.data.TensorDataset(x, (x @ w).argmax(1))


# The learning-rate schedules --lr_scheduler names, for a run of
# `clocks` clocks (the reference in torch_optim_test.py makes the same).
LR_SCHEDULERS = {
    "none": lambda opt, clocks: None,
    "step": lambda opt, clocks: torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5),
    "onecycle": lambda opt, clocks: torch.optim.lr_scheduler.OneCycleLR(
        opt, max_lr=0.05, total_steps=clocks),
}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scheduler", help="HOST:PORT (default: $PSTRAIN_SCHEDULER)")
    p.add_argument("--init_flags", default="{}",
                   help="a JSON object of keyword arguments for pst.init()")
    p.add_argument("--model", default="mlp",
                   choices=["mlp", "bias_mismatch", "double", "batchnorm"],
                   help="bias_mismatch: fc1.bias of shape [1]; double: model.double(); "
                        "batchnorm: a BatchNorm1d after fc1, whose buffers' sums are "
                        "recorded at each clock's start and after its forward")
    p.add_argument("--buffers", default="broadcast", help="pst.Optimizer(buffers=...)")
    p.add_argument("--no_backward", action="store_true",
                   help="call opt.step() without loss.backward()")
    p.add_argument("--second_optimizer", action="store_true",
                   help="make a second pst.Optimizer(model) after the first, and train with "
                        "the first")
    p.add_argument("--sleep_ms", type=float, default=0, help="sleep this long each step")
    p.add_argument("--raise_at_clock", type=int, default=-1,
                   help="raise RuntimeError at this step")
    p.add_argument("--torch_seed", type=int, default=0)
    p.add_argument("--result_json", help="write what happened here")
    p.add_argument("--rank_file", help="write pst.get_rank() here at the first step")
    p.add_argument("--weights_out", help="torch.save(model.state_dict()) here at the end")
    p.add_argument("--lr_scheduler", default="none", choices=sorted(LR_SCHEDULERS),
                   help="a torch.optim.lr_scheduler on pst.Optimizer, stepped each clock")
    p.add_argument("--loader", action="store_true",
                   help="read the data through a DataLoader (2 worker processes, pinned "
                        "memory) over pst.ClockBatchSampler, and record each clock's "
                        "example indices in the result")
    p.add_argument("--save_at_clock", type=int, default=-1,
                   help="at the start of this step, torch.save {'model': model.state_dict(), "
                        "'optimizer': opt.state_dict()} to --save_to")
    p.add_argument("--save_to", help="where --save_at_clock saves")
    p.add_argument("--load_from", help="before the first batch: model.load_state_dict and "
                                       "opt.load_state_dict of what this file holds")
    p.add_argument("--freeze", default="fc2.weight",
                   help="the parameter --freeze_at_clock freezes")
    p.add_argument("--freeze_at_clock", type=int, default=-1,
                   help="at the start of this step (after --save_at_clock's save): "
                        "requires_grad_(False) on --freeze")
    p.add_argument("--state_out", help="torch.save(opt.state_dict()) here after the last clock")
    p.add_argument("--clocks", type=int, default=0,
                   help="the job's clocks, for --lr_scheduler=onecycle's total_steps")
    p.add_argument("--whole_reads", action="store_true",
                   help="pst.Optimizer(read_by_layer=False): every weight before the batch")
    p.add_argument("--check_forward_reads", action="store_true",
                   help="record, per clock, whether fc2's forward read the weights fc2 holds "
                        "after opt.step() (the clock's): forward_reads, stale_forward_reads")
    p.add_argument("--check_hook_first", action="store_true",
                   help="with --check_forward_reads: register fc2's hook before making the "
                        "Optimizer (as weight_norm or pruning would have theirs)")
    p.add_argument("--zero_grad", default="none", choices=["none", "optimizer", "model"],
                   help="each clock before backward: opt.zero_grad() or model.zero_grad(), "
                        "both with set_to_none=True")
    return p.parse_args()


def train(args, result):
    torch.set_num_threads(1)
    pst.init(scheduler=args.scheduler, **json.loads(args.init_flags))
    result["place_at_init"] = [pst.get_rank(), pst.get_world_size()]
    torch.manual_seed(args.torch_seed)
    model = Tiny(bias_shape=[1] if args.model == "bias_mismatch" else None,
                 batch_norm=args.model == "batchnorm")
    if args.model == "double":
        model = model.double()
    seen = []  # fc2.weight as fc2's forward read it, this clock
    if args.check_forward_reads:
        result["forward_reads"], result["stale_forward_reads"] = 0, 0

    def check_hook():
        model.fc2.register_forward_pre_hook(
            lambda module, _: seen.append(module.weight.detach().clone()))
    if args.check_forward_reads and args.check_hook_first:
        check_hook()
    opt = pst.Optimizer(model, buffers=args.buffers, read_by_layer=not args.whole_reads)
    if args.check_forward_reads and not args.check_hook_first:
        check_hook()
    if args.second_optimizer:
        pst.Optimizer(model, buffers=args.buffers)  # (the loop steps the first)
    if args.load_from:
        saved = torch.load(args.load_from)
        model.load_state_dict(saved["model"])
        opt.load_state_dict(saved["optimizer"])
    if args.model == "batchnorm":
        result["buffers_at_start"], result["buffers_after_forward"] = [], []
    data = synthetic_set()
    schedule = LR_SCHEDULERS[args.lr_scheduler](opt, args.clocks)
    source = data
    if args.loader:
        indexed = IndexedSet(data)
        source = torch.utils.data.DataLoader(indexed,
                                             batch_sampler=pst.ClockBatchSampler(indexed),
                                             num_workers=2, pin_memory=True)
        result["indices"] = []
    for batch in pst.batches(source):
        x, y = batch[0], batch[1]
        if args.loader:
            result["indices"].append(batch[2].tolist())
        if result["rank"] is None:
            result["rank"] = pst.get_rank()
            if args.rank_file:
                with open(args.rank_file + ".tmp", "w") as f:
                    f.write("%d\n" % result["rank"])
                os.replace(args.rank_file + ".tmp", args.rank_file)
        if result["steps"] == args.save_at_clock:
            started = time.monotonic()
            state = opt.state_dict()
            result["state_dict_seconds"] = time.monotonic() - started
            torch.save({"model": model.state_dict(), "optimizer": state}, args.save_to)
        if result["steps"] == args.freeze_at_clock:
            dict(model.named_parameters())[args.freeze].requires_grad_(False)
        if result["steps"] == args.raise_at_clock:
            raise RuntimeError("tiny_worker: --raise_at_clock=%d" % args.raise_at_clock)
        if args.zero_grad != "none":
            (opt if args.zero_grad == "optimizer" else model).zero_grad(set_to_none=True)
        if args.model == "batchnorm":
            result["buffers_at_start"].append(buffer_sums(model))
        logits = model(x)
        if args.model == "batchnorm":
            result["buffers_after_forward"].append(buffer_sums(model))
        loss = F.cross_entropy(logits, y)
        if not args.no_backward:
            loss.backward()
        pst.report(loss, correct=int((logits.argmax(1) == y).sum()), predicted=len(y))
        opt.step()
        if args.check_forward_reads:
            result["forward_reads"] += len(seen)
            result["stale_forward_reads"] += sum(not torch.equal(w, model.fc2.weight)
                                                 for w in seen)
            seen.clear()
        if schedule is not None:
            schedule.step()
        result["steps"] += 1
        if args.sleep_ms > 0:
            time.sleep(args.sleep_ms / 1000)
    if args.state_out:
        torch.save(opt.state_dict(), args.state_out)
    model.eval()
    with torch.no_grad():
        x, y = data.tensors
        accuracy = float((model(x).argmax(1) == y).float().mean())
    pst.finish(accuracy)
    result["place_after_finish"] = [pst.get_rank(), pst.get_world_size()]
    result["accuracy"] = accuracy
    if args.weights_out:
        torch.save(model.state_dict(), args.weights_out)


def main():
    args = parse_args()
    result = {"ok": False, "exception": None, "bases": [], "message": "", "steps": 0,
              "rank": None, "place_at_init": None, "place_after_finish": None}
    start = time.monotonic()
    try:
        train(args, result)
        result["ok"] = True
    except BaseException as e:
        result["exception"] = type(e).__name__
        result["bases"] = [c.__name__ for c in type(e).__mro__]
        result["message"] = str(e)
        raise
    finally:
        result["seconds"] = time.monotonic() - start
        if args.result_json:
            with open(args.result_json + ".tmp", "w") as f:
                json.dump(result, f)
            os.replace(args.result_json + ".tmp", args.result_json)


if __name__ == "__main__":
    main()
