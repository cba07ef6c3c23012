# ruff: noqa: E501  (the ported program keeps its upstream line lengths)
"""The PyTorch "NLP From Scratch: Translation with a Sequence to Sequence Network and Attention"
tutorial (its batched version): ``Lang``, ``EncoderRNN`` (``nn.GRU(batch_first=True)``),
``BahdanauAttention`` (``squeeze(2).unsqueeze(1)``, ``torch.bmm``), ``AttnDecoderRNN`` with
teacher forcing and greedy decoding (``torch.empty(...).fill_(SOS_token)``, ``topk(1)``,
``squeeze(-1).detach()``, ``hidden.permute(1, 0, 2)``), ``get_dataloader`` (NumPy int32 ids
into long tensors, ``RandomSampler``; upstream's ``torch.LongTensor`` is a recorded gap), ``train_epoch`` with two Adam optimizers and
``NLLLoss``, and ``evaluate`` under ``torch.no_grad``; run as one source with only the import
lines changed, on a toy language pair (each "French" word has one English word, same order).
"""

import numpy as np
import pytest

TORCH_IMPORTS = """\
import numpy as np
import torch
import torch.nn as nn
from torch import optim
import torch.nn.functional as F
from torch.utils.data import TensorDataset, DataLoader, RandomSampler, SequentialSampler
"""

FERRO_IMPORTS = """\
import numpy as np
import ferro as torch
import ferro.nn as nn
from ferro import optim
import ferro.nn.functional as F
from ferro.utils.data import TensorDataset, DataLoader, RandomSampler, SequentialSampler
"""

PROGRAM = """
device = torch.device("cpu")
SOS_token = 0
EOS_token = 1
MAX_LENGTH = 6


class Lang:
    def __init__(self, name):
        self.name = name
        self.word2index = {}
        self.word2count = {}
        self.index2word = {0: "SOS", 1: "EOS"}
        self.n_words = 2  # Count SOS and EOS

    def addSentence(self, sentence):
        for word in sentence.split(' '):
            self.addWord(word)

    def addWord(self, word):
        if word not in self.word2index:
            self.word2index[word] = self.n_words
            self.word2count[word] = 1
            self.index2word[self.n_words] = word
            self.n_words += 1
        else:
            self.word2count[word] += 1


class EncoderRNN(nn.Module):
    def __init__(self, input_size, hidden_size, dropout_p=0.1):
        super(EncoderRNN, self).__init__()
        self.hidden_size = hidden_size

        self.embedding = nn.Embedding(input_size, hidden_size)
        self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, input):
        embedded = self.dropout(self.embedding(input))
        output, hidden = self.gru(embedded)
        return output, hidden


class BahdanauAttention(nn.Module):
    def __init__(self, hidden_size):
        super(BahdanauAttention, self).__init__()
        self.Wa = nn.Linear(hidden_size, hidden_size)
        self.Ua = nn.Linear(hidden_size, hidden_size)
        self.Va = nn.Linear(hidden_size, 1)

    def forward(self, query, keys):
        scores = self.Va(torch.tanh(self.Wa(query) + self.Ua(keys)))
        scores = scores.squeeze(2).unsqueeze(1)

        weights = F.softmax(scores, dim=-1)
        context = torch.bmm(weights, keys)

        return context, weights


class AttnDecoderRNN(nn.Module):
    def __init__(self, hidden_size, output_size, dropout_p=0.1):
        super(AttnDecoderRNN, self).__init__()
        self.embedding = nn.Embedding(output_size, hidden_size)
        self.attention = BahdanauAttention(hidden_size)
        self.gru = nn.GRU(2 * hidden_size, hidden_size, batch_first=True)
        self.out = nn.Linear(hidden_size, output_size)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, encoder_outputs, encoder_hidden, target_tensor=None):
        batch_size = encoder_outputs.size(0)
        decoder_input = torch.empty(batch_size, 1, dtype=torch.long, device=device).fill_(SOS_token)
        decoder_hidden = encoder_hidden
        decoder_outputs = []
        attentions = []

        for i in range(MAX_LENGTH):
            decoder_output, decoder_hidden, attn_weights = self.forward_step(
                decoder_input, decoder_hidden, encoder_outputs
            )
            decoder_outputs.append(decoder_output)
            attentions.append(attn_weights)

            if target_tensor is not None:
                # Teacher forcing: Feed the target as the next input
                decoder_input = target_tensor[:, i].unsqueeze(1) # Teacher forcing
            else:
                # Without teacher forcing: use its own predictions as the next input
                _, topi = decoder_output.topk(1)
                decoder_input = topi.squeeze(-1).detach()  # detach from history as input

        decoder_outputs = torch.cat(decoder_outputs, dim=1)
        decoder_outputs = F.log_softmax(decoder_outputs, dim=-1)
        attentions = torch.cat(attentions, dim=1)

        return decoder_outputs, decoder_hidden, attentions


    def forward_step(self, input, hidden, encoder_outputs):
        embedded =  self.dropout(self.embedding(input))

        query = hidden.permute(1, 0, 2)
        context, attn_weights = self.attention(query, encoder_outputs)
        input_gru = torch.cat((embedded, context), dim=2)

        output, hidden = self.gru(input_gru, hidden)
        output = self.out(output)

        return output, hidden, attn_weights


def indexesFromSentence(lang, sentence):
    return [lang.word2index[word] for word in sentence.split(' ')]

def tensorFromSentence(lang, sentence):
    indexes = indexesFromSentence(lang, sentence)
    indexes.append(EOS_token)
    return torch.tensor(indexes, dtype=torch.long, device=device).view(1, -1)


def get_dataloader(batch_size):
    input_lang, output_lang = Lang('fra'), Lang('eng')
    for inp, tgt in PAIRS:
        input_lang.addSentence(inp)
        output_lang.addSentence(tgt)
    pairs = PAIRS

    n = len(pairs)
    input_ids = np.zeros((n, MAX_LENGTH), dtype=np.int32)
    target_ids = np.zeros((n, MAX_LENGTH), dtype=np.int32)

    for idx, (inp, tgt) in enumerate(pairs):
        inp_ids = indexesFromSentence(input_lang, inp)
        tgt_ids = indexesFromSentence(output_lang, tgt)
        inp_ids.append(EOS_token)
        tgt_ids.append(EOS_token)
        input_ids[idx, :len(inp_ids)] = inp_ids
        target_ids[idx, :len(tgt_ids)] = tgt_ids

    # upstream: torch.LongTensor(input_ids), which ferro lacks (test_port_gaps.py)
    train_data = TensorDataset(torch.tensor(input_ids, dtype=torch.long).to(device),
                               torch.tensor(target_ids, dtype=torch.long).to(device))

    train_sampler = RandomSampler(train_data) if SHUFFLE else SequentialSampler(train_data)
    train_dataloader = DataLoader(train_data, sampler=train_sampler, batch_size=batch_size)
    return input_lang, output_lang, train_dataloader


def train_epoch(dataloader, encoder, decoder, encoder_optimizer,
          decoder_optimizer, criterion):

    total_loss = 0
    for data in dataloader:
        input_tensor, target_tensor = data

        encoder_optimizer.zero_grad()
        decoder_optimizer.zero_grad()

        encoder_outputs, encoder_hidden = encoder(input_tensor)
        decoder_outputs, _, _ = decoder(encoder_outputs, encoder_hidden, target_tensor)

        loss = criterion(
            decoder_outputs.view(-1, decoder_outputs.size(-1)),
            target_tensor.view(-1)
        )
        loss.backward()

        encoder_optimizer.step()
        decoder_optimizer.step()

        total_loss += loss.item()

    return total_loss / len(dataloader)


def train(train_dataloader, encoder, decoder, n_epochs, learning_rate=0.001):
    losses = []
    encoder_optimizer = optim.Adam(encoder.parameters(), lr=learning_rate)
    decoder_optimizer = optim.Adam(decoder.parameters(), lr=learning_rate)
    criterion = nn.NLLLoss()

    for epoch in range(1, n_epochs + 1):
        loss = train_epoch(train_dataloader, encoder, decoder, encoder_optimizer, decoder_optimizer, criterion)
        losses.append(loss)
    return losses


def evaluate(encoder, decoder, sentence, input_lang, output_lang):
    with torch.no_grad():
        input_tensor = tensorFromSentence(input_lang, sentence)

        encoder_outputs, encoder_hidden = encoder(input_tensor)
        decoder_outputs, decoder_hidden, decoder_attn = decoder(encoder_outputs, encoder_hidden)

        _, topi = decoder_outputs.topk(1)
        decoded_ids = topi.squeeze()

        decoded_words = []
        for idx in decoded_ids:
            if idx.item() == EOS_token:
                decoded_words.append('<EOS>')
                break
            decoded_words.append(output_lang.index2word[idx.item()])
    return decoded_words, decoder_attn


hidden_size = 32
batch_size = 8

input_lang, output_lang, train_dataloader = get_dataloader(batch_size)

encoder = EncoderRNN(input_lang.n_words, hidden_size, dropout_p=DROPOUT).to(device)
decoder = AttnDecoderRNN(hidden_size, output_lang.n_words, dropout_p=DROPOUT).to(device)
if INIT is not None:
    encoder.load_state_dict({k: torch.from_numpy(v) for k, v in INIT[0].items()})
    decoder.load_state_dict({k: torch.from_numpy(v) for k, v in INIT[1].items()})

LOSSES = train(train_dataloader, encoder, decoder, EPOCHS, learning_rate=0.01)
encoder.eval()
decoder.eval()
DECODED, ATTN = evaluate(encoder, decoder, PAIRS[0][0], input_lang, output_lang)
ATTN = ATTN.numpy()
STATES = [{k: v.detach().numpy().copy() for k, v in m.state_dict().items()} for m in (encoder, decoder)]
"""

FRA = ["je", "tu", "il", "elle", "suis", "es", "est", "grand", "petit", "content", "triste", "ici"]
ENG = ["i", "you", "he", "she", "am", "are", "is", "tall", "small", "happy", "sad", "here"]


def _pairs(n=32, seed=0):
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(n):
        idx = rng.integers(0, len(FRA), size=rng.integers(2, 6))
        pairs.append((" ".join(FRA[i] for i in idx), " ".join(ENG[i] for i in idx)))
    return pairs


def _run(imports, **params):
    env = {"PAIRS": _pairs(), "SHUFFLE": False, "DROPOUT": 0.0, "INIT": None, "EPOCHS": 1, **params}
    exec(compile(imports + PROGRAM, "seq2seq_port", "exec"), env)
    return env


def test_the_translation_model_learns_the_toy_language():
    env = _run(FERRO_IMPORTS, SHUFFLE=True, DROPOUT=0.1, EPOCHS=30)
    losses = env["LOSSES"]
    assert np.all(np.isfinite(losses)) and losses[-1] < 0.1 * losses[0]
    # Greedy decoding of the first training sentence, stopping at EOS.
    want = env["PAIRS"][0][1].split(" ") + ["<EOS>"]
    assert env["DECODED"] == want
    attn = env["ATTN"]
    assert attn.shape == (1, 6, len(want)) and np.allclose(attn.sum(-1), 1.0, atol=1e-5)


@pytest.mark.torch
def test_the_translation_model_matches_torch():
    pytest.importorskip("torch")
    init = _run(FERRO_IMPORTS, EPOCHS=0)["STATES"]
    ours = _run(FERRO_IMPORTS, EPOCHS=3, INIT=init)
    theirs = _run(TORCH_IMPORTS, EPOCHS=3, INIT=init)
    np.testing.assert_allclose(ours["LOSSES"], theirs["LOSSES"], rtol=1e-4)
    assert ours["DECODED"] == theirs["DECODED"]
    np.testing.assert_allclose(ours["ATTN"], theirs["ATTN"], rtol=1e-3, atol=1e-5)
    for a, b in zip(ours["STATES"], theirs["STATES"], strict=True):
        assert sorted(a) == sorted(b)
        for k, v in b.items():
            if k == "attention.Va.bias":
                # A zero true gradient (the softmax over the scores ignores a shift of all of
                # them): rounding noise in both, which Adam turns into lr-sized steps.
                continue
            np.testing.assert_allclose(a[k], v, rtol=1e-3, atol=1e-4, err_msg=k)
