"""tests/python/jobs/fortune_external.pbtxt's training in one process: what
two pstrain.torch workers of examples/torch/fortune_topics.py must end with
under BSP (torch_sparse_test, torch_sparse_failure_test)."""

# What the job file says (the clocks are each test's).
BATCH_SIZE, SEED, LR, DIM = 64, 42, 0.01, 16
TORCH_SEED = 0


def train_like_one_process(clocks, workers=2, skip=()):
    """The job's training in this process: each clock's gradient over the
    workers' shares (each share's mean loss weighted by its size),
    SparseAdam on an nn.EmbeddingBag(sparse=True), the servers' Adam on the
    linear layer; the clocks in `skip` make no update at all (every push of
    theirs skipped by the servers' finiteness rule). Returns {"fc.weight",
    "fc.bias", "ids", "rows"}."""
    import torch
    import torch.nn.functional as F

    import fortune_topics as ft
    import pstrain.torch as pst
    from server_adam import ServerAdam

    torch.set_num_threads(1)
    train, test = ft.FortuneTopics(train=True), ft.FortuneTopics(train=False)
    vocab = ft.Vocabulary(train, test)
    bag = vocab.embedding_bag(DIM, SEED)
    torch.manual_seed(TORCH_SEED)
    model = ft.FastText(bag, DIM, len(ft.CATEGORIES))
    dense = ServerAdam(model.fc.parameters(), lr=LR)
    sparse = torch.optim.SparseAdam(model.bag.parameters(), lr=LR)
    for clock in range(clocks):
        if clock in skip:
            continue
        dense.zero_grad()
        sparse.zero_grad()
        for share_index in range(workers):
            indices = pst.batch_indices(clock, seed=SEED, train_size=len(train),
                                        batch_size=BATCH_SIZE, share_index=share_index,
                                        num_shares=workers)
            ids, offsets, y = ft.collate([train[i] for i in indices])
            loss = F.cross_entropy(model(vocab(ids), offsets), y)
            (loss * len(indices) / BATCH_SIZE).backward()
        dense.step()
        sparse.step()
    return {"fc.weight": model.fc.weight.detach(), "fc.bias": model.fc.bias.detach(),
            "ids": vocab.ids, "rows": model.bag.weight.detach()}


def relative_error(a, b):
    """max |a - b| / max |b|."""
    return float((a - b).abs().max() / b.abs().max())
