"""pst.Optimizer: the job's optimizer, run by the servers, as a
torch.optim.Optimizer on this worker -- its param_groups hold the
hyperparameters the servers run, and each clock's gradients take their way
to the servers through it.

Within a clock (from batches() yielding its batch to opt.step()) a CPU
parameter's .grad is None until backward made it, then the library's push
buffer for that clock (the gradient copied in); outside one no .grad
points at a library buffer.
"""

import functools
import threading

import torch

from .. import _capi
from .._capi import PstrainError
from . import _worker
from ._buffers import BUFFER_RULES, UnsupportedDtype, travelling_buffers
from ._device_grads import DeviceGradients
from ._layered_reads import LayeredReads
from ._library_buffers import LibraryBuffers, host_tensor
from ._optim_layout import TORCH_STATE, job_hyperparameters, loaded_entry
from ._script_hyper import ScriptHyperparameters
from .sparse import SparseEmbeddingBag


class NoGradients(PstrainError):
    """step() found no gradient: backward was not called."""


class Optimizer(torch.optim.Optimizer):
    """The job's optimizer, run by the servers, seen from this worker: a
    torch.optim.Optimizer whose one param group holds the hyperparameters
    the servers run (lr, betas, eps, weight_decay, momentum ... as the job's
    optimizer has them, under torch.optim's names).

    A value the script changes -- by hand, or through any
    torch.optim.lr_scheduler -- reaches the servers for the clocks from the
    next one on (the next batch), and from then on the script owns it: a
    job's own schedule (optimizer.schedule) rules the learning rate only
    until the script first changes it. Under BSP every worker must make the
    same changes (torch's schedulers do): a round takes its last push's.

    Takes the model's parameters with requires_grad=True (float32 only; a
    parameter shared by several modules counts once). As torch.optim does,
    a parameter without a gradient at a step() -- frozen during the run
    with requires_grad_(False), or whose .grad is None -- takes no update
    that clock: its push says it has none, and under BSP a round in which
    no worker has a gradient for it takes no optimizer step (its weights,
    moments and step count stay); so does one that requires a gradient
    but that backward did not reach. Without overlap a CPU parameter's
    .grad is its push buffer, zeroed as the clock starts, so backward
    accumulates into it without a copy; with overlap each clock starts
    with every .grad None, and as backward completes a CPU parameter's
    gradient the push reads it where it lies, without a copy (kept two
    clocks; a sparse or strided one is copied into the push buffer);
    either way each gradient may leave for the servers as soon as backward
    completes it. A contiguous CPU parameter's .data is, in training, a
    view of the library's buffer of the clock's weights (no copy; it stays
    as it is until the next clock's step(), so an evaluation between
    clocks reads one clock's weights): hold the Parameter, not its .data.
    After the last clock each parameter has memory of its own. When the
    worker overlaps
    (SSP/ASP, CUDA, or overlap="on"), a CUDA parameter's gradient is copied
    out then too (asynchronously, through pinned memory) and leaves the same
    way; without overlap it is copied at step(). So with overlap, change
    gradients in place only before that, e.g. through the job's clip_norm
    rather than clip_grad_norm_. After step() a CPU parameter's .grad is
    None: its buffer is the library's again.

    Args:
      model: the torch.nn.Module whose parameters the job trains; its
        SparseEmbeddingBag modules are the sparse tables it uses.
      backward_passes_per_step: backward calls per step() (gradient
        accumulation); a gradient is complete after that many.
      buffers: what becomes of the model's persistent buffers (BatchNorm's
        running statistics; those in its state_dict()): "broadcast", worker
        0's values at each clock (PyTorch DDP's broadcast_buffers; the
        lowest live worker's once worker 0 is gone), or "average", the
        workers' mean weighted by their samples -- in both the servers
        keep them (in checkpoints and psctl export) and every worker
        starts each clock with them -- or "local": each worker keeps its
        own, as before. They travel as float32.
      read_by_layer: each clock's weights reach a parameter just before
        the forward of the module that uses it (a forward pre-hook waits
        for that module's parameters only), so the forward of the first
        layers runs while the last ones' weights still arrive -- where the
        worker pulls layer by layer, with overlap (SSP or ASP, CUDA, or
        init(overlap="on")), for a model on the CPU (a CUDA model's are
        read whole as its clock begins, for now); otherwise every weight
        is in before the batch is yielded. The rule, FSDP's:
        a parameter is read in the forward of a module holding it or of
        one above it (the first clock learns which; see
        pstrain/torch/_layered_reads.py). Within a clock, before its
        module's forward, a parameter holds the last clock's weights
        (a module's state_dict() and load_weights() load them all at
        once); after step() every parameter holds the clock's. False: every weight is read before
        the batch is yielded.

    Raises:
      TypeError: `model` is not a torch.nn.Module.
      UnsupportedDtype: a trainable parameter is not float32 (named).
      ValueError: no trainable parameter, two SparseEmbeddingBag modules
        name the same table, or an unknown `buffers` rule.
      UnsupportedDtype: also for a buffer that is not a real number.
      RuntimeError: before pstrain.torch.init(), or this worker has an
        Optimizer already (a worker trains one model with one Optimizer).
    """

    def __init__(self, model, backward_passes_per_step=1, buffers="broadcast",
                 read_by_layer=True):
        if not isinstance(model, torch.nn.Module):
            raise TypeError("pstrain.torch.Optimizer takes a torch.nn.Module, not %s"
                            % type(model).__name__)
        worker = _worker.initialized("Optimizer")
        _worker.check_no_optimizer(worker)
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
        self.buffer_rule = BUFFER_RULES.get(buffers)
        if self.buffer_rule is None:
            raise ValueError("pstrain.torch.Optimizer: buffers=%r; one of %s"
                             % (buffers, ", ".join(map(repr, BUFFER_RULES))))
        self.buffer_names, self.module_buffers = travelling_buffers(model, self.buffer_rule)
        defaults = job_hyperparameters(worker.spec.get("optimizer", {}))
        super().__init__([p for _, p in named], defaults)
        self.names = [n for n, _ in named]
        self.params = [p for _, p in named]
        self.backward_passes_per_step = backward_passes_per_step
        self._hyper = ScriptHyperparameters(defaults)  # the script's, for the servers
        self._loaded = None                  # load_state_dict's, for the servers
        self._pushes = [None] * len(named)  # this clock's push buffers (host views)
        self._passes = [0] * len(named)      # backward passes seen this clock
        self._clock = None                   # the clock under way
        self._metrics = None                 # pst.report()'s for this clock
        self._sent = [False] * len(named)    # gradients copied out this clock
        self._reported = [False] * len(named)  # given to the library this clock
        self._early = False                  # gradients leave at the hook (overlap)
        self._library = threading.Lock()     # pst_grads_ready from two threads
        self._device_grads = DeviceGradients(self.params, self._grads_ready)
        self._hook_handles = [_after_accumulation(p, functools.partial(self._accumulated, i))
                              for i, p in enumerate(self.params)]
        self._host = LibraryBuffers(self.params, self.names, self.module_buffers,
                                       self.buffer_names, self._library)
        self._reads = (LayeredReads(model, self.params, self._host.load) if read_by_layer
                       else None)
        self._on_cuda = any(p.device.type == "cuda" for p in self.params)
        self._untouched = [None] * len(named)  # a zeroed push buffer's version
        self.tables = [m for m in model.modules() if isinstance(m, SparseEmbeddingBag)]
        names = [m.table for m in self.tables]
        if len(set(names)) != len(names):
            raise ValueError("pstrain.torch.Optimizer: two SparseEmbeddingBag modules name the "
                             "same table (%s); share one module instead" % ", ".join(names))
        worker.optimizer = self

    def add_param_group(self, param_group):
        """torch.optim's; pstrain trains one group (the model's trainable
        parameters), whose hyperparameters the servers run.

        Raises:
          ValueError: a second group.
        """
        if self.param_groups:
            raise ValueError("pstrain.torch.Optimizer has one param group, the model's "
                             "trainable parameters: per-group hyperparameters are not "
                             "supported")
        super().add_param_group(param_group)

    def state_dict(self):
        """The optimizer's state as the servers hold it now, in the layout
        torch.optim's optimizer of the same kind uses (Adam: 'step',
        'exp_avg', 'exp_avg_sq' per parameter; SGD with momentum:
        'momentum_buffer'; ...), and the param group with the keys that
        optimizer needs: `torch.optim.Adam(model.parameters())
        .load_state_dict(opt.state_dict())` continues the run alone. Under
        BSP, called in a clock's body before step() or after the last
        clock, it is the state of the weights the model holds.

        Returns:
          {'state': {index: {...}}, 'param_groups': [{..., 'params':
          [0, 1, ...]}]}, the parameters indexed in the Optimizer's order.

        Raises:
          RuntimeError: before the first batches() declared the model.
          NotImplementedError: the job's optimizer has no torch.optim
            counterpart here (Adafactor, Lion).
          ServerUnavailable: a server could not be reached within the
            retries (named, with its address).
          PstrainError: a server refused the read (its subclass names why).
        """
        worker = _worker.registered("Optimizer.state_dict")
        kind = worker.spec.get("optimizer", {}).get("type", "ADAM")
        if kind not in TORCH_STATE:
            raise NotImplementedError("pstrain.torch.Optimizer.state_dict(): the job's optimizer "
                                      "%s has no torch.optim layout here" % kind)
        names, with_step, extra = TORCH_STATE[kind]
        _capi.call("pst_read_state", worker.handle)
        state = {}
        for i, p in enumerate(self.params):
            arrays = _capi.lib().pst_state_arrays(worker.handle, i)
            if arrays != len(names):
                raise PstrainError("pst_read_state: parameter '%s' has %d state arrays, %s %d"
                                   % (self.names[i], arrays, kind, len(names)))
            entry = {name: host_tensor(_capi.lib().pst_state(worker.handle, i, k), p,
                                        "state of '%s'" % self.names[i]).clone().to(p.device)
                     for k, name in enumerate(names)}
            if with_step:
                entry["step"] = torch.tensor(float(_capi.lib().pst_state_steps(worker.handle, i)))
            state[i] = entry
        group = {key: value for key, value in self.param_groups[0].items() if key != "params"}
        group.update(extra)
        group["params"] = list(range(len(self.params)))
        return {"state": state, "param_groups": [group]}

    def load_state_dict(self, state_dict):
        """Sets the servers' starting optimizer state from a torch.optim state of the
        same optimizer (torch.optim.Adam(...).state_dict(), or this class's
        state_dict()), moving a run onto pstrain: each parameter's state
        goes to the servers before its initial values, and the group's
        hyperparameters become this optimizer's (changed ones reach the
        servers as the script's). Call it before the first batches(), on
        every worker alike (worker 0's is the one the servers take; a
        worker that pushes the initial values again after a rollback to
        clock 0 gives its own).

        Args:
          state_dict: {'state': {index: {...}}, 'param_groups': [one group
            whose 'params' index this optimizer's parameters in order]}.

        Raises:
          RuntimeError: the model was declared already (after the first
            batches()).
          ValueError: another number of groups or parameters, a state entry
            missing or of another shape (named).
          NotImplementedError: the job's optimizer has no torch.optim
            counterpart here (Adafactor, Lion).
        """
        worker = _worker.initialized("Optimizer.load_state_dict")
        if worker.declared:
            raise RuntimeError("pstrain.torch.Optimizer.load_state_dict() sets the servers' starting state: call "
                               "it before the first batches()")
        kind = worker.spec.get("optimizer", {}).get("type", "ADAM")
        if kind not in TORCH_STATE:
            raise NotImplementedError("pstrain.torch.Optimizer.load_state_dict(): the job's "
                                      "optimizer %s has no torch.optim layout here" % kind)
        groups = state_dict.get("param_groups", [])
        if len(groups) != 1 or len(groups[0].get("params", [])) != len(self.params):
            raise ValueError("pstrain.torch.Optimizer.load_state_dict(): the state has %d groups "
                             "of %s parameters; this optimizer one of %d"
                             % (len(groups), [len(g.get("params", [])) for g in groups],
                                len(self.params)))
        names, with_step, _ = TORCH_STATE[kind]
        self._loaded = [loaded_entry(state_dict.get("state", {}).get(index), names, with_step, p, name)
                      for index, p, name in zip(groups[0]["params"], self.params, self.names)]
        for key in self.defaults:
            if key in groups[0]:
                self.param_groups[0][key] = groups[0][key]

    def step(self, closure=None):
        """Ends this clock: pushes the gradients the hooks have not sent yet
        and the sparse tables' rows' gradients. The clock's loss and
        accuracy for Status come from pstrain.torch.report() (or the
        closure's loss).

        Args:
          closure: as torch.optim's: re-evaluates the model and returns the
            loss (called with gradients enabled, before the push).

        Returns:
          The closure's loss, or None.

        Raises:
          TypeError: `closure` is not callable (a loss: report it with
            pstrain.torch.report(loss)).
          RuntimeError: no clock is under way (outside a batches() loop).
          NoGradients: no parameter has a gradient (backward was not called).
          PstrainError: the library refused (its subclass names why).
        """
        if closure is not None and not callable(closure):
            raise TypeError("pstrain.torch.Optimizer.step() takes a closure, as torch.optim's; "
                            "report the clock's loss with pstrain.torch.report(loss)")
        clock = self._require_clock("step")
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._reads is not None:
            self._reads.finish()
        self._device_grads.drain()
        if not self._has_gradients():
            raise NoGradients("pstrain.torch.Optimizer.step() at clock %d: no parameter has a "
                              "gradient; call loss.backward() first" % clock)
        absent = [i for i in range(len(self.params)) if self._without_gradient(i)]
        for i, p in enumerate(self.params):
            if p.grad is not None and not self._is_buffer(i) and not self._sent[i]:
                self._pushes[i].copy_(p.grad)
        with self._library:
            for i in absent:
                _capi.call("pst_grads_absent", _worker.current().handle, i)
                self._reported[i] = True
        self._host.push_module_buffers()
        for table in self.tables:
            table._push()
        reported = self._metrics or {"loss": loss, "correct": 0, "predicted": 0}
        self.end_clock()
        _capi.call("pst_clock_done", _worker.current().handle,
                   float("nan") if reported["loss"] is None else float(reported["loss"]),
                   int(reported["correct"]), int(reported["predicted"]))
        return loss

    def zero_grad(self, set_to_none=True):
        """Zeroes the gradients. A CPU parameter's .grad within a clock is
        its push buffer: it is zeroed in place whatever `set_to_none` says,
        so that backward goes on writing into it (the next backward starts
        from zero either way). Other gradients follow torch.optim's rule.

        Args:
          set_to_none: set a gradient that is not a push buffer to None
            instead of zeroing it.
        """
        for i, p in enumerate(self.params):
            if p.grad is None:
                continue
            if self._is_buffer(i) or not set_to_none:
                p.grad.zero_()
            else:
                p.grad = None

    # ---- The clock's lifecycle: called by pstrain.torch.batches(),
    # pst.report and the worker (pstrain/torch/_worker.py), not by a
    # script. ----

    @property
    def reads_by_layer(self):
        """Whether each clock's weights are read layer by layer
        (read_by_layer)."""
        return self._reads is not None

    def record(self, loss, correct, predicted):
        """Keeps the clock's loss and accuracy counts (pst.report) for the
        push that ends it."""
        self._require_clock("report")
        self._metrics = {"loss": loss, "correct": correct, "predicted": predicted}

    @property
    def clock(self):
        """The clock under way (from batches() yielding its batch to
        step()), else None."""
        return self._clock

    def begin_clock(self, clock):
        """Begins clock `clock`: loads its weights, points the gradients at
        its buffers and gives the library the hyperparameters of its pushes."""
        self._device_grads.reset()
        self._host.begin_clock()
        self._early = bool(_worker.current().job.overlap)
        self._clock = clock
        self._hyper.send(self.param_groups[0], _worker.current().handle)
        for j in range(len(self.params), len(self.params) + len(self.module_buffers)):
            self._host.load(j)
        # Layer by layer where the worker pulls so (overlap), for CPU
        # parameters: a CUDA copy from the library's pageable buffers inside
        # the forward would wait for the kernels queued before it.
        if self._reads is not None and self._early and not self._on_cuda:
            self._reads.begin()
        else:
            for i in range(len(self.params)):
                self._host.load(i)
        for i, p in enumerate(self.params):
            self._pushes[i] = self._host.push_buffer(i)
            if p.device.type == "cpu" and not self._early:
                self._pushes[i].zero_()  # backward accumulates into it
                self._untouched[i] = self._pushes[i]._version
                p.grad = self._pushes[i]
            else:  # copied in whole at its hook (or at step())
                p.grad = None
        self._passes = [0] * len(self.params)
        self._sent = [False] * len(self.params)
        self._reported = [False] * len(self.params)
        self._metrics = None
        for table in self.tables:
            table._pulled = []

    def load_weights(self):
        """Loads every parameter's weights of the clock under way now. With
        read_by_layer each is loaded anyway just before the forward of its
        module (and at step() at the latest); this is for a script that
        reads a parameter outside its module's forward (before the forward,
        or through another module). Nothing to do outside a clock."""
        if self._clock is not None and self._reads is not None:
            self._reads.load_all()

    def load_final_weights(self):
        """The job's final weights into the model (the clocks are done)."""
        self._host.load_final()

    def loaded_state(self):
        """[(index, steps, state arrays)] of the parameters whose optimizer
        state load_state_dict() gave: what the servers start from."""
        return [(i, steps, arrays) for i, entry in enumerate(self._loaded or [])
                if entry is not None for steps, arrays in [entry]]

    def close(self):
        """The library is closing: no gradient copy lands after this, a
        clock under way ends, and the parameters own their memory again."""
        self._device_grads.reset()
        if self._clock is not None:
            self.end_clock()
        self._host.own_weights()

    def end_clock(self):
        """Ends the clock here: the buffers belong to the library from now on
        (their pushes may still be under way), so no .grad may point at them."""
        for i, p in enumerate(self.params):
            # (A handed gradient may still be read by its push: a later
            # zero_grad(set_to_none=False) must not zero it.)
            if self._is_buffer(i) or self._host.handed_this_clock(p.grad):
                p.grad = None
        self._pushes = [None] * len(self.params)
        self._clock = None

    def _require_clock(self, what):
        if self._clock is None:
            raise RuntimeError("pstrain.torch.Optimizer.%s(): no clock under way; call it in "
                               "the body of a pstrain.torch.batches() loop" % what)
        return self._clock

    def _is_buffer(self, i):
        grad, buffer = self.params[i].grad, self._pushes[i]
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
        if self._is_buffer(i):
            self._grads_ready(i)
            return
        grad = self.params[i].grad
        if grad is not None and self._host.hand(i, grad):  # its push reads it: no copy
            self._sent[i] = True
            self._reported[i] = True
        elif grad is not None and grad.device.type == "cpu":
            # Into the buffer, which backward goes on accumulating into.
            with torch.no_grad():
                self._pushes[i].copy_(grad)
            self.params[i].grad = self._pushes[i]
            self._grads_ready(i)
        elif self._early and grad is not None and grad.device.type == "cuda" \
                and self._device_grads.handles(i):
            self._device_grads.send(i, grad, self._pushes[i])
            self._sent[i] = True

    def _grads_ready(self, i):
        """Parameter i's gradient is complete in its buffer: it may leave."""
        with self._library:
            _capi.call("pst_grads_ready", _worker.current().handle, i)
            self._reported[i] = True

    def _without_gradient(self, i):
        """Whether parameter i has no gradient at this step(), as torch.optim
        sees it: backward never reached it (its .grad is None, or still the
        push buffer as zeroed: nothing, backward or the script, wrote into
        it). It then takes no update this clock (pst_grads_absent)."""
        p = self.params[i]
        if self._reported[i] or self._sent[i]:
            return False
        if p.grad is None:
            return True
        return (self._is_buffer(i) and self._passes[i] == 0
                and self._pushes[i]._version == self._untouched[i])


def _after_accumulation(param, fn):
    """Has fn() called each time backward has accumulated param's gradient;
    returns what keeps the hook alive."""
    if hasattr(param, "register_post_accumulate_grad_hook"):  # PyTorch >= 2.1
        return param.register_post_accumulate_grad_hook(lambda _: fn())
    with torch.enable_grad():
        accumulator = param.expand_as(param).grad_fn.next_functions[0][0]
    accumulator.register_hook(lambda *_: fn())
    return accumulator
