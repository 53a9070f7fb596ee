"""Fashion-MNIST from its gzipped IDX files (Debian's dataset-fashion-mnist)."""

import gzip
import os
import struct

import torch
import torch.utils.data

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
_IMAGES, _LABELS = 0x803, 0x801  # IDX magic numbers: uint8 data, 3 or 1 dimensions


def _read_idx(path, magic):
    with gzip.open(path, "rb") as f:
        data = f.read()
    found, = struct.unpack(">I", data[:4])
    if found != magic:
        raise ValueError("%s: IDX magic 0x%x, expected 0x%x" % (path, found, magic))
    ndims = magic & 0xFF
    shape = struct.unpack(">%dI" % ndims, data[4:4 + 4 * ndims])
    body = bytearray(data[4 + 4 * ndims:])
    if len(body) != torch.Size(shape).numel():
        raise ValueError("%s: %d bytes of data for shape %s" % (path, len(body), shape))
    return torch.frombuffer(body, dtype=torch.uint8).view(shape)


class FashionMNIST(torch.utils.data.Dataset):
    """The training (train=True, 60000) or test (10000) set: items are
    (image float32 [1, 28, 28] in [0, 1], label int64)."""

    def __init__(self, train=True, root=DEFAULT_DIR):
        prefix = os.path.join(root, "train" if train else "t10k")
        self.images = _read_idx(prefix + "-images-idx3-ubyte.gz", _IMAGES)
        self.labels = _read_idx(prefix + "-labels-idx1-ubyte.gz", _LABELS).long()
        if len(self.images) != len(self.labels):
            raise ValueError("%s: %d images but %d labels"
                             % (prefix, len(self.images), len(self.labels)))

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.images[i].unsqueeze(0).float() / 255, self.labels[i]
