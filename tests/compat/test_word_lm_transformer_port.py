"""The Transformer of pytorch/examples' word_language_model (``model.py``: ``PositionalEncoding``
with a registered buffer filled through strided slice assignment, and ``TransformerModel``, which
subclasses ``nn.Transformer``, replaces its ``decoder`` with a Linear, and masks with
``log(tril(ones))``), trained as ``main.py`` trains it (clip_grad_norm_, a manual SGD update),
run as one source with only its import lines changed. Dropout 0 and the same initial weights for
the comparison with PyTorch."""

import numpy as np
import pytest
import test_word_lm_port as word_lm
from test_word_lm_port import FERRO_IMPORTS, TORCH_IMPORTS

PROGRAM = """
class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=5000):
        super(PositionalEncoding, self).__init__()
        self.dropout = nn.Dropout(p=dropout)

        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0).transpose(0, 1)
        self.register_buffer('pe', pe)

    def forward(self, x):
        x = x + self.pe[:x.size(0), :]
        return self.dropout(x)


class TransformerModel(nn.Transformer):
    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
        super(TransformerModel, self).__init__(d_model=ninp, nhead=nhead, dim_feedforward=nhid,
                                               num_encoder_layers=nlayers, dropout=dropout)
        self.model_type = 'Transformer'
        self.src_mask = None
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.input_emb = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)
        self.init_weights()

    def _generate_square_subsequent_mask(self, sz):
        return torch.log(torch.tril(torch.ones(sz, sz)))

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.input_emb.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, src, has_mask=True):
        if has_mask:
            device = src.device
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                mask = self._generate_square_subsequent_mask(len(src)).to(device)
                self.src_mask = mask
        else:
            self.src_mask = None

        src = self.input_emb(src) * math.sqrt(self.ninp)
        src = self.pos_encoder(src)
        output = self.encoder(src, mask=self.src_mask)
        output = self.decoder(output)
        return F.log_softmax(output, dim=-1)


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    data = data.view(bsz, -1).t().contiguous()
    return data.to(device)


def get_batch(source, i):
    seq_len = min(BPTT, len(source) - 1 - i)
    data = source[i:i+seq_len]
    target = source[i+1:i+1+seq_len].view(-1)
    return data, target


def evaluate(data_source):
    model.eval()
    total_loss = 0.
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, BPTT):
            data, targets = get_batch(data_source, i)
            output = model(data)
            output = output.view(-1, ntokens)
            total_loss += len(data) * criterion(output, targets).item()
    return total_loss / (len(data_source) - 1)


def train():
    model.train()
    for batch, i in enumerate(range(0, train_data.size(0) - 1, BPTT)):
        data, targets = get_batch(train_data, i)
        model.zero_grad()
        output = model(data)
        output = output.view(-1, ntokens)
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
model = TransformerModel(ntokens, 16, 2, 32, 2, DROPOUT).to(device)
if INIT is not None:
    model.load_state_dict({k: torch.tensor(v) for k, v in INIT.items()})
criterion = nn.NLLLoss()
lr = 1.0
losses, val_losses = [], []
for epoch in range(1, EPOCHS + 1):
    train()
    val_losses.append(evaluate(val_data))
state = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
"""


def _run(imports, **params):
    return word_lm._run(imports, PROGRAM, "word_lm_transformer_port", **params)


def test_the_transformer_language_model_trains_on_ferro():
    env = _run(FERRO_IMPORTS, DROPOUT=0.2, EPOCHS=4)
    losses = env["losses"]
    assert len(losses) == 4 * 5 and np.all(np.isfinite(losses))
    assert np.mean(losses[-5:]) < np.mean(losses[:5]) - 0.3
    assert len(env["val_losses"]) == 4 and np.all(np.isfinite(env["val_losses"]))
    # nn.Transformer's own decoder stack was replaced by the Linear, as in PyTorch
    assert not any(k.startswith("decoder.layers") for k in env["state"])
    assert env["state"]["pos_encoder.pe"].shape == (5000, 1, 16)


@pytest.mark.torch
def test_the_transformer_language_model_matches_torch_from_the_same_weights():
    pytest.importorskip("torch")
    import ferro

    ferro.manual_seed(0)
    init = _run(FERRO_IMPORTS, DROPOUT=0.0, EPOCHS=0)["state"]
    ours = _run(FERRO_IMPORTS, DROPOUT=0.0, EPOCHS=2, INIT=init)
    theirs = _run(TORCH_IMPORTS, DROPOUT=0.0, EPOCHS=2, INIT=init)
    assert sorted(ours["state"]) == sorted(theirs["state"])
    np.testing.assert_allclose(ours["losses"], theirs["losses"], rtol=1e-4)
    np.testing.assert_allclose(ours["val_losses"], theirs["val_losses"], rtol=1e-4)
