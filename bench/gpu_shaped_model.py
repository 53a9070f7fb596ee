"""The model of bench/gpu_shaped_bench.py: a transformer of the GPU's shape
whose forward and backward cost no CPU (issue 67).

GpuShapedTransformer has the parameters of examples/torch/transformer_fortunes.py's
ByteTransformer -- the same names, shapes and registration order (78
float32 tensors, 19,308,800 values at 6 layers x 512, context 256, a byte
vocabulary), so pst.Optimizer declares the same model, the servers cut it
into the same chunks and the forward goes through parameter-owning modules
in the same order as the real one (tokens, positions, then per block norm1,
self_attn -- whose out_proj, as nn.MultiheadAttention's, is used by its
parent and never called -- norm2, linear1, linear2; then norm, head). The
backward runs them in reverse, as autograd runs the real model's.

Each such module ("unit") computes nothing: its forward and its backward
wait for their share of the step the GPU measured (forward_ms, backward_ms),
shared by FLOPs per token (napkin math in flops_per_token: the attention
over the whole window, masked as PyTorch computes it; the norms, embeddings
and GELU as elementwise work), and its backward hands back fixed gradients
(ones) -- views of one buffer, which autograd takes as they are (no copy)
when a parameter's .grad is None. What the host then does per clock is
the cluster's doing, not the model's.

The waits run on a Timeline, the device's clock as the proxy keeps it.
"""

import time

import torch
import torch.nn as nn


class Timeline:
    """The device's clock. run(ms) is one operation on the device: it ends
    `ms` (times `scale`) after the later of the last operation's end and
    now, and the caller waits until then, as a host thread waits for a
    kernel whose result it needs.

    A lag under `lead_ms` (a sleep's overshoot, Python's own work between
    two operations) is taken from the next operation instead of adding to
    it: a script's host thread runs that far ahead of the GPU, so such
    work hides behind queued kernels. A longer lag -- a forward waiting
    for its weights, a core taken by the servers -- delays the device, as
    a stream waiting on an event would be.

    Not thread-safe: the training loop's thread (the forward's and, for CPU
    tensors, autograd's backward).
    """

    def __init__(self, lead_ms=1.0):
        self.lead_s = lead_ms / 1e3
        self.scale = 1.0
        self.end = time.perf_counter()

    def run(self, ms):
        now = time.perf_counter()
        if now - self.end > self.lead_s:
            self.end = now
        self.end += self.scale * ms / 1e3
        delay = self.end - time.perf_counter()
        if delay > 0:
            time.sleep(delay)


class WeightCheck:
    """Whether each unit's forward reads the weights of its clock.

    The model starts from zeros and every gradient is ones, so under BSP
    the servers' Adam (no weight decay, a constant learning rate) moves
    each weight by lr / (1 + eps) a clock: clock c's weights are -c * lr to
    within rounding. A forward that read a parameter before its pull landed
    would see -(c - 1) * lr: it is counted (the first and last value of
    each parameter are read, two of its chunks), and the first few named.
    """

    def __init__(self, lr, examples=5):
        self.lr = lr
        self.clock = None  # the clock whose weights the forward must see
        self.reads = 0
        self.stale = 0
        self.examples = []
        self._keep = examples

    def expect(self, clock):
        self.clock = clock

    def see(self, name, tensor):
        if self.clock is None:
            return
        want = -self.clock * self.lr
        flat = tensor.detach().view(-1)
        for value in (float(flat[0]), float(flat[-1])):
            self.reads += 1
            if abs(value - want) > self.lr / 4:
                self.stale += 1
                if len(self.examples) < self._keep:
                    self.examples.append({"param": name, "clock": self.clock,
                                          "value": value, "expected": want})


class _OnDevice(torch.autograd.Function):
    """A unit's forward and backward as the device would run them: each
    waits for its share of the step; the backward gives the input's
    gradient through and the unit's fixed gradients (fresh views of the
    fixed buffer: autograd stores each as the parameter's .grad when that
    is None, or adds it into the .grad there -- pst.Optimizer's push buffer
    on the CPU)."""

    @staticmethod
    def forward(ctx, x, unit, *params):
        ctx.unit = unit
        if unit.check is not None:
            for name, p in zip(unit.param_names, params):
                unit.check.see(name, p)
        unit.device.run(unit.forward_ms)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        unit = ctx.unit
        unit.device.run(unit.backward_ms)
        return (grad, None) + tuple(g.detach() for g in unit.fixed_grads)


class _Unit(nn.Module):
    """A module whose forward runs on the device (_OnDevice) over the
    parameters it uses: its own and its children's (those of a child whose
    forward it does not call, as nn.MultiheadAttention uses out_proj's)."""

    def __init__(self):
        super().__init__()
        self.forward_ms = self.backward_ms = 0.0
        self.device = None       # the model's Timeline
        self.check = None        # the model's WeightCheck, or None
        self.fixed_grads = ()    # views of the model's fixed buffer
        self.param_names = ()    # the model's names of parameters()

    def flops_per_token(self, context):
        raise NotImplementedError

    def forward(self, x):
        return _OnDevice.apply(x, self, *self.parameters())


def _zeros(*shape):
    return nn.Parameter(torch.zeros(*shape))


class Embedding(_Unit):
    """nn.Embedding's weight; a row read and added per token."""

    def __init__(self, rows, width):
        super().__init__()
        self.weight = _zeros(rows, width)

    def flops_per_token(self, context):
        return self.weight.shape[1]


class LayerNorm(_Unit):
    """nn.LayerNorm's weight and bias; about 8 operations an element."""

    def __init__(self, width):
        super().__init__()
        self.weight = _zeros(width)
        self.bias = _zeros(width)

    def flops_per_token(self, context):
        return 8 * self.weight.shape[0]


class Linear(_Unit):
    """nn.Linear's weight and bias; `activation_flops` an output element
    after it (GELU's, for linear1)."""

    def __init__(self, inputs, outputs, activation_flops=0):
        super().__init__()
        self.weight = _zeros(outputs, inputs)
        self.bias = _zeros(outputs)
        self.activation_flops = activation_flops

    def flops_per_token(self, context):
        outputs, inputs = self.weight.shape
        return 2 * inputs * outputs + self.activation_flops * outputs


class _Projection(nn.Module):
    """nn.MultiheadAttention's out_proj: parameters its parent uses; its own
    forward never runs (a pre-hook on it never fires)."""

    def __init__(self, width):
        super().__init__()
        self.weight = _zeros(width, width)
        self.bias = _zeros(width)


class Attention(_Unit):
    """nn.MultiheadAttention's parameters (in_proj_weight, in_proj_bias,
    out_proj); the q, k, v and output projections and the attention over
    the whole window."""

    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.in_proj_weight = _zeros(3 * width, width)
        self.in_proj_bias = _zeros(3 * width)
        self.out_proj = _Projection(width)

    def flops_per_token(self, context):
        d = self.in_proj_weight.shape[1]
        # q, k, v; scores and the weighted sum over the window; out_proj; softmax
        return 2 * 3 * d * d + 2 * 2 * context * d + 2 * d * d + 5 * context * self.heads


class Block(nn.Module):
    """nn.TransformerEncoderLayer(norm_first=True)'s parameters, registered in
    its order (self_attn, linear1, linear2, norm1, norm2) and used in its
    forward's (norm1, self_attn, norm2, linear1, linear2)."""

    def __init__(self, width, heads):
        super().__init__()
        self.self_attn = Attention(width, heads)
        self.linear1 = Linear(width, 4 * width, activation_flops=8)
        self.linear2 = Linear(4 * width, width)
        self.norm1 = LayerNorm(width)
        self.norm2 = LayerNorm(width)

    def forward(self, x):
        x = self.self_attn(self.norm1(x))
        return self.linear2(self.linear1(self.norm2(x)))


class Encoder(nn.Module):
    """nn.TransformerEncoder's `layers`."""

    def __init__(self, width, heads, layers):
        super().__init__()
        self.layers = nn.ModuleList([Block(width, heads) for _ in range(layers)])

    def forward(self, x):
        for block in self.layers:
            x = block(x)
        return x


class GpuShapedTransformer(nn.Module):
    """ByteTransformer's parameters, forward order and backward order, on
    `device` (a Timeline): forward_ms and backward_ms are the whole step's,
    shared among the units by FLOPs per token. Every weight starts at zero;
    every gradient is one. The input is any [rows, 1] float tensor (the
    activations are placeholders: their size is not the point)."""

    def __init__(self, device, forward_ms, backward_ms, context=256, width=512, layers=6,
                 heads=8, vocab=256, check=None):
        super().__init__()
        self.tokens = Embedding(vocab, width)
        self.positions = Embedding(context, width)
        self.blocks = Encoder(width, heads, layers)
        self.norm = LayerNorm(width)
        self.head = Linear(width, vocab)
        units = [(name, m) for name, m in self.named_modules() if isinstance(m, _Unit)]
        flops = [m.flops_per_token(context) for _, m in units]
        numel = sum(p.numel() for p in self.parameters())
        # One buffer of ones holds every fixed gradient: 77 MB at this shape.
        self._fixed = torch.ones(numel)
        offset = 0
        for (name, unit), f in zip(units, flops):
            unit.device, unit.check = device, check
            unit.forward_ms = forward_ms * f / sum(flops)
            unit.backward_ms = backward_ms * f / sum(flops)
            views = []
            for p in unit.parameters():
                views.append(self._fixed[offset:offset + p.numel()].view(p.shape))
                offset += p.numel()
            unit.fixed_grads = tuple(views)
            unit.param_names = tuple("%s.%s" % (name, n) for n, _ in unit.named_parameters())
        if offset != numel:
            raise AssertionError("units use %d of %d values" % (offset, numel))

    def forward(self, x):
        h = self.positions(self.tokens(x))
        return self.head(self.norm(self.blocks(h)))
