"""A model's buffers as the servers keep them (pst.Optimizer(buffers=...)):
which buffers travel, under which rule.
"""

import torch

from .. import _capi


class UnsupportedDtype(_capi.PstrainError, TypeError):
    """A trainable parameter (or a travelling buffer) is not of a dtype
    pstrain can carry. A PstrainError like every error pstrain raises, and
    a TypeError, as torch raises for a wrong dtype."""


# Optimizer(buffers=...): the library's buffer rule (pst_register), None
# for buffers that stay on the worker.
BUFFER_RULES = {"broadcast": _capi.PST_BROADCAST, "average": _capi.PST_AVERAGE, "local": None}
# Buffers that travel as float32 besides floating-point ones.
_INTEGERS = (torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64)


def travelling_buffers(model, rule):
    """(names, tensors) of `model`'s persistent buffers (those in its
    state_dict), none if `rule` keeps them local."""
    if rule is None:
        return [], []
    persistent = set(model.state_dict().keys())
    named = [(n, b) for n, b in model.named_buffers() if n in persistent]
    for name, b in named:
        if b.is_complex() or not (b.is_floating_point() or b.dtype in _INTEGERS):
            raise UnsupportedDtype("buffer '%s' is %s; buffers travel as float32 (keep it on "
                                   "the worker with buffers=\"local\")" % (name, b.dtype))
    return [n for n, _ in named], [b for _, b in named]
