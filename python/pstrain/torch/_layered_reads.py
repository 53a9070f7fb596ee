"""Each clock's weights into the forward module by module.

Under BSP the next clock's weights leave the servers layer by layer while
the last gradients still arrive; a script that read every weight before
its forward would wait for the last one. Here each parameter's weights
are loaded just before the forward of the module that uses it first (a
forward pre-hook waits for that module's parameters only:
pst_weights_await), so the forward of the first layers runs while the
later layers' weights are on their way -- FSDP's rule for gathering a
unit's parameters, and the same contract: a parameter is read in the
forward of a module that holds it, or of a module above it.

Which module loads which parameter is learnt at the first clock this
process trains, which reads every weight before its forward and records
the order in which the modules' forwards start: a parameter goes to the
first of the modules holding it whose forward ran (a parameter shared by
several modules, to the earliest), else to the nearest module above one
of them whose forward ran (nn.MultiheadAttention uses its out_proj's
weights without calling out_proj), else it is read when the clock begins.
An evaluation (under torch.no_grad(), or a module in eval mode) loads
every weight at its first module: nn.TransformerEncoderLayer's fast path,
for one, reads its children's weights without calling them. Each hook
runs before any the script registered earlier (weight_norm's, pruning's
rebuild a weight from parameters it must see loaded). A parameter no
forward loaded in a clock is loaded at step(), so that
after step() every parameter holds the clock's weights, as before; and a
module's state_dict() loads every weight first, so a checkpoint taken in
the loop's body, before the forward, is of the clock's weights.
"""

import functools

import torch


class LayeredReads:
    """Loads the parameters of the clock under way as the forward reaches
    the modules that use them.

    Args:
      model: the torch.nn.Module trained.
      params: the Optimizer's parameters, in its order.
      load: load(i) waits for parameter i's weights of the clock and copies
        them into it.
    """

    def __init__(self, model, params, load):
        self._load = load
        self._n = len(params)
        index = {id(p): i for i, p in enumerate(params)}
        self._modules = [m for _, m in model.named_modules()]
        parent = {}
        for _, m in model.named_modules():
            for child in m.children():
                parent.setdefault(id(child), m)
        self._parent = parent
        # Parameter i's modules: those that hold it directly.
        self._holders = [[] for _ in params]
        for m in self._modules:
            for p in m.parameters(recurse=False):
                if id(p) in index:
                    self._holders[index[id(p)]].append(m)
        self._plan = None        # id(module) -> parameters its forward loads
        self._eager = None       # parameters loaded as the clock begins
        self._started = None     # the first clock: id(module) -> start order
        self._loaded = [False] * self._n
        self._active = False
        self._hooks = [_first_forward_pre_hook(m, functools.partial(self._before, id(m)))
                       for m in self._modules]
        self._hooks += [_before_state_dict(m, self._load_all_if_active) for m in self._modules]

    def begin(self):
        """A clock begins: at the first, every weight is loaded now (and the
        order the forwards start in is recorded); later, those of
        parameters no forward is known to load."""
        self._loaded = [False] * self._n
        self._active = True
        if self._plan is None:
            self._started = {}
            self.load_all()
        else:
            self._load_each(self._eager)

    def load_all(self):
        """Loads every parameter not loaded yet this clock."""
        self._load_each(range(self._n))

    def _load_all_if_active(self):
        if self._active:
            self.load_all()

    def finish(self):
        """The clock's step(): loads what no forward loaded; after the first
        clock, learns which module loads which parameter."""
        if not self._active:
            return
        self.load_all()
        if self._plan is None:
            self._plan, self._eager = self._learn(self._started)
            self._started = None
        self._active = False

    def _before(self, key, module, _inputs):
        if not self._active:
            return
        if not torch.is_grad_enabled() or not module.training:
            self.load_all()  # an evaluation: it may read any weight
        elif self._plan is None:
            self._started.setdefault(key, len(self._started))
        else:
            self._load_each(self._plan.get(key, ()))

    def _load_each(self, params):
        for i in params:
            if not self._loaded[i]:
                self._load(i)
                self._loaded[i] = True

    def _learn(self, started):
        plan, eager = {}, []
        for i, holders in enumerate(self._holders):
            ran = [m for m in holders if id(m) in started]
            if not ran:
                ran = [a for a in (self._nearest_run_above(m, started) for m in holders)
                       if a is not None]
            if not ran:
                eager.append(i)
                continue
            first = min(ran, key=lambda m: started[id(m)])
            plan.setdefault(id(first), []).append(i)
        return plan, eager

    def _nearest_run_above(self, module, started):
        above = self._parent.get(id(module))
        while above is not None and id(above) not in started:
            above = self._parent.get(id(above))
        return above

    def close(self):
        """Removes the hooks."""
        for h in self._hooks:
            h.remove()
        self._hooks = []


def _first_forward_pre_hook(module, hook):
    """module.register_forward_pre_hook(hook), run before the hooks
    registered so far (torch >= 2.0: prepend; 1.13: moved to the front of
    the module's ordered hooks); returns the handle."""
    try:
        return module.register_forward_pre_hook(hook, prepend=True)
    except TypeError:  # torch 1.13
        handle = module.register_forward_pre_hook(hook)
        module._forward_pre_hooks.move_to_end(handle.id, last=False)
        return handle


def _before_state_dict(module, fn):
    """Has fn() called when module.state_dict() is taken, before its values
    are read (torch >= 2.0: a state-dict pre-hook), or right after (torch
    1.13, which has none: the entries of the module's parameters are then
    made anew, since a load may have given a parameter other storage -- a
    view of the library's buffer); returns the handle."""
    if hasattr(module, "register_state_dict_pre_hook"):
        return module.register_state_dict_pre_hook(lambda *_: fn())

    def after(module, state_dict, prefix, _metadata):
        fn()
        for path, m in module.named_modules(prefix=prefix[:-1]):
            for name, p in m._parameters.items():
                key = (path + "." if path else "") + name
                if p is not None and key in state_dict and state_dict[key] is not p:
                    state_dict[key] = p.detach()

    return module._register_state_dict_hook(after)
