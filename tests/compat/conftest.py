"""The ports run their programs' CPU configuration, also on a machine with a GPU.

Each port runs a public PyTorch program with its imports changed, sized for a CPU and compared
with PyTorch on the CPU. The programs pick ``cuda`` when ``torch.cuda.is_available()``, and
with it their GPU configuration (600 DQN episodes, 512-pixel style transfer, CUDA memory
statistics): on the first GPU machine these tests ran on, those paths timed out or called APIs
the comparison never meant to cover. So every port that is not marked ``gpu`` sees no CUDA
device, in ferro and in PyTorch alike; the GPU paths have tests of their own (``-m gpu``).
"""

import importlib.util

import pytest

import ferro


@pytest.fixture(autouse=True)
def _cpu_configuration(request, monkeypatch):
    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.setattr(ferro.cuda, "is_available", lambda: False)
        if importlib.util.find_spec("torch") is not None:  # the oracle, imported by the tests
            import torch

            monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    yield
