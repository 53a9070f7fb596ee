"""The data a worker trains on: pst.batches, this worker's share of each
clock's global batch as the clock loop hands them out, and
pst.batch_indices, the job's data order for a process training alone.

Both follow the library's order (a permutation of the training set per
epoch from the job's seed, each clock's global batch split among the live
workers); nothing here decides which examples a clock takes.
"""

import ctypes

import torch
import torch.utils.data

from .. import _capi
from .._capi import PstrainError
from . import _worker

_default_collate = getattr(torch.utils.data, "default_collate", None)
if _default_collate is None:  # PyTorch before 1.11
    _default_collate = torch.utils.data._utils.collate.default_collate

# How long one pst_next call waits, so that Ctrl-C is seen between calls.
_POLL_MS = 200


def batches(dataset, collate_fn=None):
    """Yields this worker's share of each clock's global batch until the
    job's clocks are done; the parameters then hold the final weights. The
    loop's body must call opt.step().

    The first call registers the model (the Optimizer's parameters and
    len(dataset)) with the scheduler; worker 0's current parameter values
    are the servers' initial values.

    Args:
      dataset: a map-style dataset (__len__ and __getitem__).
      collate_fn: makes a batch of [dataset[i] for i in indices] (default:
        PyTorch's default_collate).

    Yields:
      collate_fn([dataset[i] for i in indices]), the indices being this
      worker's share of the clock's global batch.

    Raises:
      TypeError: `dataset` has no __len__.
      RuntimeError: before init(), with no Optimizer made, or a loop body
        that did not call opt.step().
      ModelMismatch: the job's model differs (at the first call).
      PstrainError: the clock loop failed (JobAborted, SchedulerUnavailable, ...).
    """
    worker = _worker.initialized("batches")
    if not hasattr(dataset, "__len__"):
        raise TypeError("pstrain.torch.batches() takes a map-style dataset (__len__ and "
                        "__getitem__), not %s" % type(dataset).__name__)
    if not worker.declared:
        _worker.register(worker, len(dataset))
    collate = collate_fn or _default_collate
    optimizer = worker.optimizer
    indices = (ctypes.c_int64 * worker.job.batch_size)()
    while not worker.done:
        clock, rows = _next_clock(worker, indices)
        if clock < 0:
            optimizer._load_weights()
            worker.done = True
            return
        optimizer._begin(clock)
        yield collate([dataset[i] for i in indices[:rows]])
        if optimizer._clock is not None:
            raise RuntimeError("pstrain.torch.batches(): the loop body did not call "
                               "opt.step() for clock %d" % clock)


def _next_clock(worker, indices):
    """Waits for the next clock: (clock, rows of `indices`), clock -1 at the end."""
    clock, rows = ctypes.c_int64(), ctypes.c_int()
    err = ctypes.create_string_buffer(4096)
    code = _capi.DEADLINE_EXCEEDED
    while code == _capi.DEADLINE_EXCEEDED:
        code = _capi.lib().pst_next(worker.handle, _POLL_MS, ctypes.byref(clock),
                                    ctypes.byref(rows), indices, len(indices), err, len(err))
    _capi.check(code, err.value.decode("utf-8", "replace"), "pst_next")
    if clock.value >= 0 and not 0 <= rows.value <= len(indices):
        raise PstrainError("pst_next: clock %d has %d rows (at most %d)"
                           % (clock.value, rows.value, len(indices)))
    return clock.value, rows.value


def batch_indices(clock, *, seed, train_size, batch_size, share=0, share_of=1):
    """The example indices of clock `clock`'s global batch, or of share
    `share` of `share_of` of it: the data order the workers follow, for a
    single process trained on the same batches (the library's order, its
    clocks per epoch included). Needs no worker.

    Args:
      clock: the clock (>= 0).
      seed: the job's seed.
      train_size: the training set's size.
      batch_size: the job's global batch.
      share: which part of the global batch (0 <= share < share_of).
      share_of: into how many parts it is split (1: the whole batch).

    Returns:
      A list of int example indices.

    Raises:
      ValueError: batch_size < 1, or no such batch (bad arguments).
    """
    if batch_size < 1:
        raise ValueError("pstrain.torch.batch_indices: batch_size %d < 1" % batch_size)
    out = (ctypes.c_int64 * batch_size)()
    rows = _capi.lib().pst_batch_indices(seed, train_size, batch_size, clock, share_of, share,
                                         out, batch_size)
    if rows < 0:
        raise ValueError("pstrain.torch.batch_indices: no batch for clock=%d seed=%d "
                         "train_size=%d batch_size=%d share %d of %d"
                         % (clock, seed, train_size, batch_size, share, share_of))
    return out[:rows]
