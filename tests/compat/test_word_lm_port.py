"""The word-level language model of pytorch/examples (word_language_model: ``RNNModel`` with
an Embedding encoder, a 2-layer nn.LSTM / nn.GRU, a tied Linear decoder, ``init_hidden`` via
``weight.new_zeros``, ``repackage_hidden`` via ``detach``, ``clip_grad_norm_`` and a manual SGD
update), on a small generated corpus, run as one source with only its import lines changed:
``import torch`` and ``import ferro as torch``. The comparison uses dropout 0 (the generators
differ) and the same initial weights.
"""

import numpy as np
import pytest

TORCH_IMPORTS = """\
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
"""

FERRO_IMPORTS = """\
import math
import ferro as torch
import ferro.nn as nn
import ferro.nn.functional as F
"""

PROGRAM = """
class RNNModel(nn.Module):
    \"\"\"Container module with an encoder, a recurrent module, and a decoder.\"\"\"

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super(RNNModel, self).__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ['LSTM', 'GRU']:
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        else:
            try:
                nonlinearity = {'RNN_TANH': 'tanh', 'RNN_RELU': 'relu'}[rnn_type]
            except KeyError as e:
                raise ValueError("An invalid option for `--model` was supplied") from e
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)

        if tie_weights:
            if nhid != ninp:
                raise ValueError('When using the tied flag, nhid must be equal to emsize')
            self.decoder.weight = self.encoder.weight

        self.init_weights()

        self.rnn_type = rnn_type
        self.nhid = nhid
        self.nlayers = nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        if self.rnn_type == 'LSTM':
            return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                    weight.new_zeros(self.nlayers, bsz, self.nhid))
        else:
            return weight.new_zeros(self.nlayers, bsz, self.nhid)


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    data = data.view(bsz, -1).t().contiguous()
    return data.to(device)


def repackage_hidden(h):
    \"\"\"Wraps hidden states in new Tensors, to detach them from their history.\"\"\"
    if isinstance(h, torch.Tensor):
        return h.detach()
    else:
        return tuple(repackage_hidden(v) for v in h)


def get_batch(source, i):
    seq_len = min(BPTT, len(source) - 1 - i)
    data = source[i:i+seq_len]
    target = source[i+1:i+1+seq_len].view(-1)
    return data, target


def evaluate(data_source):
    model.eval()
    total_loss = 0.
    hidden = model.init_hidden(EVAL_BATCH_SIZE)
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, BPTT):
            data, targets = get_batch(data_source, i)
            output, hidden = model(data, hidden)
            hidden = repackage_hidden(hidden)
            total_loss += len(data) * criterion(output, targets).item()
    return total_loss / (len(data_source) - 1)


def train():
    model.train()
    hidden = model.init_hidden(BATCH_SIZE)
    for batch, i in enumerate(range(0, train_data.size(0) - 1, BPTT)):
        data, targets = get_batch(train_data, i)
        model.zero_grad()
        hidden = repackage_hidden(hidden)
        output, hidden = model(data, hidden)
        loss = criterion(output, targets)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
        losses.append(loss.item())


torch.manual_seed(1111)
device = torch.device("cpu")
train_data = batchify(torch.tensor(TRAIN_IDS), BATCH_SIZE)
val_data = batchify(torch.tensor(VAL_IDS), EVAL_BATCH_SIZE)
ntokens = NTOKENS
model = RNNModel(RNN_TYPE, ntokens, 16, 16, 2, DROPOUT, tie_weights=True).to(device)
if INIT is not None:
    model.load_state_dict({k: torch.tensor(v) for k, v in INIT.items()})
criterion = nn.NLLLoss()
lr = 20.0
losses, val_losses = [], []
for epoch in range(1, EPOCHS + 1):
    train()
    val_losses.append(evaluate(val_data))
    lr /= 4.0
state = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
"""


def _corpus(n, ntokens=24, seed=0):
    # A corpus with structure to learn: mostly-deterministic next-token transitions.
    rng = np.random.default_rng(seed)
    nxt = rng.permutation(ntokens)
    ids = [0]
    for _ in range(n - 1):
        ids.append(int(nxt[ids[-1]]) if rng.random() < 0.8 else int(rng.integers(ntokens)))
    return np.array(ids, np.int64)


def _run(imports, program=PROGRAM, name="word_lm_port", **params):
    env = {
        "TRAIN_IDS": _corpus(400),
        "VAL_IDS": _corpus(100, seed=1),
        "NTOKENS": 24,
        "BATCH_SIZE": 8,
        "EVAL_BATCH_SIZE": 4,
        "BPTT": 10,
        "CLIP": 0.25,
        "EPOCHS": 1,
        "INIT": None,
        **params,
    }
    exec(compile(imports + program, name, "exec"), env)
    return env


@pytest.mark.parametrize("rnn_type", ["LSTM", "GRU"])
def test_the_word_lm_trains_on_ferro(rnn_type):
    env = _run(FERRO_IMPORTS, RNN_TYPE=rnn_type, DROPOUT=0.2, EPOCHS=4)
    losses = env["losses"]
    assert len(losses) == 4 * 5
    assert np.all(np.isfinite(losses))
    assert np.mean(losses[-5:]) < np.mean(losses[:5])
    assert env["val_losses"][-1] < env["val_losses"][0]
    assert env["state"]["decoder.weight"] is not None
    # tied: the decoder and encoder share one Parameter
    assert env["model"].decoder.weight is env["model"].encoder.weight


@pytest.mark.torch
@pytest.mark.parametrize("rnn_type", ["LSTM", "GRU"])
def test_the_word_lm_matches_torch_from_the_same_weights(rnn_type):
    pytest.importorskip("torch")
    import ferro

    ferro.manual_seed(0)
    init = _run(FERRO_IMPORTS, RNN_TYPE=rnn_type, DROPOUT=0.0, EPOCHS=0)["state"]
    ours = _run(FERRO_IMPORTS, RNN_TYPE=rnn_type, DROPOUT=0.0, EPOCHS=2, INIT=init)
    theirs = _run(TORCH_IMPORTS, RNN_TYPE=rnn_type, DROPOUT=0.0, EPOCHS=2, INIT=init)
    assert sorted(ours["state"]) == sorted(theirs["state"])
    np.testing.assert_allclose(ours["losses"], theirs["losses"], rtol=1e-4)
    np.testing.assert_allclose(ours["val_losses"], theirs["val_losses"], rtol=1e-4)
    for k, v in theirs["state"].items():
        np.testing.assert_allclose(ours["state"][k], v, rtol=1e-3, atol=1e-5)
