"""The library's host buffers as the Optimizer's tensors meet them: each
clock's weights into the parameters and module buffers, the gradients out.

Without copies where the library allows it (ABI 7): a contiguous CPU
parameter's .data becomes a view of the library's buffer of the clock's
weights -- the library keeps two a parameter and pulls the next clock's
into the one not read, so the view stays as it is until the next clock's
step() -- and a dense CPU gradient is handed over where it lies
(pst_grads_at), kept alive here until its push is done. A CUDA
parameter's weights, and a module buffer's values (the model may change
them in place), are copied; so is a gradient the library cannot read
where it lies (sparse, strided).
"""

import collections
import ctypes

import torch

from .. import _capi
from .._capi import PstrainError
from . import _worker


class LibraryBuffers:
    """The weights and gradients of the Optimizer's parameters (and module
    buffers) between the library and the tensors.

    Args:
      params: the Optimizer's parameters, in its order (the library's 0..n-1).
      names: their names.
      module_buffers: the travelling module buffers (the library's n, n+1, ...).
      buffer_names: their names.
      library: the lock of the library's per-clock calls (pst_grads_*),
        which come from two threads.
    """

    # A clock's pushes are done once the clock after next begins.
    _HANDED_CLOCKS = 3

    def __init__(self, params, names, module_buffers, buffer_names, library):
        self._params, self._names = params, names
        self._buffers, self._buffer_names = module_buffers, buffer_names
        self._library = library
        self._views = {}  # (index, address): a view of a weight buffer
        self._handed = collections.deque([[]], maxlen=self._HANDED_CLOCKS)

    def begin_clock(self):
        """A clock begins: the gradients handed two clocks ago are let go."""
        self._handed.append([])

    def load(self, j):
        """Waits for the weights of the clock under way of parameter j (or,
        past the parameters, of module buffer j - len(params)) and puts them
        in. Nothing when the clock's pull failed: the clock is lost, and the
        worker offers it again."""
        err = ctypes.create_string_buffer(256)  # (the pull's error: the loop's to handle)
        if _capi.lib().pst_weights_await(_worker.current().handle, j, err, len(err)) == 0:
            self._put(j)

    def load_final(self):
        """The job's final weights (the clocks are done) into every
        parameter and module buffer, in memory of their own."""
        for j in range(len(self._params) + len(self._buffers)):
            self._put(j)
        self.own_weights()

    def own_weights(self):
        """Every parameter that is a view of the library's buffers gets a
        copy of its own (before the library closes and frees them)."""
        mine = {view.data_ptr() for view in self._views.values()}
        for p in self._params:
            if p.device.type == "cpu" and p.data_ptr() in mine:
                p.data = p.data.clone()
        self._views = {}

    def hand(self, i, grad):
        """Gives parameter i's complete gradient to the library without a
        copy, if it can read it where it lies (a dense, contiguous float32
        CPU tensor): it is kept until its push is done. False: it cannot."""
        if not (grad.device.type == "cpu" and grad.layout == torch.strided
                and grad.dtype == torch.float32 and grad.is_contiguous()):
            return False
        self._handed[-1].append(grad)
        with self._library:
            _capi.call("pst_grads_at", _worker.current().handle, i, grad.data_ptr())
        return True

    def handed_this_clock(self, grad):
        """Whether `grad` was handed to the library this clock."""
        return grad is not None and any(g is grad for g in self._handed[-1])

    def push_buffer(self, i):
        """Parameter i's push buffer of the clock under way (a CPU view)."""
        return host_tensor(_capi.lib().pst_grads(_worker.current().handle, i), self._params[i],
                           "gradient buffer of '%s'" % self._names[i])

    def push_module_buffers(self):
        """The module buffers' values of this clock into their push buffers
        (they leave at pst_clock_done)."""
        handle = _worker.current().handle
        with torch.no_grad():
            for j, b in enumerate(self._buffers, len(self._params)):
                name = self._buffer_names[j - len(self._params)]
                host_tensor(_capi.lib().pst_grads(handle, j), b,
                            "push buffer of buffer '%s'" % name).copy_(b)

    def _put(self, j):
        """Weights j of the clock into their tensor: a contiguous CPU
        parameter becomes a view of the library's buffer; anything else is
        copied into."""
        address = _capi.lib().pst_weights(_worker.current().handle, j)
        if j < len(self._params):
            tensor, what = self._params[j], "weights of '%s'" % self._names[j]
            if tensor.device.type == "cpu" and tensor.is_contiguous():
                view = self._views.get((j, address))
                if view is None:
                    view = self._views[(j, address)] = host_tensor(address, tensor, what)
                tensor.data = view
                return
        else:
            tensor = self._buffers[j - len(self._params)]
            what = "values of buffer '%s'" % self._buffer_names[j - len(self._params)]
        with torch.no_grad():
            tensor.copy_(host_tensor(address, tensor, what))


def host_tensor(address, tensor, what):
    """A float32 CPU tensor of `tensor`'s shape over the library's buffer at
    `address`, without a copy."""
    if not address:
        raise PstrainError("pstrain gave no %s" % what)
    array = (ctypes.c_float * max(1, tensor.numel())).from_address(address)
    return torch.frombuffer(array, dtype=torch.float32)[:tensor.numel()].view(tensor.shape)
