"""Sparse tables (JobSpec.tables) from a script: pst.SparseEmbeddingBag, an
EmbeddingBag whose rows live on the servers, and pst.initial_rows, the rows
the servers start a table with.
"""

import torch
import torch.nn.functional as F

from .. import _capi
from . import _worker


class SparseEmbeddingBag(torch.nn.Module):
    """torch.nn.EmbeddingBag whose rows live on the servers: the job's
    sparse table `table` (JobSpec.tables), whose width is embedding_dim.

    Each forward pulls the rows its input names (each distinct id once) for
    the clock under way, waiting as the tables' consistency asks (BSP: until
    every worker's pushes of the clocks before are applied); opt.step()
    pushes their gradients and the servers update the rows with the table's
    optimizer (PyTorch's sparse SGD, Adagrad or SparseAdam). Outside a clock
    (an evaluation once the clocks are done) forward reads the rows as the
    job left them. input, offsets, mode ("sum", "mean" or "max") and
    per_sample_weights are EmbeddingBag's; ids are int64 >= 0, below the
    table's num_ids where it declares one. The module holds no Parameter:
    the rows are never in the script's memory beyond a batch's.

    Args:
      table: the table's name in the job spec.
      embedding_dim: the table's width.
      mode: "sum", "mean" or "max", as EmbeddingBag's.

    Raises:
      ValueError: a bad mode or an embedding_dim below 1.
    """

    def __init__(self, table, embedding_dim, mode="mean"):
        super().__init__()
        if mode not in ("sum", "mean", "max"):
            raise ValueError("SparseEmbeddingBag: mode must be 'sum', 'mean' or 'max', not %r"
                             % (mode,))
        if int(embedding_dim) < 1:
            raise ValueError("SparseEmbeddingBag: embedding_dim must be >= 1, not %r"
                             % (embedding_dim,))
        self.table = str(table)
        self.embedding_dim = int(embedding_dim)
        self.mode = mode
        self._pulled = []  # this clock's (ids, rows) whose gradients opt.step() pushes

    def extra_repr(self):
        return "table=%r, embedding_dim=%d, mode=%r" % (self.table, self.embedding_dim,
                                                       self.mode)

    def forward(self, input, offsets=None, per_sample_weights=None):
        """The bags of `input`'s ids, as EmbeddingBag's forward.

        Raises:
          RuntimeError: before the first batches() registered, or the module
            is not part of the Optimizer's model.
          TypeError: ids that are not int64 or int32.
          ValueError: a negative id.
          InvalidArgument: a width other than the table's.
          ServerUnavailable: a server could not be reached within the retries.
          PstrainError: another refusal (a table the job does not declare, an
            id at or beyond the table's num_ids).
        """
        worker = _worker.registered("SparseEmbeddingBag.forward")
        if input.dtype not in (torch.int64, torch.int32):
            raise TypeError("SparseEmbeddingBag: ids must be int64 or int32, not %s"
                            % input.dtype)
        flat = input.detach().reshape(-1).to(device="cpu", dtype=torch.int64)
        if flat.numel() and int(flat.min()) < 0:
            raise ValueError("SparseEmbeddingBag: id %d is negative" % int(flat.min()))
        ids, inverse = torch.unique(flat, return_inverse=True)
        ids = ids.contiguous()
        rows = torch.empty(len(ids), self.embedding_dim, dtype=torch.float32)
        _capi.call("pst_pull_rows", worker.handle, self.table.encode(), len(ids),
                   ids.data_ptr(), self.embedding_dim, rows.data_ptr())
        optimizer = worker.optimizer
        if torch.is_grad_enabled() and optimizer is not None and optimizer.clock is not None:
            if not any(table is self for table in optimizer.tables):
                raise RuntimeError("SparseEmbeddingBag('%s'): the module is not part of the "
                                   "model given to pstrain.torch.Optimizer, so its gradients "
                                   "would never be pushed" % self.table)
            rows.requires_grad_()
            self._pulled.append((ids, rows))
        weight = rows.to(input.device)
        if offsets is not None:
            offsets = offsets.to(torch.int64)  # the remapped ids are int64
        return F.embedding_bag(inverse.view(input.shape).to(input.device), weight, offsets,
                               mode=self.mode, per_sample_weights=per_sample_weights)

    def _push(self):
        """Pushes this clock's gradients of the rows pulled (a row pulled twice
        is summed by the library); pst_clock_done pushes an empty one if none."""
        pulled = [(ids, rows.grad) for ids, rows in self._pulled if rows.grad is not None]
        self._pulled = []
        if not pulled:
            return
        ids = torch.cat([ids for ids, _ in pulled]).contiguous()
        grads = torch.cat([g.to_dense() if g.is_sparse else g for _, g in pulled])
        grads = grads.to(device="cpu", dtype=torch.float32).contiguous()
        _capi.call("pst_push_rows", _worker.current().handle, self.table.encode(), len(ids),
                   ids.data_ptr(), self.embedding_dim, grads.data_ptr())


def initial_rows(ids, *, seed, table, embedding_dim, init_scale=None):
    """The rows of `ids` of a table as the servers make them from the job's
    seed, the table's name and each id. Needs no worker: a script training
    alone starts from the cluster's rows.

    Args:
      ids: int64 ids >= 0 (anything torch.as_tensor takes).
      seed: the job's seed.
      table: the table's name.
      embedding_dim: the table's width.
      init_scale: the rows are uniform in [-init_scale, init_scale]
        (default 1 / embedding_dim, as the job spec's).

    Returns:
      A float32 tensor of len(ids) x embedding_dim.

    Raises:
      ValueError: a negative id, or a bad embedding_dim or init_scale.
    """
    ids = torch.as_tensor(ids).to(device="cpu", dtype=torch.int64).reshape(-1).contiguous()
    if ids.numel() and int(ids.min()) < 0:
        raise ValueError("initial_rows: id %d is negative" % int(ids.min()))
    scale = 1.0 / embedding_dim if init_scale is None else float(init_scale)
    out = torch.empty(len(ids), embedding_dim, dtype=torch.float32)
    code = _capi.lib().pst_initial_rows(seed, str(table).encode(), embedding_dim, scale,
                                        len(ids), ids.data_ptr(), out.data_ptr())
    if code != 0:
        raise ValueError("initial_rows: bad arguments (embedding_dim %r, init_scale %r)"
                         % (embedding_dim, init_scale))
    return out
