"""pytorch/examples mnist_hogwild: ``model.share_memory()`` and ``num_processes`` processes
started by ``torch.multiprocessing`` with the ``spawn`` method (main.py's
``mp.set_start_method('spawn', force=True)``), each running train.py's ``train`` on the one
shared model with its own SGD, then the parent testing the model the children trained. The
program is hogwild_program.py (imports changed only; ``test_epoch`` returns its figures); MNIST
is scikit-learn's 8x8 digits upscaled and padded to 28x28, as in test_mnist_cnn_port.py.

Hogwild updates race by design, so there is no step-by-step comparison with PyTorch: the test
checks that the children's training reaches the parent's model (it would not if the model were
copied into each child) and that the shared model learns."""

import types

import numpy as np
import pytest

sklearn_datasets = pytest.importorskip("sklearn.datasets")


def _digits(n_train=128, n_test=64):
    digits = sklearn_datasets.load_digits()
    x = (digits.images / 16.0).astype(np.float32)
    x = np.pad(np.kron(x, np.ones((3, 3), np.float32)), ((0, 0), (2, 2), (2, 2)))[:, None]
    x = (x - 0.1307) / 0.3081
    y = digits.target.astype(np.int64)
    return x[:n_train], y[:n_train], x[-n_test:], y[-n_test:]


def test_hogwild_processes_train_the_shared_model():
    from hogwild_program import Net, test, train

    import ferro as torch
    import ferro.multiprocessing as mp
    from ferro.utils.data import TensorDataset

    x_train, y_train, x_test, y_test = _digits()
    dataset1 = TensorDataset(torch.from_numpy(x_train), torch.from_numpy(y_train))
    dataset2 = TensorDataset(torch.from_numpy(x_test), torch.from_numpy(y_test))
    args = types.SimpleNamespace(
        seed=1, lr=0.1, momentum=0.5, epochs=3, log_interval=10, dry_run=False, num_processes=2
    )
    device = torch.device("cpu")
    kwargs = {"batch_size": 32, "shuffle": True}

    torch.manual_seed(args.seed)
    ctx = mp.get_context("spawn")  # main.py: mp.set_start_method('spawn', force=True)

    model = Net().to(device)
    model.share_memory()  # gradients are allocated lazily, so they are not shared here
    assert all(p.is_shared() for p in model.parameters())
    before = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
    loss_before, _ = test(args, model, device, dataset2, kwargs)

    processes = []
    for rank in range(args.num_processes):
        p = ctx.Process(target=train, args=(rank, args, model, device, dataset1, kwargs))
        p.start()
        processes.append(p)
    for p in processes:
        p.join()
    assert [p.exitcode for p in processes] == [0, 0]

    after = model.state_dict()
    assert all(not np.allclose(after[k].numpy(), v) for k, v in before.items())
    loss_after, correct = test(args, model, device, dataset2, kwargs)
    # The two processes' updates race (Hogwild), so the result depends on how they interleave:
    # 1.35 of 2.31 (0.58) where they ran one after the other, 1.53-1.63 (0.66-0.71) interleaved
    # (installed builds of this session's start and end alike; 0.70 failed a CI run). Chance is
    # about 6 of the 64 test digits.
    assert loss_after < 0.8 * loss_before and correct > 20


def _write_through_queue(q, done):
    t = q.get()
    t[1:] = 4.0  # a view of what the parent sent: its memory is the parent's
    done.put(t.is_shared())


def test_shared_tensors_cross_a_queue_as_memory_and_pickle_as_values():
    import pickle

    import ferro
    import ferro.multiprocessing as mp
    from ferro.errors import DeviceError

    t = ferro.zeros(6)
    early_view = t[:2]
    assert not t.is_shared() and t.share_memory_() is t and t.is_shared()
    assert not early_view.is_shared()  # views taken before sharing keep the old memory
    assert t.share_memory_().is_shared() and not pickle.loads(pickle.dumps(t)).is_shared()
    param = ferro.nn.Parameter(ferro.ones(2)).share_memory_()
    copy = pickle.loads(pickle.dumps(param))
    assert isinstance(copy, ferro.nn.Parameter) and copy.requires_grad and not copy.is_shared()

    ctx = mp.get_context("fork")
    q, done = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=_write_through_queue, args=(q, done))
    p.start()
    q.put(t[2:])  # a view with an offset into the shared block
    assert done.get(timeout=60) is True
    p.join()
    assert t.tolist() == [0.0, 0.0, 0.0, 4.0, 4.0, 4.0]
    if ferro.cuda.is_available():
        with pytest.raises(DeviceError, match="only CPU tensors"):
            ferro.ones(2, device="cuda").share_memory_()
