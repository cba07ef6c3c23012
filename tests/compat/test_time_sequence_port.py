# ruff: noqa: E501  (the ported program keeps its upstream line lengths)
"""pytorch/examples time_sequence_prediction (generate_sine_wave.py and train.py): two
``nn.LSTMCell``s unrolled over ``input.split(1, dim=1)`` with ``(h, c)`` tuples, a model made
float64 by ``seq.double()`` with ``torch.zeros(..., dtype=torch.double)`` states, ``torch.cat``
of the outputs, free-running prediction of the future, ``optim.LBFGS(lr=0.8)`` stepped with a
closure that prints ``loss.item()``, ``torch.save``/``torch.load`` of the NumPy data and the test
loss under ``torch.no_grad``; run as one source with only the import lines changed, on shorter
waves (N=10, L=40, 2 steps, 20 future points) so that it runs in a test.
"""

import numpy as np
import pytest

TORCH_IMPORTS = """\
import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
"""

FERRO_IMPORTS = """\
import numpy as np
import ferro as torch
import ferro.nn as nn
import ferro.optim as optim
"""

PROGRAM = """
# generate_sine_wave.py
np.random.seed(2)

T = 20
L = 40
N = 10
x = np.empty((N, L), 'int64')
x[:] = np.array(range(L)) + np.random.randint(-4 * T, 4 * T, N).reshape(N, 1)
data = np.sin(x / 1.0 / T).astype('float64')
torch.save(data, open(DATA_PATH, 'wb'))


# train.py
class Sequence(nn.Module):
    def __init__(self):
        super(Sequence, self).__init__()
        self.lstm1 = nn.LSTMCell(1, 51)
        self.lstm2 = nn.LSTMCell(51, 51)
        self.linear = nn.Linear(51, 1)

    def forward(self, input, future = 0):
        outputs = []
        h_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        c_t = torch.zeros(input.size(0), 51, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)
        c_t2 = torch.zeros(input.size(0), 51, dtype=torch.double)

        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for i in range(future):# if we should predict the future
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        outputs = torch.cat(outputs, dim=1)
        return outputs


# set random seed to 0
np.random.seed(0)
torch.manual_seed(0)
# load data and make training set
data = torch.load(open(DATA_PATH, 'rb'), weights_only=False)  # PyTorch >= 2.6 needs it for a NumPy array
input = torch.from_numpy(data[3:, :-1])
target = torch.from_numpy(data[3:, 1:])
test_input = torch.from_numpy(data[:3, :-1])
test_target = torch.from_numpy(data[:3, 1:])
# build the model
seq = Sequence()
seq.double()
if INIT is not None:
    seq.load_state_dict({k: torch.from_numpy(v) for k, v in INIT.items()})
criterion = nn.MSELoss()
# use LBFGS as optimizer since we can load the whole data to train
optimizer = optim.LBFGS(seq.parameters(), lr=0.8)
TRAIN_LOSSES, TEST_LOSSES = [], []
#begin to train
for i in range(STEPS):
    print('STEP: ', i)
    def closure():
        optimizer.zero_grad()
        out = seq(input)
        loss = criterion(out, target)
        print('loss:', loss.item())
        TRAIN_LOSSES.append(loss.item())
        loss.backward()
        return loss
    optimizer.step(closure)
    # begin to predict, no need to track gradient here
    with torch.no_grad():
        future = 20
        pred = seq(test_input, future = future)
        loss = criterion(pred[:, :-future], test_target)
        print('test loss:', loss.item())
        TEST_LOSSES.append(loss.item())
        y = pred.detach().numpy()
STATE = {k: v.detach().numpy().copy() for k, v in seq.state_dict().items()}
"""


def _run(imports, tmp_path, **params):
    env = {"DATA_PATH": str(tmp_path / "traindata.pt"), "INIT": None, "STEPS": 2, **params}
    exec(compile(imports + PROGRAM, "time_sequence_port", "exec"), env)
    return env


def test_the_sine_wave_model_trains_with_lbfgs(tmp_path):
    env = _run(FERRO_IMPORTS, tmp_path)
    train, test = env["TRAIN_LOSSES"], env["TEST_LOSSES"]
    assert len(train) > 2 and np.all(np.isfinite(train)) and train[-1] < 0.1 * train[0]
    assert len(test) == 2 and test[-1] < test[0]
    assert env["y"].shape == (3, 39 + 20) and env["y"].dtype == np.float64
    assert all(v.dtype == np.float64 for v in env["STATE"].values())


@pytest.mark.torch
def test_the_sine_wave_model_matches_torch(tmp_path):
    pytest.importorskip("torch")
    init = _run(FERRO_IMPORTS, tmp_path, STEPS=0)["STATE"]
    ours = _run(FERRO_IMPORTS, tmp_path, INIT=init)
    theirs = _run(TORCH_IMPORTS, tmp_path, INIT=init)
    # float64 through LBFGS's two-loop recursion: the same closure evaluations, to rounding.
    assert len(ours["TRAIN_LOSSES"]) == len(theirs["TRAIN_LOSSES"])
    np.testing.assert_allclose(ours["TRAIN_LOSSES"], theirs["TRAIN_LOSSES"], rtol=1e-7)
    np.testing.assert_allclose(ours["TEST_LOSSES"], theirs["TEST_LOSSES"], rtol=1e-7)
    np.testing.assert_allclose(ours["y"], theirs["y"], rtol=1e-6, atol=1e-9)
