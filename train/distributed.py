"""Data-parallel training with torch.distributed: what differs from one process.

Started by torchrun (WORLD_SIZE, RANK, LOCAL_RANK in the environment): NCCL on GPUs, gloo
on CPUs. Each rank takes its share of every batch; DistributedDataParallel averages the
gradients; contrastive objectives see every rank's embeddings as negatives.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def is_main() -> bool:
    if dist.is_available() and dist.is_initialized():
        return dist.get_rank() == 0
    return os.environ.get("RANK", "0") == "0"  # under torchrun before the group is joined


def check_device(device: str, setting: str = "train.device") -> None:
    """Refuse a CUDA device on a machine without one (before anything is loaded or written)."""
    if device.startswith("cuda") and not torch.cuda.is_available():
        from viewmill.train.encoder import EncoderError

        raise EncoderError(
            f"{setting} is '{device}' but this machine has no usable CUDA GPU (torch.cuda.is_available() is "
            f"False): set {setting}: cpu (or --set {setting}=cpu), or run on a GPU worker"
        )


def init_from_environment(device: str) -> str:
    """Join the process group torchrun describes; returns the device this rank uses."""
    check_device(device)
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or dist.is_initialized():
        return device
    cuda = device.startswith("cuda")
    dist.init_process_group(backend="nccl" if cuda else "gloo")
    if cuda:
        local = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local)
        return f"cuda:{local}"
    return device


def gather_with_local_grad(x: torch.Tensor) -> torch.Tensor:
    """Every rank's rows, concatenated in rank order; only this rank's rows carry gradients.

    Each rank then computes the loss over the global batch; scaling that loss by the world
    size before backward makes DDP's gradient average equal the single-process gradient.
    """
    if world_size() == 1:
        return x
    parts = [torch.empty_like(x) for _ in range(world_size())]
    dist.all_gather(parts, x.detach().contiguous())
    parts[rank()] = x
    return torch.cat(parts)


def shard(index: list[int]) -> list[int]:
    """This rank's share of a global batch (contiguous, so gathered rows keep batch order)."""
    size = len(index) // world_size()
    return index[rank() * size : (rank() + 1) * size]


def broadcast_flag(flag: bool) -> bool:
    """Rank 0's decision (e.g. stop early) on every rank."""
    if world_size() == 1:
        return flag
    tensor = torch.tensor([int(flag)])
    dist.broadcast(tensor, src=0)
    return bool(tensor.item())


def average_gradients(module: torch.nn.Module) -> None:
    """Average gradients over ranks by hand, for backward passes DDP did not see."""
    if world_size() == 1:
        return
    for parameter in module.parameters():
        if parameter.grad is not None:
            dist.all_reduce(parameter.grad)
            parameter.grad /= world_size()


def barrier() -> None:
    if world_size() > 1:
        dist.barrier()
