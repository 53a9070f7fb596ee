"""pst.report: what a clock achieved -- its loss and, optionally, its
predictions -- for the worker's Status and the scheduler's progress lines,
kept apart from the optimizer (whose step() takes torch.optim's closure).
"""

from . import _worker


def report(loss=None, correct=0, predicted=0):
    """Records the clock's loss and accuracy counts for Status; call it in
    the body of a batches() loop, before opt.step(). The last call of a
    clock counts; a clock without one shows the closure's loss, if any.

    Args:
      loss: the clock's loss (a tensor or a number).
      correct: predictions that were right.
      predicted: predictions made.

    Raises:
      RuntimeError: no clock is under way (outside a batches() loop, or
        before init()).
    """
    worker = _worker.registered("report")
    worker.optimizer.record(None if loss is None else float(loss), int(correct), int(predicted))
