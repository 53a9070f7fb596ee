"""This process's worker: its flags, its library handle, its place in the
job, its model's declaration, its rank, its end (finish, or the exit
hooks' report).

One worker a process, and one Optimizer a worker: a worker trains one
model. init() joins the job (the worker's id and the job from then on);
the first batches() declares the model of the worker's Optimizer. The
state here is the process's: the handle from init() to finish() (or
exit), the job, the Optimizer, and the rank and world size, which outlive
finish().
"""

import atexit
import ctypes
import os
import shlex
import sys
import traceback

import torch

from .. import _capi
from .._capi import ModelMismatch


class _Worker:
    """This process's worker: the library's handle and how far its job got."""

    def __init__(self, handle):
        self.handle = handle
        self.job = _capi.job_info(handle)   # _capi.JobInfo: again once declared
        self.spec = _capi.job_spec(handle)  # the JobSpec as a dict
        self.declared = False  # the first batches() declared the model
        self.optimizer = None  # its one Optimizer, from when it was made
        self.done = False      # every clock done; the final weights loaded
        self.failure = None    # the uncaught exception's text, for the report


_current = None  # the _Worker from init() to finish() or exit
_place = None  # (rank, world size) from init() until the process ends


def init(scheduler=None, **flags):
    """Starts this process's worker (its gRPC service) and joins the job:
    from then on get_rank() and get_world_size() answer, and the worker
    heartbeats. The model is declared at the first batches(); the job
    starts once every worker has declared its model.

    Flags are ps_worker's: first those of $PSTRAIN_FLAGS ("--name=value"
    words), then `scheduler` (else $PSTRAIN_SCHEDULER), then `flags`.

    Args:
      scheduler: the scheduler's "HOST:PORT".
      **flags: ps_worker's flags by name (auth_token_file, tls_ca,
        heartbeat_interval_ms, overlap, wire_dtype, channels_per_server,
        shm, ...); a bool is given as true/false.

    Raises:
      RuntimeError: init() was called already.
      ValueError: no scheduler, or a word of $PSTRAIN_FLAGS is not --name=value.
      InvalidArgument: the library refused a flag (unknown, or a bad value).
      LibraryNotFound: libpstrain_torch.so is not where pstrain looks.
      SchedulerUnavailable: no scheduler answered within connect_timeout_s.
      PstrainError: the scheduler refused the worker (e.g. a job of a
        built-in model, or every worker's place is taken).
    """
    global _current, _place
    if _current is not None:
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
    try:
        _capi.call("pst_join", handle)
        worker = _Worker(handle)
    except BaseException:
        _capi.lib().pst_close(handle)
        raise
    _current = worker
    _place = (worker.job.worker_id, worker.job.num_workers)
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


def current():
    """This process's worker (a _Worker) from init() to finish() or exit, else None."""
    return _current


def is_initialized():
    """Whether init() was called and finish() was not."""
    return _current is not None


def get_rank():
    """This worker's id in the job, from init() until the process ends.

    Raises:
      RuntimeError: before init().
    """
    return _placed("get_rank")[0]


def get_world_size():
    """The job's number of workers, from init() until the process ends.

    Raises:
      RuntimeError: before init().
    """
    return _placed("get_world_size")[1]


def _placed(what):
    if _place is None:
        raise RuntimeError("pstrain.torch.%s(): call pstrain.torch.init() first" % what)
    return _place


def initialized(what):
    """The worker; RuntimeError naming pstrain.torch.`what` before init()."""
    if _current is None:
        raise RuntimeError("pstrain.torch.%s(): call pstrain.torch.init() first" % what)
    return _current


def registered(what):
    """The registered worker; RuntimeError naming pstrain.torch.`what` before
    init() or before the first batches()."""
    worker = initialized(what)
    if not worker.declared:
        raise RuntimeError("pstrain.torch.%s(): the worker declares its model to the job at "
                           "the first pstrain.torch.batches()" % what)
    return worker


def check_no_optimizer(worker):
    """Raises RuntimeError if `worker` has an Optimizer already: a worker
    trains one model with one Optimizer."""
    if worker.optimizer is not None:
        raise RuntimeError("pstrain.torch.Optimizer: this worker has one already (a worker "
                           "trains one model with one Optimizer, whose parameters are the job's "
                           "model)")


def register(worker, train_size):
    """Declares the parameters of the worker's Optimizer and the training
    set's size `train_size` to the job, reads the job and starts the clock
    loop (this worker's values are the servers' initial values if it is
    worker 0).

    Raises:
      RuntimeError: no Optimizer was made.
      ModelMismatch: the job's model differs (the message names the parameter).
      PstrainError: the scheduler refused or could not be reached (its subclass).
    """
    optimizer = worker.optimizer
    if optimizer is None:
        raise RuntimeError("pstrain.torch.batches(): make a pstrain.torch.Optimizer(model) "
                           "first")
    # The trained parameters, then the module buffers that travel.
    params = list(optimizer.params) + list(optimizer.module_buffers)
    n = len(params)
    names = (ctypes.c_char_p * n)(*[name.encode()
                                    for name in optimizer.names + optimizer.buffer_names])
    ndims = (ctypes.c_int * n)(*[p.dim() for p in params])
    dims = [d for p in params for d in p.shape]
    dtypes = (ctypes.c_int * n)(*[_capi.PST_FP32] * n)
    rules = [_capi.PST_TRAINED] * len(optimizer.params) + \
        [optimizer.buffer_rule] * len(optimizer.module_buffers)
    device = _capi.PST_CUDA if any(p.device.type == "cuda" for p in params) else _capi.PST_CPU
    _capi.call("pst_register", worker.handle, n, names, ndims,
               (ctypes.c_int64 * max(1, len(dims)))(*dims), dtypes, (ctypes.c_int * n)(*rules),
               train_size, device, errors={_capi.FAILED_PRECONDITION: ModelMismatch})
    job = _capi.job_info(worker.handle)
    for i, steps, arrays in optimizer.loaded_state():
        _capi.call("pst_write_state", worker.handle, i, steps, len(arrays),
                   (ctypes.c_void_p * max(1, len(arrays)))(*[t.data_ptr() for t in arrays]))
    initial = [p.detach().to(device="cpu", dtype=torch.float32).contiguous() for p in params]
    _capi.call("pst_read_by_layer", worker.handle, int(optimizer.reads_by_layer))
    _capi.call("pst_start", worker.handle,
               (ctypes.c_void_p * n)(*[t.data_ptr() for t in initial]))
    worker.job, worker.spec = job, _capi.job_spec(worker.handle)
    worker.declared = True


def finish(accuracy=None):
    """Reports this worker FINISHED to the scheduler and stops it. Called at
    exit otherwise: FINISHED if every clock was done, FAILED (with the
    exception's text) if not.

    Args:
      accuracy: the model's test accuracy, for the worker's Status.

    Raises:
      RuntimeError: before init().
      PstrainError: the report failed.
    """
    initialized("finish")
    _close(True, -1.0 if accuracy is None else float(accuracy), "")


def _close(ok, accuracy, message):
    global _current
    worker, _current = _current, None
    if worker.optimizer is not None:
        worker.optimizer.close()  # the library's buffers go with it
    code = _capi.lib().pst_finish(worker.handle, int(ok), accuracy, message.encode())
    _capi.lib().pst_close(worker.handle)
    _capi.check(code, "", "pst_finish")


def _install_exit_hooks():
    previous = sys.excepthook

    def record(kind, value, tb):
        if _current is not None:
            _current.failure = "".join(traceback.format_exception_only(kind, value)).strip()
        previous(kind, value, tb)

    sys.excepthook = record
    atexit.register(_at_exit)


def _at_exit():
    if _current is None:
        return
    if _current.failure:
        _close(False, -1.0, _current.failure)
    elif _current.done:
        _close(True, -1.0, "")
    else:
        _close(False, -1.0, "the script ended before the job's clocks were done")
