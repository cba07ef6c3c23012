"""The "Advanced: Making Dynamic Decisions and the Bi-LSTM CRF" tutorial of PyTorch's NLP series,
run as one source with only its import lines changed: a bidirectional nn.LSTM feeding a CRF whose
forward algorithm and Viterbi decoding are written with per-element indexing (``vec[0, idx]``,
``self.transitions[tags[i + 1], tags[i]]`` with 0-d long tensors as indices), chained setitem
(``init_alphas[0][i] = 0.``), ``expand``, ``torch.max(vec, 1)``, ``torch.cat`` of 0-d views and
``.data`` writes into a Parameter; trained with SGD and weight decay. For the comparison with
PyTorch, both start from the same weights and ``init_hidden`` (``torch.randn``, whose streams
differ) gives zeros.
"""

import numpy as np
import pytest

TORCH_IMPORTS = """\
import torch
import torch.nn as nn
import torch.optim as optim
"""

FERRO_IMPORTS = """\
import ferro as torch
import ferro.nn as nn
import ferro.optim as optim
"""

DEFINITIONS = """
def argmax(vec):
    _, idx = torch.max(vec, 1)
    return idx.item()

def prepare_sequence(seq, to_ix):
    idxs = [to_ix[w] for w in seq]
    return torch.tensor(idxs, dtype=torch.long)

def log_sum_exp(vec):
    max_score = vec[0, argmax(vec)]
    max_score_broadcast = max_score.view(1, -1).expand(1, vec.size()[1])
    return max_score + torch.log(torch.sum(torch.exp(vec - max_score_broadcast)))

class BiLSTM_CRF(nn.Module):
    def __init__(self, vocab_size, tag_to_ix, embedding_dim, hidden_dim):
        super(BiLSTM_CRF, self).__init__()
        self.embedding_dim = embedding_dim
        self.hidden_dim = hidden_dim
        self.vocab_size = vocab_size
        self.tag_to_ix = tag_to_ix
        self.tagset_size = len(tag_to_ix)
        self.word_embeds = nn.Embedding(vocab_size, embedding_dim)
        self.lstm = nn.LSTM(embedding_dim, hidden_dim // 2, num_layers=1, bidirectional=True)
        self.hidden2tag = nn.Linear(hidden_dim, self.tagset_size)
        self.transitions = nn.Parameter(torch.randn(self.tagset_size, self.tagset_size))
        self.transitions.data[tag_to_ix[START_TAG], :] = -10000
        self.transitions.data[:, tag_to_ix[STOP_TAG]] = -10000
        self.hidden = self.init_hidden()

    def init_hidden(self):
        return (torch.randn(2, 1, self.hidden_dim // 2), torch.randn(2, 1, self.hidden_dim // 2))

    def _forward_alg(self, feats):
        init_alphas = torch.full((1, self.tagset_size), -10000.)
        init_alphas[0][self.tag_to_ix[START_TAG]] = 0.
        forward_var = init_alphas
        for feat in feats:
            alphas_t = []
            for next_tag in range(self.tagset_size):
                emit_score = feat[next_tag].view(1, -1).expand(1, self.tagset_size)
                trans_score = self.transitions[next_tag].view(1, -1)
                next_tag_var = forward_var + trans_score + emit_score
                alphas_t.append(log_sum_exp(next_tag_var).view(1))
            forward_var = torch.cat(alphas_t).view(1, -1)
        terminal_var = forward_var + self.transitions[self.tag_to_ix[STOP_TAG]]
        alpha = log_sum_exp(terminal_var)
        return alpha

    def _get_lstm_features(self, sentence):
        self.hidden = self.init_hidden()
        embeds = self.word_embeds(sentence).view(len(sentence), 1, -1)
        lstm_out, self.hidden = self.lstm(embeds, self.hidden)
        lstm_out = lstm_out.view(len(sentence), self.hidden_dim)
        lstm_feats = self.hidden2tag(lstm_out)
        return lstm_feats

    def _score_sentence(self, feats, tags):
        score = torch.zeros(1)
        tags = torch.cat([torch.tensor([self.tag_to_ix[START_TAG]], dtype=torch.long), tags])
        for i, feat in enumerate(feats):
            score = score + self.transitions[tags[i + 1], tags[i]] + feat[tags[i + 1]]
        score = score + self.transitions[self.tag_to_ix[STOP_TAG], tags[-1]]
        return score

    def _viterbi_decode(self, feats):
        backpointers = []
        init_vvars = torch.full((1, self.tagset_size), -10000.)
        init_vvars[0][self.tag_to_ix[START_TAG]] = 0
        forward_var = init_vvars
        for feat in feats:
            bptrs_t = []
            viterbivars_t = []
            for next_tag in range(self.tagset_size):
                next_tag_var = forward_var + self.transitions[next_tag]
                best_tag_id = argmax(next_tag_var)
                bptrs_t.append(best_tag_id)
                viterbivars_t.append(next_tag_var[0][best_tag_id].view(1))
            forward_var = (torch.cat(viterbivars_t) + feat).view(1, -1)
            backpointers.append(bptrs_t)
        terminal_var = forward_var + self.transitions[self.tag_to_ix[STOP_TAG]]
        best_tag_id = argmax(terminal_var)
        path_score = terminal_var[0][best_tag_id]
        best_path = [best_tag_id]
        for bptrs_t in reversed(backpointers):
            best_tag_id = bptrs_t[best_tag_id]
            best_path.append(best_tag_id)
        start = best_path.pop()
        assert start == self.tag_to_ix[START_TAG]
        best_path.reverse()
        return path_score, best_path

    def neg_log_likelihood(self, sentence, tags):
        feats = self._get_lstm_features(sentence)
        forward_score = self._forward_alg(feats)
        gold_score = self._score_sentence(feats, tags)
        return forward_score - gold_score

    def forward(self, sentence):
        lstm_feats = self._get_lstm_features(sentence)
        score, tag_seq = self._viterbi_decode(lstm_feats)
        return score, tag_seq
"""

TRAINING = """
START_TAG = "<START>"
STOP_TAG = "<STOP>"
EMBEDDING_DIM = 5
HIDDEN_DIM = 4
training_data = [(
    "the wall street journal reported today that apple corporation made money".split(),
    "B I I I O O O B I O O".split()
), (
    "georgia tech is a university in georgia".split(),
    "B I O O O O B".split()
)]
word_to_ix = {}
for sentence, tags in training_data:
    for word in sentence:
        if word not in word_to_ix:
            word_to_ix[word] = len(word_to_ix)
tag_to_ix = {"B": 0, "I": 1, "O": 2, START_TAG: 3, STOP_TAG: 4}
torch.manual_seed(1)
model = BiLSTM_CRF(len(word_to_ix), tag_to_ix, EMBEDDING_DIM, HIDDEN_DIM)
if INIT is not None:
    model.load_state_dict({k: torch.tensor(v) for k, v in INIT.items()})
optimizer = optim.SGD(model.parameters(), lr=0.01, weight_decay=1e-4)
with torch.no_grad():
    precheck_sent = prepare_sequence(training_data[0][0], word_to_ix)
    precheck_tags = torch.tensor([tag_to_ix[t] for t in training_data[0][1]], dtype=torch.long)
    before = model(precheck_sent)
for epoch in range(EPOCHS):
    for sentence, tags in training_data:
        model.zero_grad()
        sentence_in = prepare_sequence(sentence, word_to_ix)
        targets = torch.tensor([tag_to_ix[t] for t in tags], dtype=torch.long)
        loss = model.neg_log_likelihood(sentence_in, targets)
        loss.backward()
        optimizer.step()
with torch.no_grad():
    precheck_sent = prepare_sequence(training_data[0][0], word_to_ix)
    after = model(precheck_sent)
state = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
"""


def _run(imports, epochs, init=None, zero_hidden=False):
    env = {"EPOCHS": epochs, "INIT": init}
    exec(compile(imports + DEFINITIONS, "bilstm_crf_port", "exec"), env)
    if zero_hidden:
        torch, half = env["torch"], lambda m: m.hidden_dim // 2
        env["BiLSTM_CRF"].init_hidden = lambda m: (
            torch.zeros(2, 1, half(m)),
            torch.zeros(2, 1, half(m)),
        )
    exec(compile(TRAINING, "bilstm_crf_port", "exec"), env)
    return env


def test_the_bilstm_crf_learns_the_tags_on_ferro():
    env = _run(FERRO_IMPORTS, epochs=150)  # the tutorial trains 300
    gold = [env["tag_to_ix"][t] for t in env["training_data"][0][1]]
    (score_before, tags_before), (score_after, tags_after) = env["before"], env["after"]
    right = lambda tags: sum(a == b for a, b in zip(tags, gold, strict=True))  # noqa: E731
    assert right(tags_after) > right(tags_before) and right(tags_after) >= 7
    assert score_after.item() > score_before.item()


@pytest.mark.torch
def test_the_bilstm_crf_matches_torch_from_the_same_weights():
    pytest.importorskip("torch")
    init = _run(FERRO_IMPORTS, epochs=0)["state"]
    ours = _run(FERRO_IMPORTS, epochs=3, init=init, zero_hidden=True)
    theirs = _run(TORCH_IMPORTS, epochs=3, init=init, zero_hidden=True)
    assert sorted(ours["state"]) == sorted(theirs["state"])
    for k in ours["state"]:
        np.testing.assert_allclose(ours["state"][k], theirs["state"][k], rtol=1e-4, atol=1e-5)
    assert ours["after"][1] == theirs["after"][1]
    assert ours["after"][0].item() == pytest.approx(theirs["after"][0].item(), rel=1e-4)
