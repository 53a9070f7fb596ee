"""A PyTorch training script as a pstrain worker.

    import pstrain.torch as pst

    pst.init()                               # joins the job: get_rank() from here
    model = Net()
    opt = pst.Optimizer(model)               # a torch.optim.Optimizer the servers run
    for x, y in pst.batches(train_set):      # this worker's share of each clock
        loss = loss_fn(model(x), y)
        loss.backward()                      # gradients go to the push buffers
        pst.report(loss)                     # for Status
        opt.step()                           # pushes them; the clock ends
    pst.finish(accuracy=evaluate(model))     # the final weights are in the model

The servers hold the weights and the optimizer's state; the job spec names
the optimizer, the consistency (BSP, SSP, ASP), the global batch and the
clocks. Before each batch is yielded the parameters hold that clock's
weights, and each clock starts with zero gradients. Trainable float32
parameters go to the servers; those with requires_grad=False stay local.

The worker's machinery (scheduler client, heartbeats, parameter client,
retries, rollback resync) is libpstrain_torch.so, loaded with ctypes; see
pstrain._capi for where it is looked for.

The package's rooms:

    _worker.py    this process's worker: init, registration, rank, finish,
                  the exit hooks
    optimizer.py  pst.Optimizer: a torch.optim.Optimizer whose param_groups
                  the servers run; the gradients' way to the servers
    metrics.py    pst.report: a clock's loss and accuracy, for Status
    _optim_layout.py  the job's optimizer under torch.optim's names: the
                  group's hyperparameters and the state's layout
    _script_hyper.py  the group's values the script changed, for the servers
    _buffers.py   which module buffers travel, under which rule
    _library_buffers.py  the library's host buffers as the Optimizer's
                  tensors meet them: weights in, gradients out, without
                  copies where the library allows it
    _device_grads.py  a CUDA parameter's gradient on its way to the host
                  buffers while backward goes on
    _layered_reads.py  each clock's weights into the forward module by
                  module, as they arrive
    data.py       pst.ClockBatchSampler (this worker's indices clock by
                  clock, for a DataLoader), pst.batches (the clock loop's
                  side in Python) and pst.batch_indices (the job's order)
    sparse.py     pst.SparseEmbeddingBag and pst.initial_rows: sparse tables

The exceptions: every one pstrain raises is a PstrainError (LibraryNotFound,
an ImportError, aside); its subclasses for a status code of the library's
are pstrain._capi's -- an UNAVAILABLE is SchedulerUnavailable or
ServerUnavailable by the daemon the failed call went to, both Unavailable
(a ConnectionError) --; NoGradients and UnsupportedDtype (also a TypeError)
are the optimizer's; the launcher's LaunchError (pstrain.run) is one too.
"""

from .._capi import (InvalidArgument, JobAborted, LibraryNotFound, ModelMismatch,
                     PstrainError, SchedulerUnavailable, ServerUnavailable, Unauthenticated,
                     Unavailable)
from ._worker import finish, get_rank, get_world_size, init, is_initialized
from .data import ClockBatchSampler, batch_indices, batches
from .metrics import report
from .optimizer import NoGradients, Optimizer, UnsupportedDtype
from .sparse import SparseEmbeddingBag, initial_rows

__all__ = [
    "init", "is_initialized", "get_rank", "get_world_size", "Optimizer", "batches", "report",
    "ClockBatchSampler",
    "finish", "batch_indices", "SparseEmbeddingBag", "initial_rows", "PstrainError",
    "Unavailable", "SchedulerUnavailable", "ServerUnavailable", "Unauthenticated",
    "ModelMismatch", "InvalidArgument", "JobAborted", "LibraryNotFound", "UnsupportedDtype",
    "NoGradients",
]
