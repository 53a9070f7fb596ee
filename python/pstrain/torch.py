"""A PyTorch training script as a pstrain worker.

    import pstrain.torch as pst

    pst.init()                               # scheduler from PSTRAIN_SCHEDULER
    model = Net()
    opt = pst.Optimizer(model)               # the servers run the job's optimizer
    for x, y in pst.batches(train_set):      # this worker's share of each clock
        loss = loss_fn(model(x), y)
        loss.backward()                      # gradients go to the push buffers
        opt.step(loss)                       # pushes them; the clock ends
    pst.finish(accuracy=evaluate(model))     # the final weights are in the model

The servers hold the weights and the optimizer's state; the job spec names
the optimizer, the consistency (BSP, SSP, ASP), the global batch and the
clocks. Before each batch is yielded the parameters hold that clock's
weights, and each step starts with zero gradients. Trainable float32
parameters go to the servers; those with requires_grad=False stay local.

The worker's machinery (scheduler client, heartbeats, parameter client,
retries, rollback resync) is libpstrain_torch.so, loaded with ctypes; see
pstrain._capi for where it is looked for.
"""

import atexit
import ctypes
import functools
import os
import shlex
import sys
import traceback

import torch
import torch.nn.functional as F
import torch.utils.data

from . import _capi
from ._capi import (InvalidArgument, JobAborted, LibraryNotFound, ModelMismatch,
                    PstrainError, SchedulerUnavailable, ServerUnavailable, Unauthenticated)

__all__ = [
    "init", "is_initialized", "get_rank", "get_world_size", "Optimizer", "batches",
    "finish", "batch_indices", "SparseEmbeddingBag", "initial_rows", "PstrainError",
    "SchedulerUnavailable", "ServerUnavailable", "Unauthenticated",
    "ModelMismatch", "InvalidArgument", "JobAborted", "LibraryNotFound", "UnsupportedDtype",
    "NoGradients",
]


class UnsupportedDtype(TypeError):
    """A trainable parameter is not float32."""


class NoGradients(PstrainError):
    """step() found no gradient: backward was not called."""


_default_collate = getattr(torch.utils.data, "default_collate", None)
if _default_collate is None:  # PyTorch before 1.11
    _default_collate = torch.utils.data._utils.collate.default_collate

# How long one pst_next call waits, so that Ctrl-C is seen between calls.
_POLL_MS = 200


class _Worker:
    """This process's worker: the library's handle and how far its job got."""

    def __init__(self, handle):
        self.handle = handle
        self.job = None        # _capi.JobInfo once registered
        self.optimizer = None  # the Optimizer registered with the job
        self.done = False      # every clock done; the final weights loaded
        self.failure = None    # the uncaught exception's text, for the report


_worker = None
_optimizer = None  # the latest Optimizer made: the one the first batches() registers


def init(scheduler=None, **flags):
    """Starts this process's worker (its gRPC service); nothing is sent to the
    scheduler until the first batches().

    Flags are ps_worker's (auth_token_file, tls_ca, heartbeat_interval_ms,
    overlap, wire_dtype, ...): first those of $PSTRAIN_FLAGS ("--name=value"
    words), then `scheduler` (else $PSTRAIN_SCHEDULER), then `flags`.
    """
    global _worker
    if _worker is not None:
        raise RuntimeError("pstrain.torch.init() was called already")
    settings = _env_flags()
    scheduler = scheduler or os.environ.get("PSTRAIN_SCHEDULER")
    if scheduler:
        settings["scheduler"] = scheduler
    settings.update((name, _flag_text(value)) for name, value in flags.items())
    if not settings.get("scheduler"):
        raise ValueError("pstrain.torch.init(): no scheduler; pass scheduler='HOST:PORT' "
                         "or set PSTRAIN_SCHEDULER")
    for name, value in settings.items():
        _capi.call("pst_set_flag", name.encode(), value.encode())
    handle = ctypes.c_void_p()
    _capi.call("pst_open", ctypes.byref(handle))
    _worker = _Worker(handle)
    _install_exit_hooks()


def _env_flags():
    flags = {}
    for word in shlex.split(os.environ.get("PSTRAIN_FLAGS", "")):
        name, sep, value = word.partition("=")
        if not name.startswith("--") or not sep:
            raise ValueError("PSTRAIN_FLAGS: %r is not --name=value" % word)
        flags[name[2:]] = value
    return flags


def _flag_text(value):
    return str(value).lower() if isinstance(value, bool) else str(value)


def is_initialized():
    """Whether init() was called and finish() was not."""
    return _worker is not None


def get_rank():
    """This worker's id in the job (known from the first batches() on)."""
    return _registered("get_rank").job.worker_id


def get_world_size():
    """The job's number of workers (known from the first batches() on)."""
    return _registered("get_world_size").job.num_workers


def _initialized(what):
    if _worker is None:
        raise RuntimeError("pstrain.torch.%s(): call pstrain.torch.init() first" % what)
    return _worker


def _registered(what):
    worker = _initialized(what)
    if worker.job is None:
        raise RuntimeError("pstrain.torch.%s(): the worker registers with the scheduler at "
                           "the first pstrain.torch.batches()" % what)
    return worker


class Optimizer:
    """The job's optimizer, run by the servers, seen from this worker.

    Takes the model's parameters with requires_grad=True (float32 only; a
    parameter shared by several modules counts once). Each step starts
    with zero gradients: a CPU parameter's .grad is the push buffer itself,
    so backward accumulates into it without a copy and each gradient may
    leave for the servers as soon as backward completes it (so change
    gradients in place only before that, e.g. through the job's clip_norm
    rather than clip_grad_norm_). Other gradients (CUDA, or a .grad the
    script set) are copied at step(). After step() a CPU parameter's .grad
    is None: its buffer is the library's again.

    backward_passes_per_step: backward calls per step (gradient
    accumulation); a gradient is complete after that many.
    """

    def __init__(self, model, backward_passes_per_step=1):
        global _optimizer
        if not isinstance(model, torch.nn.Module):
            raise TypeError("pstrain.torch.Optimizer takes a torch.nn.Module, not %s"
                            % type(model).__name__)
        if _worker is not None and _worker.job is not None:
            raise RuntimeError("pstrain.torch.Optimizer: the model was registered already "
                               "(at the first batches()); make the Optimizer before it")
        named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
        for name, p in named:
            if p.dtype != torch.float32:
                raise UnsupportedDtype(
                    "parameter '%s' is %s; pstrain trains float32 parameters only "
                    "(convert it with .float() or keep it local with requires_grad=False)"
                    % (name, p.dtype))
        if not named:
            raise ValueError("pstrain.torch.Optimizer: the model has no parameter with "
                             "requires_grad=True")
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.backward_passes_per_step = backward_passes_per_step
        self._buffers = [None] * len(named)  # this step's push buffers (host views)
        self._passes = [0] * len(named)      # backward passes seen this step
        self._clock = None                   # the step under way
        self._hook_handles = [_after_accumulation(p, functools.partial(self._accumulated, i))
                              for i, p in enumerate(self.params)]
        self.tables = [m for m in model.modules() if isinstance(m, SparseEmbeddingBag)]
        names = [m.table for m in self.tables]
        if len(set(names)) != len(names):
            raise ValueError("pstrain.torch.Optimizer: two SparseEmbeddingBag modules name the "
                             "same table (%s); share one module instead" % ", ".join(names))
        _optimizer = self

    def step(self, loss=None, correct=0, predicted=0):
        """Ends this clock's step: pushes the gradients the hooks have not
        sent yet. loss (a tensor or a number), correct and predicted (right
        and made predictions) go to the worker's Status."""
        clock = self._require_step("step")
        if not self._has_gradients():
            raise NoGradients("pstrain.torch.Optimizer.step() at clock %d: no parameter has a "
                              "gradient; call loss.backward() first" % clock)
        for i, p in enumerate(self.params):
            if p.grad is not None and not self._is_buffer(i):
                self._buffers[i].copy_(p.grad)
        for table in self.tables:
            table._push()
        self._release()
        _capi.call("pst_step_done", _worker.handle,
                   float("nan") if loss is None else float(loss), int(correct), int(predicted))

    def zero_grad(self, set_to_none=False):
        """Zeroes the gradients in place: a CPU parameter's .grad stays the
        push buffer (set_to_none is taken for torch.optim's signature and
        not followed)."""
        for p in self.params:
            if p.grad is not None:
                p.grad.zero_()

    def _begin(self, clock):
        """Loads clock `clock`'s weights and points the gradients at its buffers."""
        self._load_weights()
        for i, p in enumerate(self.params):
            self._buffers[i] = _host_tensor(_capi.lib().pst_grads(_worker.handle, i), p,
                                            "gradient buffer of '%s'" % self.names[i])
            p.grad = self._buffers[i] if p.device.type == "cpu" else None
        self._passes = [0] * len(self.params)
        self._clock = clock
        for table in self.tables:
            table._pulled = []

    def _load_weights(self):
        with torch.no_grad():
            for i, p in enumerate(self.params):
                p.copy_(_host_tensor(_capi.lib().pst_weights(_worker.handle, i), p,
                                     "weights of '%s'" % self.names[i]))

    def _release(self):
        """Ends the step here: the buffers belong to the library from now on
        (their pushes may still be under way), so no .grad may point at them."""
        for i, p in enumerate(self.params):
            if self._is_buffer(i):
                p.grad = None
        self._buffers = [None] * len(self.params)
        self._clock = None

    def _require_step(self, what):
        if self._clock is None:
            raise RuntimeError("pstrain.torch.Optimizer.%s(): no step under way; call it in "
                               "the body of a pstrain.torch.batches() loop" % what)
        return self._clock

    def _is_buffer(self, i):
        grad, buffer = self.params[i].grad, self._buffers[i]
        return (grad is not None and buffer is not None and grad.device.type == "cpu"
                and grad.data_ptr() == buffer.data_ptr())

    def _has_gradients(self):
        return any(self._passes) or any(
            p.grad is not None and not self._is_buffer(i) for i, p in enumerate(self.params))

    def _accumulated(self, i):
        """Backward has accumulated parameter i's gradient once more."""
        if self._clock is None:
            return
        self._passes[i] += 1
        if self._passes[i] == self.backward_passes_per_step and self._is_buffer(i):
            _capi.call("pst_grads_ready", _worker.handle, i)


def _after_accumulation(param, fn):
    """Has fn() called each time backward has accumulated param's gradient;
    returns what keeps the hook alive."""
    if hasattr(param, "register_post_accumulate_grad_hook"):  # PyTorch >= 2.1
        return param.register_post_accumulate_grad_hook(lambda _: fn())
    with torch.enable_grad():
        accumulator = param.expand_as(param).grad_fn.next_functions[0][0]
    accumulator.register_hook(lambda *_: fn())
    return accumulator


def _host_tensor(address, param, what):
    """A float32 CPU tensor of param's shape over the library's buffer at
    `address`, without a copy."""
    if not address:
        raise PstrainError("pstrain gave no %s" % what)
    array = (ctypes.c_float * param.numel()).from_address(address)
    return torch.frombuffer(array, dtype=torch.float32).view(param.shape)


# A row pull or push talks to the servers only: UNAVAILABLE is a server's.
_ROW_ERRORS = {_capi.UNAVAILABLE: ServerUnavailable}


class SparseEmbeddingBag(torch.nn.Module):
    """torch.nn.EmbeddingBag whose rows live on the servers: the job's
    sparse table `table` (JobSpec.tables), whose width is embedding_dim.

    Each forward pulls the rows its input names (each distinct id once) for
    the clock under way, waiting as the tables' consistency asks (BSP: until
    every worker's pushes of the clocks before are applied); opt.step()
    pushes their gradients and the servers update the rows with the table's
    optimizer (PyTorch's sparse SGD, Adagrad or SparseAdam). Outside a step
    (an evaluation once the clocks are done) forward reads the rows as the
    job left them. input, offsets, mode ("sum", "mean" or "max") and
    per_sample_weights are EmbeddingBag's; ids are int64 >= 0, below the
    table's num_ids where it declares one. The module holds no Parameter:
    the rows are never in the script's memory beyond a batch's.
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
        self._pulled = []  # this step's (ids, rows) whose gradients opt.step() pushes

    def extra_repr(self):
        return "table=%r, embedding_dim=%d, mode=%r" % (self.table, self.embedding_dim,
                                                       self.mode)

    def forward(self, input, offsets=None, per_sample_weights=None):
        worker = _registered("SparseEmbeddingBag.forward")
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
                   ids.data_ptr(), self.embedding_dim, rows.data_ptr(), errors=_ROW_ERRORS)
        optimizer = worker.optimizer
        if torch.is_grad_enabled() and optimizer is not None and optimizer._clock is not None:
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
        """Pushes this step's gradients of the rows pulled (a row pulled twice
        is summed by the library); pst_step_done pushes an empty one if none."""
        pulled = [(ids, rows.grad) for ids, rows in self._pulled if rows.grad is not None]
        self._pulled = []
        if not pulled:
            return
        ids = torch.cat([ids for ids, _ in pulled]).contiguous()
        grads = torch.cat([g.to_dense() if g.is_sparse else g for _, g in pulled])
        grads = grads.to(device="cpu", dtype=torch.float32).contiguous()
        _capi.call("pst_push_rows", _worker.handle, self.table.encode(), len(ids),
                   ids.data_ptr(), self.embedding_dim, grads.data_ptr(), errors=_ROW_ERRORS)


def initial_rows(ids, *, seed, table, embedding_dim, init_scale=None):
    """The rows of `ids` (int64 >= 0) of a table as the servers make them
    from the job's seed, the table's name and each id: a float32 tensor of
    len(ids) x embedding_dim, uniform in [-init_scale, init_scale] (default
    1 / embedding_dim, as the job spec's). Needs no worker: a script
    training alone starts from the cluster's rows."""
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


def batches(dataset, collate_fn=None):
    """Yields this worker's share of each clock's global batch,
    collate_fn([dataset[i] for i in indices]) (default: PyTorch's
    default_collate), until the job's clocks are done; the parameters then
    hold the final weights. The loop's body must call opt.step().

    The first call registers the model (the Optimizer's parameters and
    len(dataset)) with the scheduler; worker 0's current parameter values
    seed the servers.
    """
    worker = _initialized("batches")
    if not hasattr(dataset, "__len__"):
        raise TypeError("pstrain.torch.batches() takes a map-style dataset (__len__ and "
                        "__getitem__), not %s" % type(dataset).__name__)
    if worker.job is None:
        _register(worker, len(dataset))
    collate = collate_fn or _default_collate
    optimizer = worker.optimizer
    indices = (ctypes.c_int64 * worker.job.batch_size)()
    while not worker.done:
        clock, rows = _next_step(worker, indices)
        if clock < 0:
            optimizer._load_weights()
            worker.done = True
            return
        optimizer._begin(clock)
        yield collate([dataset[i] for i in indices[:rows]])
        if optimizer._clock is not None:
            raise RuntimeError("pstrain.torch.batches(): the loop body did not call "
                               "opt.step() for clock %d" % clock)


def _register(worker, train_size):
    optimizer = _optimizer
    if optimizer is None:
        raise RuntimeError("pstrain.torch.batches(): make a pstrain.torch.Optimizer(model) "
                           "first")
    params, n = optimizer.params, len(optimizer.params)
    names = (ctypes.c_char_p * n)(*[name.encode() for name in optimizer.names])
    ndims = (ctypes.c_int * n)(*[p.dim() for p in params])
    dims = [d for p in params for d in p.shape]
    dtypes = (ctypes.c_int * n)(*[_capi.PST_FP32] * n)
    _capi.call("pst_register", worker.handle, n, names, ndims,
               (ctypes.c_int64 * len(dims))(*dims), dtypes, train_size,
               errors={_capi.FAILED_PRECONDITION: ModelMismatch})
    job = _capi.JobInfo()
    _capi.check(_capi.lib().pst_job(worker.handle, ctypes.byref(job)), "", "pst_job")
    initial = [p.detach().to(device="cpu", dtype=torch.float32).contiguous() for p in params]
    _capi.call("pst_start", worker.handle,
               (ctypes.c_void_p * n)(*[t.data_ptr() for t in initial]))
    worker.job, worker.optimizer = job, optimizer


def _next_step(worker, indices):
    """Waits for the next step: (clock, rows of `indices`), clock -1 at the end."""
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


def finish(accuracy=None):
    """Reports this worker FINISHED to the scheduler (with its test accuracy,
    if given) and stops it. Called at exit otherwise: FINISHED if every clock
    was done, FAILED (with the exception's text) if not."""
    _initialized("finish")
    _close(True, -1.0 if accuracy is None else float(accuracy), "")


def _close(ok, accuracy, message):
    global _worker
    worker, _worker = _worker, None
    if worker.optimizer is not None and worker.optimizer._clock is not None:
        worker.optimizer._release()
    code = _capi.lib().pst_finish(worker.handle, int(ok), accuracy, message.encode())
    _capi.lib().pst_close(worker.handle)
    _capi.check(code, "", "pst_finish")


def _install_exit_hooks():
    previous = sys.excepthook

    def record(kind, value, tb):
        if _worker is not None:
            _worker.failure = "".join(traceback.format_exception_only(kind, value)).strip()
        previous(kind, value, tb)

    sys.excepthook = record
    atexit.register(_at_exit)


def _at_exit():
    if _worker is None:
        return
    if _worker.failure:
        _close(False, -1.0, _worker.failure)
    elif _worker.done:
        _close(True, -1.0, "")
    else:
        _close(False, -1.0, "the script ended before the job's clocks were done")


def batch_indices(clock, *, seed, train_size, batch_size, share=0, share_of=1):
    """The example indices of clock `clock`'s global batch (share 0 of 1), or
    of share `share` of `share_of` of it: the data order the workers follow,
    for a single process trained on the same batches."""
    if batch_size < 1:
        raise ValueError("pstrain.torch.batch_indices: batch_size %d < 1" % batch_size)
    out = (ctypes.c_int64 * batch_size)()
    rows = _capi.lib().pst_batch_indices(seed, train_size, batch_size,
                                         max(1, train_size // batch_size), clock, share_of,
                                         share, out, batch_size)
    if rows < 0:
        raise ValueError("pstrain.torch.batch_indices: no batch for clock=%d seed=%d "
                         "train_size=%d batch_size=%d share %d of %d"
                         % (clock, seed, train_size, batch_size, share, share_of))
    return out[:rows]
