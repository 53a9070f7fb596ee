"""How far torch.optim.Adam drifts from itself when only the order of a sum
changes: the CNN of examples/torch/cnn_fashion_mnist.py trained alone on the
job's global batches (64), its gradient summed over the whole batch or as
two halves of 32 (what two workers push). Prints max |dw| / max |w| over the
tensors after 1, 5, 20, 50, 100 and 200 clocks: the floor under which no
comparison with torch.optim.Adam can go (tests/python/torch_cnn_test holds
the cluster to the servers' Adam arithmetic instead).

    OPENBLAS_NUM_THREADS=1 /usr/bin/python3 bench/torch_adam_drift.py
"""

import json
import os
import sys

import torch
import torch.nn.functional as F
import torch.utils.data

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path[:0] = [os.path.join(ROOT, "examples", "torch"), os.path.join(ROOT, "python")]

import cnn_fashion_mnist  # noqa: E402
import fashion_mnist  # noqa: E402
import pstrain.torch as pst  # noqa: E402

BATCH_SIZE, SEED, LR = 64, 42, 1e-3
CHECKPOINTS = (1, 5, 20, 50, 100, 200)


def train(dataset, shares):
    """The weights after each clock of CHECKPOINTS, the global batch's
    gradient summed over `shares` equal parts."""
    torch.manual_seed(0)
    model = cnn_fashion_mnist.Net()
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    weights = {}
    for clock in range(max(CHECKPOINTS)):
        opt.zero_grad()
        for share_index in range(shares):
            indices = pst.batch_indices(clock, seed=SEED, train_size=len(dataset),
                                        batch_size=BATCH_SIZE, share_index=share_index,
                                        num_shares=shares)
            x, y = torch.utils.data.default_collate([dataset[i] for i in indices])
            (F.cross_entropy(model(x), y) * len(indices) / BATCH_SIZE).backward()
        opt.step()
        if clock + 1 in CHECKPOINTS:
            weights[clock + 1] = {k: v.clone() for k, v in model.state_dict().items()}
    return weights


def main():
    torch.set_num_threads(1)
    dataset = fashion_mnist.FashionMNIST(train=True)
    whole, halves = train(dataset, 1), train(dataset, 2)
    drift = {}
    for clock, w in whole.items():
        drift[clock] = max(float((w[k] - halves[clock][k]).abs().max() / w[k].abs().max())
                           for k in w)
    print(json.dumps({"max_relative_drift_after_clocks": drift}, indent=1))


if __name__ == "__main__":
    main()
