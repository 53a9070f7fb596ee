"""The models of bench/torch_bench.py, written in PyTorch, and their data.

- "mlp": the quick start's MLP, 784-256-256-10 with ReLU (nn.Sequential of
  Linear/ReLU after a Flatten), cross-entropy, global batch 128;
- "cnn": the CNN of examples/torch/cnn_fashion_mnist.py (its Net class),
  cross-entropy, global batch 64.

Both train on Fashion-MNIST as examples/torch/fashion_mnist.py reads it.
Imports torch: only the benchmark's child processes import this module.
"""

import os
import sys

import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples", "torch")
if EXAMPLES not in sys.path:
    sys.path.insert(0, EXAMPLES)
PYTHON = os.path.join(ROOT, "python")
if PYTHON not in sys.path:
    sys.path.insert(0, PYTHON)

import cnn_fashion_mnist  # noqa: E402  (examples/torch)
import fashion_mnist  # noqa: E402  (examples/torch)

# name: (global batch, default clocks)
MODELS = {
    "mlp": (128, 400),
    "cnn": (64, 300),
}


def make_model(name):
    """A fresh model `name` (initialised from torch's current RNG state)."""
    if name == "mlp":
        return nn.Sequential(
            nn.Flatten(),
            nn.Linear(784, 256), nn.ReLU(),
            nn.Linear(256, 256), nn.ReLU(),
            nn.Linear(256, 10),
        )
    if name == "cnn":
        return cnn_fashion_mnist.Net()
    raise ValueError("unknown model %r (known: %s)" % (name, ", ".join(MODELS)))


def train_set(data_dir=fashion_mnist.DEFAULT_DIR):
    """Fashion-MNIST's 60000 training examples: (float [1, 28, 28], label)."""
    return fashion_mnist.FashionMNIST(train=True, root=data_dir)
