"""A small regression network on scikit-learn's diabetes data, trained with Horovod + PyTorch.

Every rank trains on its own shard of the training rows; DistributedOptimizer averages the
gradients, so all ranks hold the same model. Reads ``$DATA_URI/diabetes.csv`` (written by
prepare_data.py) and rank 0 saves ``$OUTPUT_URI/model.pt``. Both URIs may be file:// or s3://.

Prints, per rank, one line per epoch and one after testing (ci-runner's metrics parse these):
    Training. Epoch N, MSE loss: X, Worker: R
    Testing. MSE loss: X, Worker: R
"""

from __future__ import annotations

import io
import os
import sys

import horovod.torch as hvd
import numpy as np
import torch
from torch import nn

from uri_io import join, read_bytes, write_bytes

DATA_FILE = "diabetes.csv"
MODEL_FILE = "model.pt"
SEED = 42


def load_table(data_uri: str) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Features, targets and feature names from the CSV under ``data_uri``."""
    raw = read_bytes(join(data_uri, DATA_FILE)).decode()
    header, _, body = raw.partition("\n")
    table = np.loadtxt(io.StringIO(body), delimiter=",", ndmin=2)
    names = header.strip().split(",")[:-1]
    return table[:, :-1], table[:, -1], names


def split(n: int, test_fraction: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
    """The same train/test row indices on every rank."""
    order = np.random.default_rng(SEED).permutation(n)
    n_test = int(round(n * test_fraction))
    return order[n_test:], order[:n_test]


def shard(indices: np.ndarray, rank: int, size: int) -> np.ndarray:
    """This rank's rows; every shard has the same length so all ranks take the same steps."""
    per_rank = len(indices) // size
    return indices[rank * per_rank : (rank + 1) * per_rank]


def build_model(n_features: int, target_mean: float) -> nn.Module:
    model = nn.Sequential(nn.Linear(n_features, 32), nn.ReLU(), nn.Linear(32, 1))
    with torch.no_grad():
        model[2].bias.fill_(target_mean)  # start at the mean: the first epoch is not all bias
    return model


def main() -> int:
    data_uri = os.environ.get("DATA_URI")
    output_uri = os.environ.get("OUTPUT_URI")
    if not data_uri or not output_uri:
        print("DATA_URI and OUTPUT_URI must be set (ci-runner sets them)", file=sys.stderr)
        return 2
    epochs = int(os.environ.get("EPOCHS", "20"))
    batch_size = int(os.environ.get("BATCH_SIZE", "16"))

    hvd.init()
    torch.manual_seed(SEED)
    torch.set_num_threads(1)  # the ranks already use the cores; more threads only contend
    rank, size = hvd.rank(), hvd.size()

    features, targets, names = load_table(data_uri)
    train_rows, test_rows = split(len(targets))
    mean = features[train_rows].mean(axis=0)
    std = features[train_rows].std(axis=0) + 1e-8
    x = torch.tensor((features - mean) / std, dtype=torch.float32)
    y = torch.tensor(targets, dtype=torch.float32).unsqueeze(1)
    mine = torch.from_numpy(shard(train_rows, rank, size))

    model = build_model(x.shape[1], float(targets[train_rows].mean()))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.02 * size)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    # Every rank starts from rank 0's weights and optimizer state.
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    hvd.broadcast_optimizer_state(optimizer, root_rank=0)
    loss_fn = nn.MSELoss()

    generator = torch.Generator().manual_seed(SEED + rank)
    for epoch in range(epochs):
        model.train()
        order = mine[torch.randperm(len(mine), generator=generator)]
        total, count = 0.0, 0
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            optimizer.zero_grad()
            loss = loss_fn(model(x[batch]), y[batch])
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch)
            count += len(batch)
        print(f"Training. Epoch {epoch}, MSE loss: {total / count}, Worker: {rank}", flush=True)

    model.eval()
    test_part = torch.from_numpy(shard(test_rows, rank, size))
    with torch.no_grad():
        local = loss_fn(model(x[test_part]), y[test_part])
    test_loss = hvd.allreduce(local, name="test_loss").item()  # the mean over all ranks' shards
    print(f"Testing. MSE loss: {test_loss}, Worker: {rank}", flush=True)

    if rank == 0:
        buffer = io.BytesIO()
        torch.save(
            {
                "state_dict": model.state_dict(),
                "feature_names": names,
                "feature_mean": mean.tolist(),
                "feature_std": std.tolist(),
                "test_mse": test_loss,
            },
            buffer,
        )
        target = join(output_uri, MODEL_FILE)
        write_bytes(target, buffer.getvalue())
        print(f"Saved the model to {target}", flush=True)
    hvd.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
