"""main_with_horovod.py with PyTorch's DistributedDataParallel instead of Horovod, started by
torchrun (train-ddp.yaml: ``distributed: torchrun``): no Horovod and no MPI, only torch.

The same data, the same network, the same lines and the same model file: every rank trains on
its own shard of the training rows; DDP averages the gradients, so all ranks hold the same model.
Reads ``$DATA_URI/diabetes.csv`` (written by prepare_data.py) and rank 0 saves
``$OUTPUT_URI/model.pt``. Both URIs may be file:// or s3://. The ranks talk over gloo on the CPU,
over NCCL when there is a GPU (rank r uses GPU ``$LOCAL_RANK`` of its node).

Prints, per rank, one line per epoch and one after testing (ci-runner's metrics parse these):
    Training. Epoch N, MSE loss: X, Worker: R
    Testing. MSE loss: X, Worker: R
"""

from __future__ import annotations

import io
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

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


def init_distributed() -> torch.device:
    """Join the job's process group (torchrun's RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT);
    the device this rank computes on."""
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
        dist.init_process_group(backend="nccl")
        return device
    dist.init_process_group(backend="gloo")
    return torch.device("cpu")


def mean_over_ranks(value: torch.Tensor) -> float:
    """``value`` averaged over every rank (gloo has no AVG: a sum, divided)."""
    total = value.detach().clone()
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    return total.item() / dist.get_world_size()


def main() -> int:
    data_uri = os.environ.get("DATA_URI")
    output_uri = os.environ.get("OUTPUT_URI")
    if not data_uri or not output_uri:
        print("DATA_URI and OUTPUT_URI must be set (ci-runner sets them)", file=sys.stderr)
        return 2
    epochs = int(os.environ.get("EPOCHS", "20"))
    batch_size = int(os.environ.get("BATCH_SIZE", "16"))

    device = init_distributed()
    torch.manual_seed(SEED)
    torch.set_num_threads(1)  # the ranks already use the cores; more threads only contend
    rank, size = dist.get_rank(), dist.get_world_size()

    features, targets, names = load_table(data_uri)
    train_rows, test_rows = split(len(targets))
    mean = features[train_rows].mean(axis=0)
    std = features[train_rows].std(axis=0) + 1e-8
    x = torch.tensor((features - mean) / std, dtype=torch.float32, device=device)
    y = torch.tensor(targets, dtype=torch.float32, device=device).unsqueeze(1)
    mine = torch.from_numpy(shard(train_rows, rank, size))

    # DDP starts every rank from rank 0's weights (it broadcasts them) and averages the
    # gradients in backward(); the optimizer is a plain one on each rank.
    model = build_model(x.shape[1], float(targets[train_rows].mean())).to(device)
    gpu = [device.index] if device.type == "cuda" else None
    ddp = DistributedDataParallel(model, device_ids=gpu)
    optimizer = torch.optim.Adam(ddp.parameters(), lr=0.02 * size)
    loss_fn = nn.MSELoss()

    generator = torch.Generator().manual_seed(SEED + rank)
    for epoch in range(epochs):
        ddp.train()
        order = mine[torch.randperm(len(mine), generator=generator)]
        total, count = 0.0, 0
        for start in range(0, len(order), batch_size):
            batch = order[start : start + batch_size]
            optimizer.zero_grad()
            loss = loss_fn(ddp(x[batch]), y[batch])
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch)
            count += len(batch)
        print(f"Training. Epoch {epoch}, MSE loss: {total / count}, Worker: {rank}", flush=True)

    model.eval()
    test_part = torch.from_numpy(shard(test_rows, rank, size))
    with torch.no_grad():
        local = loss_fn(model(x[test_part]), y[test_part])
    test_loss = mean_over_ranks(local)  # the mean over all ranks' shards
    print(f"Testing. MSE loss: {test_loss}, Worker: {rank}", flush=True)

    if rank == 0:
        buffer = io.BytesIO()
        torch.save(
            {
                # The unwrapped model's weights: the same keys as main_with_horovod.py's.
                "state_dict": {k: v.cpu() for k, v in model.state_dict().items()},
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
    # Every rank leaves together: a rank that tears gloo down while rank 0 still writes the model
    # was once seen to die of SIGABRT at its exit (bench 6, 2026-12-05).
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
