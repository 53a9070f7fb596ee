"""The job's optimizer in torch.optim's terms: its hyperparameters under
torch's names (a param group's defaults, and the fields a script's changes
are sent as) and its state's layout per optimizer type (state_dict and
load_state_dict).
"""

import torch

# Each optimizer type's hyperparameters: torch.optim's name in param_groups
# -> the job's OptimizerSpec fields (betas are beta1 and beta2; RMSprop's
# alpha is the job's rho).
_KEYS = {
    "SGD": ("lr", "weight_decay"),
    "MOMENTUM": ("lr", "momentum", "weight_decay"),
    "NESTEROV": ("lr", "momentum", "weight_decay"),
    "ADAM": ("lr", "betas", "eps", "weight_decay"),
    "ADAMW": ("lr", "betas", "eps", "weight_decay"),
    "ADAGRAD": ("lr", "eps", "weight_decay"),
    "RMSPROP": ("lr", "alpha", "eps", "weight_decay"),
    "ADADELTA": ("lr", "rho", "eps", "weight_decay"),
    "ADAFACTOR": ("lr", "eps", "weight_decay", "decay_rate", "clip_threshold"),
    "LION": ("lr", "betas", "weight_decay"),
}
_FIELDS = {"lr": ("learning_rate",), "betas": ("beta1", "beta2"), "eps": ("epsilon",),
           "weight_decay": ("weight_decay",), "momentum": ("momentum",), "alpha": ("rho",),
           "rho": ("rho",), "decay_rate": ("decay_rate",), "clip_threshold": ("clip_threshold",)}


def job_hyperparameters(spec):
    """The param_groups defaults of the job's optimizer (a JobSpec's
    `optimizer` as a dict of its proto field names): torch.optim's names,
    the job's values."""
    keys = _KEYS.get(spec.get("type", "ADAM"), _KEYS["ADAM"])
    defaults = {}
    for key in keys:
        values = tuple(float(spec.get(f, 0.0)) for f in _FIELDS[key])
        defaults[key] = values if key == "betas" else values[0]
    return defaults


def hyper_fields(group, keys):
    """{OptimizerSpec field: value} of `keys` in `group`."""
    fields = {}
    for key in keys:
        values = group[key] if key == "betas" else (group[key],)
        fields.update(zip(_FIELDS[key], (float(v) for v in values)))
    return fields


# Each optimizer type's state in torch.optim's layout: the names of the
# servers' state arrays in their order (server/optimizers/*.h), whether
# torch keeps a 'step', and the group keys torch's optimizer of the same
# kind needs besides the hyperparameters.
TORCH_STATE = {
    "SGD": ((), False, {"momentum": 0.0, "dampening": 0.0, "nesterov": False}),
    "MOMENTUM": (("momentum_buffer",), False, {"dampening": 0.0, "nesterov": False}),
    "NESTEROV": (("momentum_buffer",), False, {"dampening": 0.0, "nesterov": True}),
    "ADAM": (("exp_avg", "exp_avg_sq"), True, {"amsgrad": False}),
    "ADAMW": (("exp_avg", "exp_avg_sq"), True, {"amsgrad": False}),
    "ADAGRAD": (("sum",), True, {"lr_decay": 0.0, "initial_accumulator_value": 0.0}),
    "RMSPROP": (("square_avg",), True, {"momentum": 0.0, "centered": False}),
    "ADADELTA": (("square_avg", "acc_delta"), True, {}),
}

def loaded_entry(entry, names, with_step, param, name):
    """(steps, [float32 CPU tensors]) of one parameter's torch state entry
    with state arrays `names`, or None for a parameter without state."""
    if not entry:
        return None
    missing = [n for n in names if n not in entry]
    if missing:
        raise ValueError("pstrain.torch.Optimizer.load_state_dict(): the state of '%s' has no %s"
                         % (name, ", ".join(missing)))
    arrays = [entry[n].detach().to(device="cpu", dtype=torch.float32).contiguous() for n in names]
    for n, array in zip(names, arrays):
        if array.shape != param.shape:
            raise ValueError("pstrain.torch.Optimizer.load_state_dict(): '%s' of '%s' has shape "
                             "%s, the parameter %s" % (n, name, list(array.shape),
                                                        list(param.shape)))
    return int(float(entry.get("step", 0))) if with_step else 0, arrays
