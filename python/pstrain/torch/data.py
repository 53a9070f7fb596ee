"""The data a worker trains on: pst.ClockBatchSampler, this worker's share
of each clock's global batch as a batch sampler for a DataLoader;
pst.batches, the clock loop's side in Python (over a DataLoader, or a
dataset through one); and pst.batch_indices, the job's data order for a
process training alone.

All follow the library's order (a permutation of the training set per
epoch from the job's seed, each clock's global batch split among the live
workers); nothing here decides which examples a clock takes: the sampler
predicts the clocks ahead, and batches() checks each against the clock the
library offers.
"""

import collections
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


class ClockBatchSampler(torch.utils.data.Sampler):
    """This worker's share of each clock's global batch, clock by clock: a
    batch sampler for torch.utils.data.DataLoader, so that a script keeps
    its loader's worker processes, pinned memory and prefetching:

        sampler = pst.ClockBatchSampler(train_set)
        loader = DataLoader(train_set, batch_sampler=sampler, num_workers=2,
                            pin_memory=True)
        for x, y in pst.batches(loader):
            ...

    It yields the indices the job's data order gives this worker for the
    clocks ahead (what pst.batch_indices gives for its share), as far ahead
    as the loader prefetches. pst.batches(loader) checks each batch against
    the clock the library offers; when they differ -- the membership
    changed (a worker died under shrink, a replacement joined) or the
    cluster rolled back -- it starts the loader again at that clock with
    the share the library says, so no batch is trained on that is not the
    clock's. Iterated only by pst.batches (it needs the job).

    Args:
      data_source: the map-style dataset the loader reads; its len() is the
        training set's size.

    Raises:
      TypeError: `data_source` has no __len__.
    """

    def __init__(self, data_source):  # (torch's Sampler.__init__ does nothing)
        if not hasattr(data_source, "__len__"):
            raise TypeError("pstrain.torch.ClockBatchSampler takes a map-style dataset "
                            "(__len__ and __getitem__), not %s" % type(data_source).__name__)
        self.size = len(data_source)
        self._start = None  # (clock, share_index, num_shares) the next iteration begins at
        self._issued = collections.deque()  # (clock, indices) yielded, not yet trained

    def __iter__(self):
        job = _worker.registered("ClockBatchSampler").job
        clock, share_index, num_shares = self._start or (job.start_clock, job.worker_id,
                                                 job.num_workers)
        self._issued.clear()
        for c in range(clock, job.total_clocks):
            indices = batch_indices(c, seed=job.seed, train_size=self.size,
                                    batch_size=job.batch_size, share_index=share_index,
                                    num_shares=num_shares)
            self._issued.append((c, indices))
            yield indices

    def __len__(self):
        job = _worker.registered("ClockBatchSampler").job
        start = self._start[0] if self._start else job.start_clock
        return max(0, job.total_clocks - start)

    def set_start(self, clock, share_index, num_shares):
        """The next iteration begins at clock `clock` with share `share_index` of
        `num_shares` (as DistributedSampler.set_epoch, before iter()): what
        pst.batches() says after a membership change or a rollback."""
        self._start = (clock, share_index, num_shares)

    def pop_issued(self):
        """The oldest (clock, indices) yielded and not yet taken, or None:
        what pst.batches() checks a batch of the loader against."""
        return self._issued.popleft() if self._issued else None


def batches(data, collate_fn=None):
    """Yields this worker's share of each clock's global batch until the
    job's clocks are done; the parameters then hold the final weights. The
    loop's body must call opt.step().

    The first call declares the model (the Optimizer's parameters and the
    training set's size) to the job; worker 0's current parameter values
    are the servers' initial values.

    Args:
      data: a torch.utils.data.DataLoader whose batch_sampler is a
        ClockBatchSampler (its workers, pinned memory and collate_fn are
        kept), or a map-style dataset (__len__ and __getitem__), read in
        this process as such a loader with no worker processes would.
      collate_fn: with a dataset: makes a batch of [data[i] for i in
        indices] (default: PyTorch's default_collate).

    Yields:
      The clock's batch: collate_fn([dataset[i] for i in indices]), the
      indices being this worker's share of the clock's global batch.

    Raises:
      TypeError: `data` has no __len__, or is a DataLoader without a
        ClockBatchSampler (or with a collate_fn given here as well).
      RuntimeError: before init(), with no Optimizer made, or a loop body
        that did not call opt.step().
      ModelMismatch: the job's model differs (at the first call).
      PstrainError: the clock loop failed (JobAborted, SchedulerUnavailable, ...).
    """
    worker = _worker.initialized("batches")
    batch_of, size = _batches_of(worker, data, collate_fn)
    if not worker.declared:
        _worker.register(worker, size)
    optimizer = worker.optimizer
    offered = (ctypes.c_int64 * worker.job.batch_size)()
    while not worker.done:
        clock, rows = _next_clock(worker, offered)
        if clock < 0:
            optimizer.load_final_weights()
            worker.done = True
            return
        batch = batch_of(clock, list(offered[:rows]))
        optimizer.begin_clock(clock)
        yield batch
        if optimizer.clock is not None:
            raise RuntimeError("pstrain.torch.batches(): the loop body did not call "
                               "opt.step() for clock %d" % clock)


def _batches_of(worker, data, collate_fn):
    """(batch_of(clock, indices), the training set's size) of `data`: a
    DataLoader over a ClockBatchSampler (its batches, checked), or a
    dataset read in this process at the clock's indices -- what the loader
    over it with no worker processes would give, without predicting them."""
    if isinstance(data, torch.utils.data.DataLoader):
        if not isinstance(data.batch_sampler, ClockBatchSampler):
            raise TypeError("pstrain.torch.batches(): the DataLoader's batch_sampler must be a "
                            "pstrain.torch.ClockBatchSampler (DataLoader(dataset, "
                            "batch_sampler=pst.ClockBatchSampler(dataset), ...))")
        if collate_fn is not None:
            raise TypeError("pstrain.torch.batches(): give collate_fn to the DataLoader")
        return _ClockBatches(worker, data), data.batch_sampler.size
    if not hasattr(data, "__len__"):
        raise TypeError("pstrain.torch.batches() takes a map-style dataset (__len__ and "
                        "__getitem__) or a DataLoader, not %s" % type(data).__name__)
    collate = collate_fn or _default_collate
    return (lambda clock, indices: collate([data[i] for i in indices])), len(data)


class _ClockBatches:
    """The loader's batches, each checked against the clock the library
    offers: on a mismatch the loader starts again at that clock with the
    share the library says."""

    def __init__(self, worker, loader):
        self.worker, self.loader = worker, loader
        self.sampler = loader.batch_sampler
        self.batches = None  # the loader's iterator

    def __call__(self, clock, indices):
        for _ in range(2):
            if self.batches is not None:
                batch = next(self.batches, None)
                if self.sampler.pop_issued() == (clock, indices):
                    return batch
            self.sampler.set_start(clock, *_clock_share(self.worker))
            self.batches = iter(self.loader)
        raise PstrainError("pstrain.torch.batches(): the loader's batch for clock %d is not the "
                           "clock's examples (a batch_sampler changed by the script?)" % clock)


def _clock_share(worker):
    """(share_index, num_shares) of the clock under way."""
    share_index, num_shares = ctypes.c_int(), ctypes.c_int()
    _capi.check(_capi.lib().pst_clock_share(worker.handle, ctypes.byref(share_index),
                                            ctypes.byref(num_shares)), "", "pst_clock_share")
    return share_index.value, num_shares.value


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


def batch_indices(clock, *, seed, train_size, batch_size, share_index=0, num_shares=1):
    """The example indices of clock `clock`'s global batch, or of share
    `share_index` of `num_shares` of it: the data order the workers follow, for a
    single process trained on the same batches (the library's order, its
    clocks per epoch included). Needs no worker.

    Args:
      clock: the clock (>= 0).
      seed: the job's seed.
      train_size: the training set's size.
      batch_size: the job's global batch.
      share_index: which share of the global batch (0 <= share_index < num_shares).
      num_shares: into how many shares it is split (1: the whole batch).

    Returns:
      A list of int example indices.

    Raises:
      ValueError: batch_size < 1, or no such batch (bad arguments).
    """
    if batch_size < 1:
        raise ValueError("pstrain.torch.batch_indices: batch_size %d < 1" % batch_size)
    out = (ctypes.c_int64 * batch_size)()
    rows = _capi.lib().pst_batch_indices(seed, train_size, batch_size, clock, num_shares,
                                         share_index, out, batch_size)
    if rows < 0:
        raise ValueError("pstrain.torch.batch_indices: no batch for clock=%d seed=%d "
                         "train_size=%d batch_size=%d share %d of %d"
                         % (clock, seed, train_size, batch_size, share_index, num_shares))
    return out[:rows]
