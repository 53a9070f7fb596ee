"""pst.Optimizer: the job's optimizer, run by the servers, seen from this
worker -- the way each clock's gradients take to the servers.

Within a clock (from batches() yielding its batch to opt.step()) each CPU
parameter's .grad is the library's push buffer for that clock; outside one
no .grad points at a library buffer.
"""

import ctypes
import functools
import threading

import torch

from .. import _capi
from .._capi import PstrainError
from . import _worker
from ._device_grads import DeviceGradients
from .sparse import SparseEmbeddingBag


class UnsupportedDtype(TypeError):
    """A trainable parameter is not float32."""


class NoGradients(PstrainError):
    """step() found no gradient: backward was not called."""


class Optimizer:
    """The job's optimizer, run by the servers, seen from this worker.

    Takes the model's parameters with requires_grad=True (float32 only; a
    parameter shared by several modules counts once). Each clock starts
    with zero gradients: a CPU parameter's .grad is the push buffer itself,
    so backward accumulates into it without a copy and each gradient may
    leave for the servers as soon as backward completes it. When the worker
    overlaps (SSP/ASP, or overlap="on"), a CUDA parameter's gradient is
    copied out then too (asynchronously, through pinned memory) and leaves
    the same way; without overlap it is copied at step(). So with overlap,
    change gradients in place only before that, e.g. through the job's
    clip_norm rather than clip_grad_norm_. A .grad the script set itself is
    copied at step(). After step() a CPU parameter's .grad is None: its
    buffer is the library's again.

    Args:
      model: the torch.nn.Module whose parameters the job trains; its
        SparseEmbeddingBag modules are the sparse tables it uses.
      backward_passes_per_step: backward calls per step() (gradient
        accumulation); a gradient is complete after that many.

    Raises:
      TypeError: `model` is not a torch.nn.Module.
      UnsupportedDtype: a trainable parameter is not float32 (named).
      ValueError: no trainable parameter, or two SparseEmbeddingBag modules
        name the same table.
      RuntimeError: the worker registered a model already.
    """

    def __init__(self, model, backward_passes_per_step=1):
        if not isinstance(model, torch.nn.Module):
            raise TypeError("pstrain.torch.Optimizer takes a torch.nn.Module, not %s"
                            % type(model).__name__)
        if _worker.has_registered():
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
        self._buffers = [None] * len(named)  # this clock's push buffers (host views)
        self._passes = [0] * len(named)      # backward passes seen this clock
        self._clock = None                   # the clock under way
        self._sent = [False] * len(named)    # CUDA gradients copied out this clock
        self._early = False                  # gradients leave at the hook (overlap)
        self._library = threading.Lock()     # pst_grads_ready from two threads
        self._device_grads = DeviceGradients(self.params, self._grads_ready)
        self._hook_handles = [_after_accumulation(p, functools.partial(self._accumulated, i))
                              for i, p in enumerate(self.params)]
        self.tables = [m for m in model.modules() if isinstance(m, SparseEmbeddingBag)]
        names = [m.table for m in self.tables]
        if len(set(names)) != len(names):
            raise ValueError("pstrain.torch.Optimizer: two SparseEmbeddingBag modules name the "
                             "same table (%s); share one module instead" % ", ".join(names))
        _worker.offer_optimizer(self)

    def step(self, loss=None, correct=0, predicted=0):
        """Ends this clock: pushes the gradients the hooks have not sent yet
        and the sparse tables' rows' gradients.

        Args:
          loss: the clock's loss (a tensor or a number), for Status.
          correct: predictions that were right, for Status.
          predicted: predictions made, for Status.

        Raises:
          RuntimeError: no clock is under way (outside a batches() loop).
          NoGradients: no parameter has a gradient (backward was not called).
          PstrainError: the library refused (its subclass names why).
        """
        clock = self._require_clock("step")
        self._device_grads.drain()
        if not self._has_gradients():
            raise NoGradients("pstrain.torch.Optimizer.step() at clock %d: no parameter has a "
                              "gradient; call loss.backward() first" % clock)
        for i, p in enumerate(self.params):
            if p.grad is not None and not self._is_buffer(i) and not self._sent[i]:
                self._buffers[i].copy_(p.grad)
        for table in self.tables:
            table._push()
        self._release()
        _capi.call("pst_clock_done", _worker.current().handle,
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
        self._device_grads.reset()
        self._early = bool(_worker.current().job.overlap)
        self._load_weights()
        handle = _worker.current().handle
        for i, p in enumerate(self.params):
            self._buffers[i] = _host_tensor(_capi.lib().pst_grads(handle, i), p,
                                            "gradient buffer of '%s'" % self.names[i])
            p.grad = self._buffers[i] if p.device.type == "cpu" else None
        self._passes = [0] * len(self.params)
        self._sent = [False] * len(self.params)
        self._clock = clock
        for table in self.tables:
            table._pulled = []

    def _load_weights(self):
        handle = _worker.current().handle
        with torch.no_grad():
            for i, p in enumerate(self.params):
                p.copy_(_host_tensor(_capi.lib().pst_weights(handle, i), p,
                                     "weights of '%s'" % self.names[i]))

    def _release(self):
        """Ends the clock here: the buffers belong to the library from now on
        (their pushes may still be under way), so no .grad may point at them."""
        for i, p in enumerate(self.params):
            if self._is_buffer(i):
                p.grad = None
        self._buffers = [None] * len(self.params)
        self._clock = None

    def _require_clock(self, what):
        if self._clock is None:
            raise RuntimeError("pstrain.torch.Optimizer.%s(): no clock under way; call it in "
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
        if self._passes[i] != self.backward_passes_per_step:
            return
        grad = self.params[i].grad
        if self._is_buffer(i):
            self._grads_ready(i)
        elif self._early and grad is not None and grad.device.type == "cuda" \
                and self._device_grads.handles(i):
            self._device_grads.send(i, grad, self._buffers[i])
            self._sent[i] = True

    def _grads_ready(self, i):
        """Parameter i's gradient is complete in its buffer: it may leave."""
        with self._library:
            _capi.call("pst_grads_ready", _worker.current().handle, i)


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
