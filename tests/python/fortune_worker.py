"""examples/torch/fortune_topics.py as a worker of the sparse tables'
failure and NaN tests (torch_sparse_failure_test.py), with what they add:
a sleep per step, so that a job lasts long enough for its faults; a NaN or
an Inf multiplied into one clock's loss, so into every gradient of that
step, dense and rows; and its end as JSON beside the weights.

    PSTRAIN_SCHEDULER=127.0.0.1:PORT python3 tests/python/fortune_worker.py \
        --weights_out=w.pt --result_json=r.json [--sleep_ms=20] [--poison=40:nan] \
        [--cross_tables]

--result_json gets {"ok", "exception", "message", "steps", "clocks",
"test_accuracy"}: steps made (a rolled-back clock is made again), the last
clock made, the test accuracy of the final weights. --weights_out gets
fortune_topics.py's: the linear layer and the rows of every id of the data.
"""

import argparse
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

# The example it trains, from this repository (or the test's runfiles).
_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
sys.path.insert(0, os.path.join(_ROOT, "examples", "torch"))

import fortune_topics as ft
import pstrain.torch as pst

DIM = 16
TORCH_SEED = 0


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--sleep_ms", type=float, default=0, help="sleep this long each step")
    p.add_argument("--poison", action="append", default=[], metavar="CLOCK:VALUE",
                   help="multiply clock CLOCK's loss by VALUE (nan, inf); repeatable")
    p.add_argument("--weights_out", help="the final weights and rows (torch.save)")
    p.add_argument("--cross_tables", action="store_true",
                   help="rank 0 also reads the table 'unused' (its gradient zero), before "
                        "'words': its step pushes 'unused' first, the other ranks' at the "
                        "clock's end, after 'words'")
    p.add_argument("--result_json", help="write what happened here")
    return p.parse_args()


def poisons(specs):
    """{clock: factor} of --poison CLOCK:VALUE options."""
    out = {}
    for spec in specs:
        clock, value = spec.split(":")
        out[int(clock)] = float(value)
    return out


class CrossTables(nn.Module):
    """`model` (FastText) and, on rank 0 only, a zero-weighted read of the
    table "unused": the tables' pushes go in another order on each rank."""

    def __init__(self, model):
        super().__init__()
        self.extra = pst.SparseEmbeddingBag("unused", 4)  # first: pushed first
        self.inner = model

    def forward(self, ids, offsets):
        logits = self.inner(ids, offsets)
        if pst.get_rank() == 0:
            logits = logits + 0.0 * self.extra(ids, offsets).sum()
        return logits


def train(args, model, data, result):
    opt = pst.Optimizer(model)
    factor = poisons(args.poison)
    for ids, offsets, y in pst.batches(data, collate_fn=ft.collate):
        clock = opt.clock  # the step's clock (a rollback offers a clock again)
        logits = model(ids, offsets)
        loss = F.cross_entropy(logits, y) * factor.get(clock, 1.0)
        loss.backward()
        pst.report(loss)
        opt.step()
        result["steps"] += 1
        result["clocks"] = clock + 1
        if args.sleep_ms > 0:
            time.sleep(args.sleep_ms / 1000)


def main():
    args = parse_args()
    torch.set_num_threads(1)
    result = {"ok": False, "exception": None, "message": "", "steps": 0, "clocks": 0,
              "test_accuracy": None}
    try:
        data, test = ft.FortuneTopics(train=True), ft.FortuneTopics(train=False)
        vocab = ft.Vocabulary(data, test)
        pst.init()
        torch.manual_seed(TORCH_SEED)
        model = ft.FastText(pst.SparseEmbeddingBag(ft.TABLE, DIM), DIM, len(ft.CATEGORIES))
        train(args, CrossTables(model) if args.cross_tables else model, data, result)
        result["test_accuracy"] = ft.evaluate(model, test)
        if args.weights_out:
            with torch.no_grad():
                rows = model.bag(vocab.ids, torch.arange(len(vocab.ids)))
            torch.save({"fc.weight": model.fc.weight.detach(), "fc.bias": model.fc.bias.detach(),
                        "ids": vocab.ids, "rows": rows}, args.weights_out)
        pst.finish(result["test_accuracy"])
        result["ok"] = True
    except Exception as e:
        result["exception"] = type(e).__name__
        result["message"] = str(e)
        raise
    finally:
        if args.result_json:
            with open(args.result_json, "w") as f:
                json.dump(result, f)


if __name__ == "__main__":
    main()
