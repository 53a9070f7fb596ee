"""pstrain's Python front end.

`pstrain.torch` makes a PyTorch training script a pstrain worker: the servers
hold the weights and the optimizer, the scheduler gates the clocks.
"""

__version__ = "0.48.0"
