# ruff: noqa: E501  (the ported DDP tutorial keeps its upstream line lengths)
"""Real multi-process tests: ``mpiexec -n 2`` and ``-n 3`` (uneven splits) run every case of
``mpi_cases.py`` once per world size; each case is reported as its own test here.

They need the ``[mpi]`` extra (mpi4py and the mpich wheel, which ships ``mpiexec``); without it
they skip and say so. Every run is bounded: a hang fails the test instead of the suite.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ferro.distributed import is_available
from ferro.distributed.run import find_mpiexec

HERE = Path(__file__).parent
SCRIPT = HERE / "mpi_cases.py"


def _case_names() -> list[str]:
    tree = ast.parse(SCRIPT.read_text())
    return [
        f.name
        for f in tree.body
        if isinstance(f, ast.FunctionDef)
        and any(getattr(d, "id", None) == "case" for d in f.decorator_list)
    ]


CASES = _case_names()
pytestmark = pytest.mark.skipif(
    not (is_available() and find_mpiexec()),
    reason="the [mpi] extra (mpi4py + mpich) is not installed",
)


def _run(n: int) -> dict:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    proc = subprocess.run(
        [find_mpiexec(), "-n", str(n), sys.executable, str(SCRIPT)],
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            res = json.loads(line)
            results[res["case"]] = res
    if not results:
        pytest.fail(
            f"mpiexec -n {n} reported nothing (rc {proc.returncode}):\n{proc.stderr[-3000:]}"
        )
    return results


@pytest.fixture(scope="module")
def runs():
    cache = {}

    def get(n):
        if n not in cache:
            cache[n] = _run(n)
        return cache[n]

    return get


@pytest.mark.parametrize("n", [2, 3])
@pytest.mark.parametrize("name", CASES)
def test_case(runs, n, name):
    res = runs(n).get(name)
    assert res is not None, f"case {name} did not report under mpiexec -n {n}"
    assert res["ok"], "\n".join(f"rank {r}:\n{e}" for r, e in res["error"].items())


def test_digits_demo_distributed(tmp_path):
    """The README's data-parallel demo, short: two ranks train, rank 0 alone prints and plots."""
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    plot = tmp_path / "curves.png"
    cmd = [find_mpiexec(), "-n", "2", sys.executable, "-P", "-m", "ferro.examples.digits"]
    args = ["--distributed", "--quiet", "--epochs", "4", "--plot", str(plot)]
    proc = subprocess.run(
        cmd + args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("test accuracy")]
    assert len(lines) == 1, proc.stdout  # rank 0 only
    assert "on 2 ranks" in lines[0] and float(lines[0].split()[2]) > 0.9
    assert plot.exists()


# pytorch/examples' distributed/ddp-tutorial-series/multigpu_torchrun.py and datautils.py, with
# the imports changed, "nccl" -> "mpi", and the CPU for the GPU (.to("cpu"), device_ids=None).
DDP_TUTORIAL_DATA = """\
import ferro as torch
from ferro.utils.data import Dataset

class MyTrainDataset(Dataset):
    def __init__(self, size):
        self.size = size
        self.data = [(torch.rand(20), torch.rand(1)) for _ in range(size)]

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        return self.data[index]
"""

DDP_TUTORIAL = """\
import ferro as torch
from ferro.utils.data import Dataset, DataLoader
from datautils import MyTrainDataset

import ferro.multiprocessing as mp
from ferro.utils.data.distributed import DistributedSampler
from ferro.nn.parallel import DistributedDataParallel as DDP
from ferro.distributed import init_process_group, destroy_process_group
import os


def ddp_setup():
    init_process_group(backend="mpi")

class Trainer:
    def __init__(
        self,
        model: torch.nn.Module,
        train_data: DataLoader,
        optimizer: torch.optim.Optimizer,
        save_every: int,
        snapshot_path: str,
    ) -> None:
        self.gpu_id = int(os.environ["LOCAL_RANK"])
        self.model = model.to("cpu")
        self.train_data = train_data
        self.optimizer = optimizer
        self.save_every = save_every
        self.epochs_run = 0
        if os.path.exists(snapshot_path):
            print("Loading snapshot")
            self._load_snapshot(snapshot_path)

        self.model = DDP(self.model, device_ids=None)

    def _load_snapshot(self, snapshot_path):
        snapshot = torch.load(snapshot_path)
        self.model.load_state_dict(snapshot["MODEL_STATE"])
        self.epochs_run = snapshot["EPOCHS_RUN"]
        print(f"Resuming training from snapshot at Epoch {self.epochs_run}")

    def _run_batch(self, source, targets):
        self.optimizer.zero_grad()
        output = self.model(source)
        loss = torch.nn.CrossEntropyLoss()(output, targets)
        loss.backward()
        self.optimizer.step()

    def _run_epoch(self, epoch):
        b_sz = len(next(iter(self.train_data))[0])
        print(f"[GPU{self.gpu_id}] Epoch {epoch} | Batchsize: {b_sz} | Steps: {len(self.train_data)}")
        for source, targets in self.train_data:
            source = source.to("cpu")
            targets = targets.to("cpu")
            self._run_batch(source, targets)

    def _save_snapshot(self, epoch):
        snapshot = {}
        snapshot["MODEL_STATE"] = self.model.module.state_dict()
        snapshot["EPOCHS_RUN"] = epoch
        torch.save(snapshot, "snapshot.pt")
        print(f"Epoch {epoch} | Training snapshot saved at snapshot.pt")

    def train(self, max_epochs: int):
        for epoch in range(self.epochs_run, max_epochs):
            self._run_epoch(epoch)
            if self.gpu_id == 0 and epoch % self.save_every == 0:
                self._save_snapshot(epoch)


def load_train_objs():
    train_set = MyTrainDataset(2048)  # load your dataset
    model = torch.nn.Linear(20, 1)  # load your model
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    return train_set, model, optimizer


def prepare_dataloader(dataset: Dataset, batch_size: int):
    return DataLoader(
        dataset,
        batch_size=batch_size,
        pin_memory=True,
        shuffle=False,
        sampler=DistributedSampler(dataset)
    )


def main(save_every: int, total_epochs: int, batch_size: int, snapshot_path: str = "snapshot.pt"):
    ddp_setup()
    dataset, model, optimizer = load_train_objs()
    train_data = prepare_dataloader(dataset, batch_size)
    trainer = Trainer(model, train_data, optimizer, save_every, snapshot_path)
    trainer.train(total_epochs)
    destroy_process_group()


if __name__ == "__main__":
    import argparse
    parser = argparse.ArgumentParser(description='simple distributed training job')
    parser.add_argument('total_epochs', type=int, help='Total epochs to train the model')
    parser.add_argument('save_every', type=int, help='How often to save a snapshot')
    parser.add_argument('--batch_size', default=32, help='Input batch size on each device (default: 32)')
    args = parser.parse_args()

    main(args.save_every, args.total_epochs, args.batch_size)
"""


def test_ddp_tutorial_program_trains_saves_and_resumes(tmp_path):
    """The DDP tutorial's torchrun program under mpiexec: LOCAL_RANK from init_process_group,
    rank 0's snapshot every epoch, and a second launch resuming from it."""
    (tmp_path / "datautils.py").write_text(DDP_TUTORIAL_DATA)
    (tmp_path / "multigpu_torchrun.py").write_text(DDP_TUTORIAL)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(tmp_path), env.get("PYTHONPATH")]))
    outs = []
    for epochs in (2, 3):
        cmd = [find_mpiexec(), "-n", "2", sys.executable, "multigpu_torchrun.py", str(epochs), "1"]
        proc = subprocess.run(
            cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        outs.append(proc.stdout)
    first, second = outs
    assert "[GPU0] Epoch 1 | Batchsize: 32 | Steps: 32" in first
    assert "[GPU1] Epoch 1 | Batchsize: 32 | Steps: 32" in first
    assert first.count("Training snapshot saved") == 2  # rank 0 only, each epoch
    assert "Resuming training from snapshot at Epoch 1" in second
    assert "[GPU1] Epoch 2" in second and "Epoch 0 |" not in second
