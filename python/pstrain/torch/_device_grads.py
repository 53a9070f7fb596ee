"""Gradients of parameters on a CUDA device, on their way to the library's
host buffers while backward goes on.

A CPU parameter's .grad is the library's push buffer itself, so its
gradient may leave for the servers the moment backward completes it. A
CUDA parameter's cannot be: it must be copied to the host first. Done at
step(), that copy and every push wait for the whole backward, and the
servers' update for all of them. Here each CUDA gradient is copied the
moment backward completes it -- on a copy stream of its own, into
page-locked memory, ordered after the kernels that made it by an event --
and a thread of its own waits for the copy to land, moves it into the
library's buffer and tells the library it may leave (pst_grads_ready). So
the copies, the pushes and the servers' update of the last layers overlap
the backward of the first.
"""

import queue
import threading

import torch


class DeviceGradients:
    """Copies CUDA parameters' gradients out as backward completes them.

    Args:
      params: the Optimizer's parameters (only the CUDA ones are handled).
      ready: ready(i) tells the library parameter i's gradient is complete
        in its buffer; called from this object's thread, never at the same
        time as another library call of the Optimizer's (see drain()).
    """

    def __init__(self, params, ready):
        self._ready = ready
        self._pinned = {i: torch.empty(p.shape, dtype=torch.float32, device="cpu",
                                       pin_memory=True)
                        for i, p in enumerate(params) if p.device.type == "cuda"}
        self._streams = {}  # device -> its copy stream
        self._pending = queue.Queue()
        self._error = None
        self._thread = None

    def handles(self, i):
        """Whether parameter i's gradient goes through here."""
        return i in self._pinned

    def send(self, i, grad, buffer):
        """Copies `grad` (parameter i's complete gradient, on its device) to
        pinned memory behind the kernels queued so far, and hands it to the
        library thread, which moves it into `buffer` (the library's host
        buffer) and calls ready(i). Returns at once. The gradient must not
        change until drain() returns."""
        device = grad.device
        stream = self._streams.get(device)
        if stream is None:
            stream = self._streams[device] = torch.cuda.Stream(device)
        made = torch.cuda.current_stream(device).record_event()
        with torch.cuda.stream(stream):
            stream.wait_event(made)
            self._pinned[i].copy_(grad, non_blocking=True)
            landed = stream.record_event()
        grad.record_stream(stream)  # its memory is not reused before the copy
        if self._thread is None:
            self._thread = threading.Thread(target=self._deliver, name="pstrain-grads",
                                            daemon=True)
            self._thread.start()
        self._pending.put((i, landed, buffer))

    def drain(self):
        """Waits until every gradient sent has been handed to the library.

        Raises:
          The first error the library thread met this clock (once one
          failed, the later ones were not handed over); again at every
          call until reset().
        """
        self._pending.join()
        if self._error is not None:
            raise self._error

    def reset(self):
        """Waits for the copies under way and forgets their errors: for a
        new clock, or the worker's end."""
        self._pending.join()
        self._error = None

    def _deliver(self):
        while True:
            i, landed, buffer = self._pending.get()
            try:
                if self._error is None:
                    landed.synchronize()
                    buffer.copy_(self._pinned[i])
                    self._ready(i)
            except Exception as e:  # noqa: BLE001 -- raised again by drain()
                self._error = e
            finally:
                self._pending.task_done()
