"""A small CNN on Fashion-MNIST: a pstrain worker, or alone with --alone.

As a worker of a cluster whose scheduler runs cnn_fashion_mnist.pbtxt (the
job names the optimizer, the global batch and the clocks), one process per
worker:

    PSTRAIN_SCHEDULER=127.0.0.1:PORT python3 examples/torch/cnn_fashion_mnist.py

Alone, torch.optim.Adam on the same global batches the workers train on:

    python3 examples/torch/cnn_fashion_mnist.py --alone --clocks=9370

Both print the final test accuracy.
"""

import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.data


import fashion_mnist
import pstrain.torch as pst


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 32, 3, padding=1)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--alone", action="store_true",
                   help="train in this process, without a cluster")
    p.add_argument("--scheduler", help="HOST:PORT (default: $PSTRAIN_SCHEDULER)")
    p.add_argument("--data_dir", default=fashion_mnist.DEFAULT_DIR)
    p.add_argument("--device", default="cpu", help="cpu or cuda")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--torch_seed", type=int, default=0, help="torch.manual_seed for the init")
    p.add_argument("--weights_out", help="torch.save(model.state_dict()) here at the end")
    p.add_argument("--result_json", help='write {"test_accuracy", "seconds"} here')
    p.add_argument("--log_every", type=int, default=50, help="iterations between progress lines")
    alone = p.add_argument_group("--alone (a cluster takes these from its job)")
    alone.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate")
    alone.add_argument("--batch_size", type=int, default=64, help="the global batch")
    alone.add_argument("--clocks", type=int, default=200)
    alone.add_argument("--seed", type=int, default=42, help="the job's seed: the data order")
    return p.parse_args()


def train_alone(args, model, train):
    """torch.optim.Adam over the global batches pstrain's workers would train on."""
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    for clock in range(args.clocks):
        indices = pst.batch_indices(clock, seed=args.seed, train_size=len(train),
                                    batch_size=args.batch_size)
        x, y = torch.utils.data.default_collate([train[i] for i in indices])
        opt.zero_grad()
        loss = F.cross_entropy(model(x.to(args.device)), y.to(args.device))
        loss.backward()
        opt.step()
        log_progress(args, clock, loss)


def train_in_cluster(args, model, train):
    """A pstrain worker: the servers run the job's optimizer."""
    opt = pst.Optimizer(model)
    for iteration, (x, y) in enumerate(pst.batches(train)):
        x, y = x.to(args.device), y.to(args.device)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        pst.report(loss, correct=int((logits.argmax(1) == y).sum()), predicted=len(y))
        opt.step()
        log_progress(args, iteration, loss)


def log_progress(args, iteration, loss):
    if args.log_every > 0 and iteration % args.log_every == 0:
        print("iteration %d loss %.4f" % (iteration, loss.item()), flush=True)


def evaluate(model, dataset, device):
    model.eval()
    correct = 0
    with torch.no_grad():
        for x, y in torch.utils.data.DataLoader(dataset, batch_size=1000):
            correct += int((model(x.to(device)).argmax(1) == y.to(device)).sum())
    return correct / len(dataset)


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    if not args.alone:
        pst.init(scheduler=args.scheduler)
    torch.manual_seed(args.torch_seed)
    model = Net().to(args.device)
    train = fashion_mnist.FashionMNIST(train=True, root=args.data_dir)
    start = time.monotonic()
    (train_alone if args.alone else train_in_cluster)(args, model, train)
    seconds = time.monotonic() - start
    accuracy = evaluate(model, fashion_mnist.FashionMNIST(train=False, root=args.data_dir),
                        args.device)
    if not args.alone:
        pst.finish(accuracy)
    print("final test accuracy %.4f (%.1f s of training)" % (accuracy, seconds), flush=True)
    if args.weights_out:
        torch.save(model.state_dict(), args.weights_out)
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump({"test_accuracy": accuracy, "seconds": seconds}, f)


if __name__ == "__main__":
    main()
