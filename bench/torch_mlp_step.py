#!/usr/bin/env python3
"""The quick start's job (deploy/jobs/mlp_fashion_mnist.pbtxt) trained in one
PyTorch process: the same MLP (784-256-256-10, ReLU), batch 128, Adam at
lr 1e-3, Fashion-MNIST shuffled each epoch -- what `ps_worker --standalone`
does with that job, for bench/cpu_vs_torch.py. Prints JSON: samples/s over
the training steps (the evaluation left out) and the final test accuracy.

  python3 bench/torch_mlp_step.py --epochs=1 --threads=1
"""
import argparse
import json
import time

import torch
import torch.nn.functional as F

import torch_bench_models as models  # bench/: examples/torch on the path too
import fashion_mnist  # noqa: E402  (examples/torch, through torch_bench_models)


def flat(dataset):
    """A data set's images as float rows in [0, 1], and its labels."""
    return dataset.images.float().div_(255).view(len(dataset), -1), dataset.labels


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--threads", type=int, default=1,
                   help="torch.set_num_threads; OpenBLAS, which runs the matrix products, "
                   "takes its own from OPENBLAS_NUM_THREADS (default: one a core)")
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--data_dir", default=fashion_mnist.DEFAULT_DIR)
    args = p.parse_args()
    if args.epochs < 1 or args.threads < 1 or args.batch < 1:
        p.error("--epochs, --threads and --batch must be at least 1")
    torch.set_num_threads(args.threads)
    torch.manual_seed(42)
    x, y = flat(fashion_mnist.FashionMNIST(train=True, root=args.data_dir))
    test_x, test_y = flat(fashion_mnist.FashionMNIST(train=False, root=args.data_dir))
    model = models.make_model("mlp")
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    steps, train_s = 0, 0.0
    for _ in range(args.epochs):
        order = torch.randperm(len(y))
        start = time.perf_counter()
        for i in range(0, len(y) - args.batch + 1, args.batch):  # whole batches only
            rows = order[i:i + args.batch]
            optimizer.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x[rows]), y[rows])
            loss.backward()
            optimizer.step()
            steps += 1
        train_s += time.perf_counter() - start
    with torch.no_grad():
        accuracy = (model(test_x).argmax(dim=1) == test_y).float().mean().item()
    print(json.dumps({
        "bench": "torch_mlp_step", "torch": torch.__version__, "threads": torch.get_num_threads(),
        "epochs": args.epochs, "steps": steps, "batch": args.batch,
        "samples_per_s": round(steps * args.batch / train_s, 1),
        "test_accuracy": round(accuracy, 4), "loss": round(loss.item(), 4)}))


if __name__ == "__main__":
    main()
