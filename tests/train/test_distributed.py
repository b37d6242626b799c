"""Data parallelism on two CPU processes (gloo), as torchrun runs it."""

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from viewmill.train.objectives import Contrastive
from viewmill.train.optimisation import train_step

from tests.conftest import REPO, SENTENCES
from tests.train.test_bsl import TinyEncoder, _batch
from tests.train.two_ranks import leave_group


def _contrastive(kind):
    torch.manual_seed(0)
    model = Contrastive(TinyEncoder(), loss=kind, temperature=0.1)
    model.eval()  # no dropout: both runs see the same function
    return model


def _rows(batch, rows):
    return {k: v[rows] for k, v in batch.items()}


def _rank_gradients(rank, world, init_file, kind, out, pieces=1):
    dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    model = _contrastive(kind)
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    batch, n = _batch(n=8, length=6), 8
    share = n // world
    a_rows = list(range(rank * share, (rank + 1) * share))
    local = _rows(batch, a_rows + [n + i for i in a_rows])  # this rank's pairs, views a then b
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    loss = train_step(ddp, optimizer, local, share, train_encoder=True, accumulation=pieces, cached_gradients=True)
    if rank == 0:
        torch.save({"loss": loss, "grads": [p.grad for p in model.parameters()]}, out)
    leave_group()


@pytest.mark.parametrize(("kind", "pieces"), [("ntxent", 1), ("infonce", 1), ("ntxent", 2)])
def test_two_ranks_with_gathered_negatives_give_the_single_process_gradient(tmp_path, kind, pieces):
    out = tmp_path / "rank0.pt"
    mp.spawn(_rank_gradients, args=(2, str(tmp_path / "init"), kind, str(out), pieces), nprocs=2, join=True)
    distributed = torch.load(out, weights_only=False)

    model = _contrastive(kind)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    loss = train_step(model, optimizer, _batch(n=8, length=6), 8, train_encoder=True, cached_gradients=True)
    assert distributed["loss"] == pytest.approx(loss, rel=1e-5), "every rank computes the global batch's loss"
    for got, want in zip(distributed["grads"], [p.grad for p in model.parameters()], strict=True):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-6)


@pytest.mark.slow
def test_torchrun_trains_and_rank_0_exports(tmp_path, tiny_model):
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, {str(REPO)!r})
        from tests.conftest import SENTENCES
        from viewmill.train.config import TrainConfig
        from viewmill.train.loop import train_model
        pairs = [(s, s.lower()) for s in SENTENCES]
        config = TrainConfig(objective="ntxent", steps=3, batch_size=8, encoder_lr=1e-3)
        report = train_model(pairs, {str(tiny_model)!r}, config, Path({str(tmp_path / "model")!r}), card={{}})
        import os
        os.write(1, f"rank done {{report.steps}}\\n".encode())  # one write: the two ranks' lines never interleave
    """)
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.count("rank done 3") == 2
    from sentence_transformers import SentenceTransformer

    vectors = SentenceTransformer(str(tmp_path / "model")).encode(SENTENCES[:2])
    assert vectors.shape[0] == 2 and not (tmp_path / "model.checkpoint").exists()
