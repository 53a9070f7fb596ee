"""Which of fortunes' category files a fortune comes from: a fastText-style
classifier whose embedding rows live in a sparse table on the servers -- a
pstrain worker, or alone with --alone.

The data are Debian's `fortunes` package (1:1.99.1-7.3 on Debian 12):
the category files under /usr/share/games/fortunes (art, computers, food,
law, linux, love, medicine, politics, science, sports, ...), each cut into
fortunes at its "%" lines. Every fifth fortune of a file (the 0th, 5th,
...) is the test set, the rest the training set. A fortune's features are
its lower-cased words and word pairs, each hashed (CRC-32) into 2^24 ids:
the ids of the table "words" (fortune_topics.pbtxt). The model averages the
rows of a fortune's ids (an embedding bag) and a linear layer picks the
category.

As a worker (one process per worker) of a cluster whose scheduler runs
fortune_topics.pbtxt:

    PSTRAIN_SCHEDULER=127.0.0.1:PORT python3 examples/torch/fortune_topics.py

the table's rows are pulled and pushed by id (pstrain.torch.SparseEmbeddingBag)
and the servers update them with SparseAdam's arithmetic, the linear layer
with Adam. Alone, torch.nn.EmbeddingBag(sparse=True) with
torch.optim.SparseAdam (and Adam for the linear layer) on the same global
batches, from the rows the servers would make:

    python3 examples/torch/fortune_topics.py --alone

Both print the final test accuracy.
"""

import argparse
import json
import os
import re
import time
import zlib

import torch
import torch.nn as nn
import torch.nn.functional as F


import pstrain.torch as pst

FORTUNES = "/usr/share/games/fortunes"
CATEGORIES = ("art", "computers", "food", "law", "linux", "love", "medicine", "politics",
              "science", "sports")
NUM_IDS = 1 << 24
TABLE = "words"
_WORD = re.compile(r"[a-z0-9']+")


def features(text):
    """The ids of a fortune's words and word pairs (hashed, in order)."""
    words = _WORD.findall(text.lower())
    grams = words + [a + " " + b for a, b in zip(words, words[1:])]
    return [zlib.crc32(g.encode()) % NUM_IDS for g in grams] or [0]


def read_fortunes(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        parts = re.split(r"^%\n", f.read(), flags=re.M)
    return [p for p in (part.strip() for part in parts) if p]


class FortuneTopics(torch.utils.data.Dataset):
    """(ids, category) per fortune of the train or test split."""

    def __init__(self, train, root=FORTUNES, categories=CATEGORIES):
        self.examples = []
        for label, name in enumerate(categories):
            path = os.path.join(root, name)
            if not os.path.isfile(path):
                raise FileNotFoundError("%s not found: install Debian's fortunes package "
                                        "(apt-get install fortunes)" % path)
            for i, text in enumerate(read_fortunes(path)):
                if (i % 5 != 0) == train:
                    self.examples.append((torch.tensor(features(text)), label))

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, i):
        return self.examples[i]


def collate(batch):
    """EmbeddingBag's input: the bags' ids end to end, each bag's offset, labels."""
    ids = torch.cat([ids for ids, _ in batch])
    lengths = torch.tensor([0] + [len(ids) for ids, _ in batch[:-1]])
    return ids, torch.cumsum(lengths, 0), torch.tensor([label for _, label in batch])


class FastText(nn.Module):
    """Mean of the ids' rows, then a linear layer. `bag` is a
    pstrain.torch.SparseEmbeddingBag (rows on the servers) or, alone, an
    nn.EmbeddingBag over the ids the data use (see Vocabulary)."""

    def __init__(self, bag, dim, classes):
        super().__init__()
        self.bag = bag
        self.fc = nn.Linear(dim, classes)

    def forward(self, ids, offsets):
        return self.fc(self.bag(ids, offsets))


class Vocabulary:
    """Alone: the distinct ids of the data, each its row of a local
    nn.EmbeddingBag (2^24 rows with SparseAdam's dense state would not fit)."""

    def __init__(self, *datasets):
        seen = torch.unique(torch.cat([ids for d in datasets for ids, _ in d.examples]))
        self.ids = seen
        self.index = {int(i): k for k, i in enumerate(seen)}

    def __call__(self, ids):
        return torch.tensor([self.index[int(i)] for i in ids])

    def embedding_bag(self, dim, seed):
        bag = nn.EmbeddingBag(len(self.ids), dim, mode="mean", sparse=True)
        with torch.no_grad():
            bag.weight.copy_(pst.initial_rows(self.ids, seed=seed, table=TABLE,
                                              embedding_dim=dim))
        return bag


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--alone", action="store_true",
                   help="train in this process, without a cluster")
    p.add_argument("--scheduler", help="HOST:PORT (default: $PSTRAIN_SCHEDULER)")
    p.add_argument("--data_dir", default=FORTUNES)
    p.add_argument("--dim", type=int, default=16, help="the table's width")
    p.add_argument("--threads", type=int, default=1, help="torch.set_num_threads")
    p.add_argument("--torch_seed", type=int, default=0, help="torch.manual_seed for the init")
    p.add_argument("--weights_out",
                   help="torch.save the linear layer's weights and the table's rows of the "
                        "data's ids ({'fc.weight', 'fc.bias', 'ids', 'rows'}) here at the end")
    p.add_argument("--result_json", help='write {"test_accuracy", "seconds"} here')
    p.add_argument("--log_every", type=int, default=50, help="iterations between progress lines")
    alone = p.add_argument_group("--alone (a cluster takes these from its job)")
    alone.add_argument("--lr", type=float, default=0.01, help="Adam's and SparseAdam's")
    alone.add_argument("--batch_size", type=int, default=64, help="the global batch")
    alone.add_argument("--clocks", type=int, default=600)
    alone.add_argument("--seed", type=int, default=42, help="the job's seed: data order, rows")
    return p.parse_args()


def train_alone(args, model, train, vocab):
    """Adam and SparseAdam over the global batches pstrain's workers train on."""
    dense = torch.optim.Adam(model.fc.parameters(), lr=args.lr)
    sparse = torch.optim.SparseAdam(model.bag.parameters(), lr=args.lr)
    for clock in range(args.clocks):
        indices = pst.batch_indices(clock, seed=args.seed, train_size=len(train),
                                    batch_size=args.batch_size)
        ids, offsets, y = collate([train[i] for i in indices])
        dense.zero_grad()
        sparse.zero_grad()
        loss = F.cross_entropy(model(vocab(ids), offsets), y)
        loss.backward()
        dense.step()
        sparse.step()
        log_progress(args, clock, loss)


def train_in_cluster(args, model, train):
    """A pstrain worker: the servers run the job's optimizers."""
    opt = pst.Optimizer(model)
    for iteration, (ids, offsets, y) in enumerate(pst.batches(train, collate_fn=collate)):
        logits = model(ids, offsets)
        loss = F.cross_entropy(logits, y)
        loss.backward()
        pst.report(loss, correct=int((logits.argmax(1) == y).sum()), predicted=len(y))
        opt.step()
        log_progress(args, iteration, loss)


def log_progress(args, iteration, loss):
    if args.log_every > 0 and iteration % args.log_every == 0:
        print("iteration %d loss %.4f" % (iteration, loss.item()), flush=True)


def evaluate(model, dataset, to_input=lambda ids: ids):
    model.eval()
    correct = 0
    loader = torch.utils.data.DataLoader(dataset, batch_size=1000, collate_fn=collate)
    with torch.no_grad():
        for ids, offsets, y in loader:
            correct += int((model(to_input(ids), offsets).argmax(1) == y).sum())
    return correct / len(dataset)


def main():
    args = parse_args()
    torch.set_num_threads(args.threads)
    train = FortuneTopics(train=True, root=args.data_dir)
    test = FortuneTopics(train=False, root=args.data_dir)
    vocab = Vocabulary(train, test)
    if args.alone:
        bag = vocab.embedding_bag(args.dim, args.seed)
    else:
        pst.init(scheduler=args.scheduler)
        bag = pst.SparseEmbeddingBag(TABLE, args.dim)
    torch.manual_seed(args.torch_seed)  # the linear layer's init, the same both ways
    model = FastText(bag, args.dim, len(CATEGORIES))
    start = time.monotonic()
    if args.alone:
        train_alone(args, model, train, vocab)
    else:
        train_in_cluster(args, model, train)
    seconds = time.monotonic() - start
    accuracy = evaluate(model, test, vocab if args.alone else (lambda ids: ids))
    if args.weights_out:
        if args.alone:
            rows = model.bag.weight.detach().clone()
        else:  # the servers' rows, as the job left them
            with torch.no_grad():
                rows = model.bag(vocab.ids, torch.arange(len(vocab.ids)))
        torch.save({"fc.weight": model.fc.weight.detach(), "fc.bias": model.fc.bias.detach(),
                    "ids": vocab.ids, "rows": rows}, args.weights_out)
    if not args.alone:
        pst.finish(accuracy)
    print("final test accuracy %.4f (%.1f s of training)" % (accuracy, seconds), flush=True)
    if args.result_json:
        with open(args.result_json, "w") as f:
            json.dump({"test_accuracy": accuracy, "seconds": seconds}, f)


if __name__ == "__main__":
    main()
