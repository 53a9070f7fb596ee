"""The hyperparameters a script sets on the Optimizer's param group, for
the servers: the fields it has changed from the job's values go with each
clock's pushes (pst_set_hyper), as the script's from then on."""

import ctypes
import json

from .. import _capi
from ._optim_layout import hyper_fields


def _float32(x):
    """x as the servers hold it (a float32)."""
    return ctypes.c_float(x).value


class ScriptHyperparameters:
    """What of the param group the library has been given.

    Args:
      defaults: the group's defaults, the job's values (job_hyperparameters).
    """

    def __init__(self, defaults):
        self._keys = list(defaults)
        self._job = hyper_fields(defaults, defaults)  # the job's own values
        self._owned = set()  # fields the script has changed
        self._sent = None    # the JSON last given to the library
        self._seen = None    # the group's values it was made from

    def send(self, group, handle):
        """Gives the library (worker `handle`) the fields of `group` the
        script has changed, when they differ from what it was given.

        Raises:
          PstrainError: the library refused them (its subclass names why).
        """
        values = tuple(group[key] for key in self._keys)
        if values == self._seen:  # (nothing changed since the last clock)
            return
        self._seen = values
        fields = hyper_fields(group, self._keys)
        self._owned.update(f for f, v in fields.items()
                           if _float32(v) != _float32(self._job[f]))
        text = json.dumps({f: fields[f] for f in sorted(self._owned)})
        if text != self._sent:
            _capi.call("pst_set_hyper", handle, text.encode())
            self._sent = text
