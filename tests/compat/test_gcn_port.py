# ruff: noqa: E501  (the ported program keeps its upstream line lengths)
"""pytorch/examples gcn/main.py (Kipf & Welling's graph convolutional network), run with only its
import lines changed, on a generated citation graph (three communities, each citing mostly
within itself, and bag-of-words features drawn from community words) laid out as Cora's
``cora.content``/``cora.cites`` arrays instead of the downloaded files: ``GraphConv`` with
``nn.Parameter(torch.Tensor(in, out))`` filled by ``nn.init.xavier_normal_`` and
``torch.spmm(adj_mat, support)``; ``GCN``'s ReLU/Dropout/``log_softmax``; ``load_cora``'s
``torch.FloatTensor`` of a string array's int32 columns, row normalization through
``1 / torch.sum(...)`` with ``x[x == float('inf')] = 0`` and ``torch.diag(...) @ features``,
``np.unique(return_inverse=True)`` labels in a ``torch.LongTensor``, the renormalized
adjacency ``D^-1/2 (I + A) D^-1/2`` (``torch.eye(V) + adj_mat``, ``torch.sqrt(1 / degree)``);
``train_iter``/``test`` with index tensors as masks (``output[mask_train]``), ``NLLLoss``,
Adam with weight decay, and ``(output.argmax(dim=1) == target).float().sum() / len(target)``.

ferro's tensors are dense, so ``load_cora`` keeps its matrices dense: its ``.to_sparse()`` calls
are left out and ``torch.sparse_coo_tensor(edges.T, ...)`` becomes a dense write at the edges
(recorded in test_port_gaps.py). For the comparison with PyTorch, both start from the same
weights, dropout is 0, and ``torch.randperm`` gives the same permutation in both libraries.
"""

import numpy as np
import pytest

TORCH_IMPORTS = """\
import time
import numpy as np
import torch
from torch import nn
import torch.nn.functional as F
from torch.optim import Adam
"""

FERRO_IMPORTS = """\
import time
import numpy as np
import ferro as torch
from ferro import nn
import ferro.nn.functional as F
from ferro.optim import Adam
"""

PROGRAM = """
class GraphConv(nn.Module):
    def __init__(self, input_dim, output_dim, use_bias=False):
        super(GraphConv, self).__init__()

        self.kernel = nn.Parameter(torch.Tensor(input_dim, output_dim))
        nn.init.xavier_normal_(self.kernel)

        self.bias = None
        if use_bias:
            self.bias = nn.Parameter(torch.Tensor(output_dim))
            nn.init.zeros_(self.bias)

    def forward(self, input_tensor, adj_mat):
        support = torch.mm(input_tensor, self.kernel)
        output = torch.spmm(adj_mat, support)
        if self.bias is not None:
            output = output + self.bias

        return output


class GCN(nn.Module):
    def __init__(self, input_dim, hidden_dim, output_dim, use_bias=True, dropout_p=0.1):
        super(GCN, self).__init__()

        self.gc1 = GraphConv(input_dim, hidden_dim, use_bias=use_bias)
        self.gc2 = GraphConv(hidden_dim, output_dim, use_bias=use_bias)

        self.dropout = nn.Dropout(dropout_p)

    def forward(self, input_tensor, adj_mat):
        x = self.gc1(input_tensor, adj_mat)
        x = F.relu(x)
        x = self.dropout(x)

        x = self.gc2(x, adj_mat)

        return F.log_softmax(x, dim=1)


def load_cora(content_tensor, cites_tensor, device='cpu'):
    features = torch.FloatTensor(content_tensor[:, 1:-1].astype(np.int32))
    scale_vector = torch.sum(features, dim=1)
    scale_vector = 1 / scale_vector
    scale_vector[scale_vector == float('inf')] = 0
    scale_vector = torch.diag(scale_vector)
    features = scale_vector @ features

    classes, labels = np.unique(content_tensor[:, -1], return_inverse=True)
    labels = torch.LongTensor(labels)

    idx = content_tensor[:, 0].astype(np.int32)
    idx_map = {id: pos for pos, id in enumerate(idx)}

    edges = np.array(
        list(map(lambda edge: [idx_map[edge[0]], idx_map[edge[1]]],
            cites_tensor)), dtype=np.int32)

    V = len(idx)
    E = edges.shape[0]
    adj_mat = torch.zeros(V, V)
    adj_mat[edges[:, 0], edges[:, 1]] = torch.ones(E)
    adj_mat = torch.eye(V) + adj_mat

    degree_mat = torch.sum(adj_mat, dim=1)
    degree_mat = torch.sqrt(1 / degree_mat)
    degree_mat[degree_mat == float('inf')] = 0
    degree_mat = torch.diag(degree_mat)

    adj_mat = degree_mat @ adj_mat @ degree_mat

    return features.to(device), labels.to(device), adj_mat.to(device)


def train_iter(epoch, model, optimizer, criterion, input, target, mask_train, mask_val, print_every=10):
    start_t = time.time()
    model.train()
    optimizer.zero_grad()

    output = model(*input)
    loss = criterion(output[mask_train], target[mask_train])

    loss.backward()
    optimizer.step()

    loss_train, acc_train = test(model, criterion, input, target, mask_train)
    loss_val, acc_val = test(model, criterion, input, target, mask_val)
    HISTORY.append((loss.item(), loss_train, acc_train, loss_val, acc_val))

    if epoch % print_every == 0:
        print(f'Epoch: {epoch:04d} ({(time.time() - start_t):.4f}s) loss_train: {loss_train:.4f} acc_train: {acc_train:.4f} loss_val: {loss_val:.4f} acc_val: {acc_val:.4f}')


def test(model, criterion, input, target, mask):
    model.eval()
    with torch.no_grad():
        output = model(*input)
        output, target = output[mask], target[mask]

        loss = criterion(output, target)
        acc = (output.argmax(dim=1) == target).float().sum() / len(target)
    return loss.item(), acc.item()


device = torch.device('cpu')
torch.manual_seed(42)
features, labels, adj_mat = load_cora(CONTENT, CITES, device=device)
idx = torch.randperm(len(labels)).to(device)
idx_test, idx_val, idx_train = idx[:30], idx[30:45], idx[45:]

gcn = GCN(features.shape[1], 16, labels.max().item() + 1, True, DROPOUT).to(device)
if INIT is not None:
    gcn.load_state_dict({k: torch.from_numpy(v) for k, v in INIT.items()})
optimizer = Adam(gcn.parameters(), lr=0.01, weight_decay=5e-4)
criterion = nn.NLLLoss()

HISTORY = []
for epoch in range(EPOCHS):
    train_iter(epoch + 1, gcn, optimizer, criterion, (features, adj_mat), labels, idx_train, idx_val, 10)

loss_test, acc_test = test(gcn, criterion, (features, adj_mat), labels, idx_test)
print(f'Test set results: loss {loss_test:.4f} accuracy {acc_test:.4f}')
"""

CLASSES = ["Neural_Networks", "Theory", "Genetic_Algorithms"]


def _graph(nodes=90, words=60, seed=0):
    """Cora's two files as arrays: ``content`` rows ``paper_id w_1 .. w_words label`` (strings, as
    ``np.genfromtxt(dtype=str)`` reads them) and ``cites`` rows ``cited citing`` (int32)."""
    rng = np.random.default_rng(seed)
    ids = rng.choice(10**6, nodes, replace=False)
    community = np.arange(nodes) % 3
    words_of = np.arange(words) % 3
    p_word = np.where(words_of[None, :] == community[:, None], 0.25, 0.05)
    bow = (rng.random((nodes, words)) < p_word).astype(int)
    bow[5] = 0  # a paper without words: its scale is 1/0 = inf, set to 0
    content = np.column_stack([ids.astype(str), bow.astype(str), np.array(CLASSES)[community]])
    cites = []
    for a in range(nodes):
        for b in range(a + 1, nodes):
            if rng.random() < (0.12 if community[a] == community[b] else 0.01):
                cites.append((ids[a], ids[b]))
    return content, np.array(cites, np.int32)


def _run(imports, **params):
    content, cites = _graph()
    env = {"CONTENT": content, "CITES": cites, "INIT": None, "DROPOUT": 0.5, "EPOCHS": 60, **params}
    exec(compile(imports + PROGRAM, "gcn_port", "exec"), env)
    return env


def test_the_gcn_classifies_the_communities():
    env = _run(FERRO_IMPORTS)
    history = env["HISTORY"]
    assert len(history) == 60
    assert history[-1][1] < 0.5 * history[0][1]  # the training loss (eval mode)
    assert env["acc_test"] >= 0.8
    adj = env["adj_mat"].numpy()
    assert (np.diag(adj) > 0).all() and (adj >= 0).all()  # the self loops of I + A
    assert env["features"][5].sum().item() == 0.0


@pytest.mark.torch
def test_the_gcn_matches_torch(monkeypatch):
    torch = pytest.importorskip("torch")
    import ferro

    perm = np.random.default_rng(4).permutation(90)
    rng = np.random.default_rng(8)
    init = {
        "gc1.kernel": rng.standard_normal((60, 16)).astype(np.float32) * 0.2,
        "gc1.bias": np.zeros(16, np.float32),
        "gc2.kernel": rng.standard_normal((16, 3)).astype(np.float32) * 0.4,
        "gc2.bias": np.zeros(3, np.float32),
    }
    runs = []
    for module, imports in ((ferro, FERRO_IMPORTS), (torch, TORCH_IMPORTS)):
        monkeypatch.setattr(module, "randperm", lambda n, m=module: m.tensor(perm[:n]))
        runs.append(_run(imports, INIT=init, DROPOUT=0.0, EPOCHS=15))
    ours, theirs = runs
    np.testing.assert_allclose(
        ours["adj_mat"].numpy(), theirs["adj_mat"].numpy(), rtol=1e-6, atol=1e-7
    )
    np.testing.assert_allclose(ours["features"].numpy(), theirs["features"].numpy(), rtol=1e-6)
    np.testing.assert_allclose(ours["HISTORY"], theirs["HISTORY"], rtol=1e-4, atol=1e-6)
    assert ours["acc_test"] == pytest.approx(theirs["acc_test"])
