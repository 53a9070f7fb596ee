"""Adam as pstrain's servers compute it, rounding for rounding, in PyTorch."""

import torch


def _f32(x):
    """x rounded to the nearest float32 (as C++'s static_cast<float>)."""
    return float(torch.tensor(x, dtype=torch.float32))


class ServerAdam(torch.optim.Optimizer):
    """server/optimizers/adam.cc without weight decay: float32 throughout,
    each product and sum rounded on its own (the servers build without fused
    multiply-add), the bias corrections computed in double:

        m = b1 m + (1 - b1) g;  v = b2 v + ((1 - b2) g) g
        w -= lr (m c1) / (sqrt(v c2) + eps);  c1 = 1 / (1 - b1^t), c2 = 1 / (1 - b2^t)

    torch.optim.Adam computes the same update in another order, so its
    weights differ in the last bits after one step.
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps))

    @torch.no_grad()
    def step(self):
        for group in self.param_groups:
            lr, eps = _f32(group["lr"]), _f32(group["eps"])
            b1, b2 = (_f32(b) for b in group["betas"])
            for p in group["params"]:
                if p.grad is not None:
                    self._update(p, lr, b1, b2, eps)

    def _update(self, p, lr, b1, b2, eps):
        state = self.state[p]
        if not state:
            state.update(t=0, m=torch.zeros_like(p), v=torch.zeros_like(p))
        state["t"] += 1
        m, v, g, t = state["m"], state["v"], p.grad, state["t"]
        c1, c2 = _f32(1 / (1 - b1 ** t)), _f32(1 / (1 - b2 ** t))
        # (1 - b1 and 1 - b2 are exact in float32.)
        m.copy_(m * b1 + g * (1 - b1))
        v.copy_(v * b2 + g * (1 - b2) * g)
        p.sub_(m * c1 * lr / ((v * c2).sqrt() + eps))
