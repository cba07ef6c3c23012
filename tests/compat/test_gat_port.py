# ruff: noqa: E501  (the ported program keeps its upstream line lengths)
"""pyGAT (Diego999/pyGAT, the PyTorch Graph Attention Network most tutorials start from), run as one
source with only its import lines changed, on a generated stochastic-block graph instead of
Cora: ``nn.Parameter(torch.empty(size=...))`` with ``xavier_uniform_`` on ``.data``, heads kept
in a plain list and registered with ``add_module``, ``torch.where(adj > 0, e, -9e15 * ones_like)``,
a broadcast ``Wh1 + Wh2.T``, the legacy ``torch.FloatTensor(array)`` / ``torch.LongTensor(range)``
constructors, ``output.max(1)[1].type_as(labels)``, and Adam with weight decay. For the comparison
with PyTorch, dropout is 0 and both start from the same weights.
"""

import numpy as np
import pytest

TORCH_IMPORTS = """\
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
"""

FERRO_IMPORTS = """\
import numpy as np
import ferro as torch
import ferro.nn as nn
import ferro.nn.functional as F
import ferro.optim as optim
"""

PROGRAM = """
class GraphAttentionLayer(nn.Module):
    \"\"\"
    Simple GAT layer, similar to https://arxiv.org/abs/1710.10903
    \"\"\"
    def __init__(self, in_features, out_features, dropout, alpha, concat=True):
        super(GraphAttentionLayer, self).__init__()
        self.dropout = dropout
        self.in_features = in_features
        self.out_features = out_features
        self.alpha = alpha
        self.concat = concat

        self.W = nn.Parameter(torch.empty(size=(in_features, out_features)))
        nn.init.xavier_uniform_(self.W.data, gain=1.414)
        self.a = nn.Parameter(torch.empty(size=(2*out_features, 1)))
        nn.init.xavier_uniform_(self.a.data, gain=1.414)

        self.leakyrelu = nn.LeakyReLU(self.alpha)

    def forward(self, h, adj):
        Wh = torch.mm(h, self.W) # h.shape: (N, in_features), Wh.shape: (N, out_features)
        e = self._prepare_attentional_mechanism_input(Wh)

        zero_vec = -9e15*torch.ones_like(e)
        attention = torch.where(adj > 0, e, zero_vec)
        attention = F.softmax(attention, dim=1)
        attention = F.dropout(attention, self.dropout, training=self.training)
        h_prime = torch.matmul(attention, Wh)

        if self.concat:
            return F.elu(h_prime)
        else:
            return h_prime

    def _prepare_attentional_mechanism_input(self, Wh):
        # Wh.shape (N, out_feature)
        # self.a.shape (2 * out_feature, 1)
        # Wh1&2.shape (N, 1)
        # e.shape (N, N)
        Wh1 = torch.matmul(Wh, self.a[:self.out_features, :])
        Wh2 = torch.matmul(Wh, self.a[self.out_features:, :])
        # broadcast add
        e = Wh1 + Wh2.T
        return self.leakyrelu(e)

    def __repr__(self):
        return self.__class__.__name__ + ' (' + str(self.in_features) + ' -> ' + str(self.out_features) + ')'


class GAT(nn.Module):
    def __init__(self, nfeat, nhid, nclass, dropout, alpha, nheads):
        \"\"\"Dense version of GAT.\"\"\"
        super(GAT, self).__init__()
        self.dropout = dropout

        self.attentions = [GraphAttentionLayer(nfeat, nhid, dropout=dropout, alpha=alpha, concat=True) for _ in range(nheads)]
        for i, attention in enumerate(self.attentions):
            self.add_module('attention_{}'.format(i), attention)

        self.out_att = GraphAttentionLayer(nhid * nheads, nclass, dropout=dropout, alpha=alpha, concat=False)

    def forward(self, x, adj):
        x = F.dropout(x, self.dropout, training=self.training)
        x = torch.cat([att(x, adj) for att in self.attentions], dim=1)
        x = F.dropout(x, self.dropout, training=self.training)
        x = F.elu(self.out_att(x, adj))
        return F.log_softmax(x, dim=1)


def encode_onehot(labels):
    classes = set(labels)
    classes_dict = {c: np.identity(len(classes))[i, :] for i, c in enumerate(classes)}
    labels_onehot = np.array(list(map(classes_dict.get, labels)), dtype=np.int32)
    return labels_onehot


def normalize_features(mx):
    \"\"\"Row-normalize sparse matrix\"\"\"
    rowsum = np.array(mx.sum(1))
    r_inv = np.power(rowsum, -1).flatten()
    r_inv[np.isinf(r_inv)] = 0.
    r_mat_inv = np.diag(r_inv)
    mx = r_mat_inv.dot(mx)
    return mx


def accuracy(output, labels):
    preds = output.max(1)[1].type_as(labels)
    correct = preds.eq(labels).double()
    correct = correct.sum()
    return correct / len(labels)


def train(epoch):
    model.train()
    optimizer.zero_grad()
    output = model(features, adj)
    loss_train = F.nll_loss(output[idx_train], labels[idx_train])
    acc_train = accuracy(output[idx_train], labels[idx_train])
    loss_train.backward()
    optimizer.step()

    model.eval()
    output = model(features, adj)
    loss_val = F.nll_loss(output[idx_val], labels[idx_val])
    acc_val = accuracy(output[idx_val], labels[idx_val])
    history.append((loss_train.data.item(), acc_train.data.item(), loss_val.data.item(), acc_val.data.item()))
    return loss_val.data.item()


features = normalize_features(FEATURES)
adj = torch.FloatTensor(ADJ)
features = torch.FloatTensor(np.array(features))
labels = torch.LongTensor(np.where(encode_onehot(LABELS))[1])
idx_train = torch.LongTensor(range(60))
idx_val = torch.LongTensor(range(60, 100))
idx_test = torch.LongTensor(range(100, 150))

torch.manual_seed(72)
model = GAT(nfeat=features.shape[1], nhid=8, nclass=int(labels.max()) + 1, dropout=DROPOUT, nheads=4, alpha=0.2)
if INIT is not None:
    model.load_state_dict({k: torch.tensor(v) for k, v in INIT.items()})
optimizer = optim.Adam(model.parameters(), lr=0.005, weight_decay=5e-4)
history = []
for epoch in range(EPOCHS):
    train(epoch)
model.eval()
output = model(features, adj)
acc_test = accuracy(output[idx_test], labels[idx_test])
state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
"""


def _graph(n=150, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, n)
    same = labels[:, None] == labels[None, :]
    adj = (rng.random((n, n)) < np.where(same, 0.15, 0.01)).astype(np.float32)
    adj = np.maximum(adj, adj.T) + np.eye(n, dtype=np.float32)
    signal = np.arange(40)[None, :] % 3 == labels[:, None]
    features = (rng.random((n, 40)) < 0.1 + 0.15 * signal).astype(np.float32)
    return labels, adj, features


def _run(imports, epochs, dropout, init=None):
    labels, adj, features = _graph()
    env = {"LABELS": labels, "ADJ": adj, "FEATURES": features}
    env.update(EPOCHS=epochs, DROPOUT=dropout, INIT=init)
    exec(compile(imports + PROGRAM, "gat_port", "exec"), env)
    return env


def test_gat_classifies_the_graph_on_ferro():
    env = _run(FERRO_IMPORTS, epochs=60, dropout=0.6)
    first, last = env["history"][0], env["history"][-1]
    assert last[2] < first[2] and last[3] >= 0.9 and env["acc_test"].item() >= 0.9
    assert sorted(k for k in env["state"] if k.endswith(".W")) == [
        f"attention_{i}.W" for i in range(4)
    ] + ["out_att.W"]


@pytest.mark.torch
def test_gat_matches_torch_from_the_same_weights():
    pytest.importorskip("torch")
    init = _run(FERRO_IMPORTS, epochs=0, dropout=0.0)["state"]
    ours = _run(FERRO_IMPORTS, epochs=10, dropout=0.0, init=init)
    theirs = _run(TORCH_IMPORTS, epochs=10, dropout=0.0, init=init)
    np.testing.assert_allclose(ours["history"], theirs["history"], rtol=1e-4, atol=1e-6)
    # Adam's step is lr * m / sqrt(v): where a gradient is near 0 its float32 rounding (another
    # summation order than PyTorch's) moves the step by a fraction of lr = 5e-3.
    for k in ours["state"]:
        np.testing.assert_allclose(ours["state"][k], theirs["state"][k], rtol=1e-4, atol=1e-4)
