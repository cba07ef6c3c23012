# ruff: noqa: E501  (the ported program keeps its upstream line lengths)
"""PyTorch's "Language Translation with nn.Transformer and torchtext" tutorial, run as one source
with only its import lines changed, on a generated language pair instead of Multi30k (each
"German" word has one "English" word, in the same order; torchtext's tokenizers and vocabularies
are ``str.split`` and dicts): ``PositionalEncoding`` (a buffer filled through ``0::2``/``1::2``
slices, ``unsqueeze(-2)``, sliced by ``token_embedding.size(0)``), ``TokenEmbedding``
(``tokens.long()``), ``Seq2SeqTransformer`` over ``nn.Transformer`` with ``encode``/``decode``
through ``transformer.encoder``/``.decoder``; ``generate_square_subsequent_mask``
(``triu(...) == 1``, ``transpose``, ``masked_fill`` with ``-inf``), ``create_mask`` (a bool
zero ``src_mask`` beside a float ``tgt_mask`` and bool key-padding masks from ``(src == PAD_IDX)
.transpose(0, 1)``); ``xavier_uniform_`` on every ``p.dim() > 1``; ``CrossEntropyLoss(
ignore_index=PAD_IDX)``; Adam with ``betas=(0.9, 0.98), eps=1e-9``; ``collate_fn`` with
``torch.cat`` of BOS/ids/EOS and ``pad_sequence(padding_value=PAD_IDX)``; ``train_epoch``/
``evaluate`` with ``len(list(dataloader))``; ``greedy_decode`` (``torch.ones(1, 1).fill_(...)
.type(torch.long)``, a float mask ``.type(torch.bool)``, ``torch.max(prob, dim=1)``,
``type_as(src.data)``) and ``translate``. Smaller model (``EMB_SIZE`` 32, two heads, two layers
each, batches of 8) and dropout as a parameter (0 for the step-by-step comparison with PyTorch from the same
weights).
"""

import numpy as np
import pytest

TORCH_IMPORTS = """\
from torch import Tensor
import torch
import torch.nn as nn
from torch.nn import Transformer
from torch.nn.utils.rnn import pad_sequence
from torch.utils.data import DataLoader
import math
"""

FERRO_IMPORTS = """\
from ferro import Tensor
import ferro as torch
import ferro.nn as nn
from ferro.nn import Transformer
from ferro.nn.utils.rnn import pad_sequence
from ferro.utils.data import DataLoader
import math
"""

PROGRAM = """
SRC_LANGUAGE = 'de'
TGT_LANGUAGE = 'en'

# Place-holders
token_transform = {}
vocab_transform = {}

UNK_IDX, PAD_IDX, BOS_IDX, EOS_IDX = 0, 1, 2, 3
special_symbols = ['<unk>', '<pad>', '<bos>', '<eos>']

for ln in [SRC_LANGUAGE, TGT_LANGUAGE]:
    token_transform[ln] = str.split  # stands in for get_tokenizer('spacy', ...)
    vocab_transform[ln] = VOCABS[ln]  # stands in for build_vocab_from_iterator(...)

DEVICE = torch.device('cuda' if torch.cuda.is_available() else 'cpu')


# helper Module that adds positional encoding to the token embedding to introduce a notion of word order.
class PositionalEncoding(nn.Module):
    def __init__(self,
                 emb_size: int,
                 dropout: float,
                 maxlen: int = 5000):
        super(PositionalEncoding, self).__init__()
        den = torch.exp(- torch.arange(0, emb_size, 2)* math.log(10000) / emb_size)
        pos = torch.arange(0, maxlen).reshape(maxlen, 1)
        pos_embedding = torch.zeros((maxlen, emb_size))
        pos_embedding[:, 0::2] = torch.sin(pos * den)
        pos_embedding[:, 1::2] = torch.cos(pos * den)
        pos_embedding = pos_embedding.unsqueeze(-2)

        self.dropout = nn.Dropout(dropout)
        self.register_buffer('pos_embedding', pos_embedding)

    def forward(self, token_embedding: Tensor):
        return self.dropout(token_embedding + self.pos_embedding[:token_embedding.size(0), :])

# helper Module to convert tensor of input indices into corresponding tensor of token embeddings
class TokenEmbedding(nn.Module):
    def __init__(self, vocab_size: int, emb_size):
        super(TokenEmbedding, self).__init__()
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.emb_size = emb_size

    def forward(self, tokens: Tensor):
        return self.embedding(tokens.long()) * math.sqrt(self.emb_size)

# Seq2Seq Network
class Seq2SeqTransformer(nn.Module):
    def __init__(self,
                 num_encoder_layers: int,
                 num_decoder_layers: int,
                 emb_size: int,
                 nhead: int,
                 src_vocab_size: int,
                 tgt_vocab_size: int,
                 dim_feedforward: int = 512,
                 dropout: float = 0.1):
        super(Seq2SeqTransformer, self).__init__()
        self.transformer = Transformer(d_model=emb_size,
                                       nhead=nhead,
                                       num_encoder_layers=num_encoder_layers,
                                       num_decoder_layers=num_decoder_layers,
                                       dim_feedforward=dim_feedforward,
                                       dropout=dropout)
        self.generator = nn.Linear(emb_size, tgt_vocab_size)
        self.src_tok_emb = TokenEmbedding(src_vocab_size, emb_size)
        self.tgt_tok_emb = TokenEmbedding(tgt_vocab_size, emb_size)
        self.positional_encoding = PositionalEncoding(
            emb_size, dropout=dropout)

    def forward(self,
                src: Tensor,
                trg: Tensor,
                src_mask: Tensor,
                tgt_mask: Tensor,
                src_padding_mask: Tensor,
                tgt_padding_mask: Tensor,
                memory_key_padding_mask: Tensor):
        src_emb = self.positional_encoding(self.src_tok_emb(src))
        tgt_emb = self.positional_encoding(self.tgt_tok_emb(trg))
        outs = self.transformer(src_emb, tgt_emb, src_mask, tgt_mask, None,
                                src_padding_mask, tgt_padding_mask, memory_key_padding_mask)
        return self.generator(outs)

    def encode(self, src: Tensor, src_mask: Tensor):
        return self.transformer.encoder(self.positional_encoding(
                            self.src_tok_emb(src)), src_mask)

    def decode(self, tgt: Tensor, memory: Tensor, tgt_mask: Tensor):
        return self.transformer.decoder(self.positional_encoding(
                          self.tgt_tok_emb(tgt)), memory,
                          tgt_mask)


def generate_square_subsequent_mask(sz):
    mask = (torch.triu(torch.ones((sz, sz), device=DEVICE)) == 1).transpose(0, 1)
    mask = mask.float().masked_fill(mask == 0, float('-inf')).masked_fill(mask == 1, float(0.0))
    return mask


def create_mask(src, tgt):
    src_seq_len = src.shape[0]
    tgt_seq_len = tgt.shape[0]

    tgt_mask = generate_square_subsequent_mask(tgt_seq_len)
    src_mask = torch.zeros((src_seq_len, src_seq_len),device=DEVICE).type(torch.bool)

    src_padding_mask = (src == PAD_IDX).transpose(0, 1)
    tgt_padding_mask = (tgt == PAD_IDX).transpose(0, 1)
    return src_mask, tgt_mask, src_padding_mask, tgt_padding_mask


torch.manual_seed(0)

SRC_VOCAB_SIZE = len(vocab_transform[SRC_LANGUAGE])
TGT_VOCAB_SIZE = len(vocab_transform[TGT_LANGUAGE])
EMB_SIZE = 32
NHEAD = 2
FFN_HID_DIM = 64
BATCH_SIZE = 8
NUM_ENCODER_LAYERS = 2
NUM_DECODER_LAYERS = 2

transformer = Seq2SeqTransformer(NUM_ENCODER_LAYERS, NUM_DECODER_LAYERS, EMB_SIZE,
                                 NHEAD, SRC_VOCAB_SIZE, TGT_VOCAB_SIZE, FFN_HID_DIM, dropout=DROPOUT)

for p in transformer.parameters():
    if p.dim() > 1:
        nn.init.xavier_uniform_(p)
if INIT is not None:  # harness: the same start for both libraries
    transformer.load_state_dict({k: torch.from_numpy(v) for k, v in INIT.items()})
STATE = {k: v.detach().cpu().numpy().copy() for k, v in transformer.state_dict().items()}

transformer = transformer.to(DEVICE)

loss_fn = torch.nn.CrossEntropyLoss(ignore_index=PAD_IDX)

optimizer = torch.optim.Adam(transformer.parameters(), lr=LR, betas=(0.9, 0.98), eps=1e-9)


# helper function to club together sequential operations
def sequential_transforms(*transforms):
    def func(txt_input):
        for transform in transforms:
            txt_input = transform(txt_input)
        return txt_input
    return func

# function to add BOS/EOS and create tensor for input sequence indices
def tensor_transform(token_ids):
    return torch.cat((torch.tensor([BOS_IDX]),
                      torch.tensor(token_ids),
                      torch.tensor([EOS_IDX])))

def lookup(vocab):  # stands in for a torchtext Vocab's __call__
    return lambda tokens: [vocab.get(t, UNK_IDX) for t in tokens]

# ``src`` and ``tgt`` language text transforms to convert raw strings into tensors indices
text_transform = {}
for ln in [SRC_LANGUAGE, TGT_LANGUAGE]:
    text_transform[ln] = sequential_transforms(token_transform[ln], #Tokenization
                                               lookup(vocab_transform[ln]), #Numericalization
                                               tensor_transform) # Add BOS/EOS and create tensor


# function to collate data samples into batch tensors
def collate_fn(batch):
    src_batch, tgt_batch = [], []
    for src_sample, tgt_sample in batch:
        src_batch.append(text_transform[SRC_LANGUAGE](src_sample.rstrip("\\n")))
        tgt_batch.append(text_transform[TGT_LANGUAGE](tgt_sample.rstrip("\\n")))

    src_batch = pad_sequence(src_batch, padding_value=PAD_IDX)
    tgt_batch = pad_sequence(tgt_batch, padding_value=PAD_IDX)
    return src_batch, tgt_batch


def train_epoch(model, optimizer):
    model.train()
    losses = 0
    train_iter = TRAIN_PAIRS
    train_dataloader = DataLoader(train_iter, batch_size=BATCH_SIZE, collate_fn=collate_fn)

    for src, tgt in train_dataloader:
        src = src.to(DEVICE)
        tgt = tgt.to(DEVICE)

        tgt_input = tgt[:-1, :]

        src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input)

        logits = model(src, tgt_input, src_mask, tgt_mask,src_padding_mask, tgt_padding_mask, src_padding_mask)

        optimizer.zero_grad()

        tgt_out = tgt[1:, :]
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
        loss.backward()

        optimizer.step()
        losses += loss.item()
        STEP_LOSSES.append(loss.item())

    return losses / len(list(train_dataloader))


def evaluate(model):
    model.eval()
    losses = 0

    val_iter = VAL_PAIRS
    val_dataloader = DataLoader(val_iter, batch_size=BATCH_SIZE, collate_fn=collate_fn)

    for src, tgt in val_dataloader:
        src = src.to(DEVICE)
        tgt = tgt.to(DEVICE)

        tgt_input = tgt[:-1, :]

        src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = create_mask(src, tgt_input)

        logits = model(src, tgt_input, src_mask, tgt_mask,src_padding_mask, tgt_padding_mask, src_padding_mask)

        tgt_out = tgt[1:, :]
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
        losses += loss.item()

    return losses / len(list(val_dataloader))


STEP_LOSSES, HISTORY = [], []
NUM_EPOCHS = EPOCHS
for epoch in range(1, NUM_EPOCHS+1):
    train_loss = train_epoch(transformer, optimizer)
    val_loss = evaluate(transformer)
    print((f"Epoch: {epoch}, Train loss: {train_loss:.3f}, Val loss: {val_loss:.3f}"))
    HISTORY.append((train_loss, val_loss))


# function to generate output sequence using greedy algorithm
def greedy_decode(model, src, src_mask, max_len, start_symbol):
    src = src.to(DEVICE)
    src_mask = src_mask.to(DEVICE)

    memory = model.encode(src, src_mask)
    ys = torch.ones(1, 1).fill_(start_symbol).type(torch.long).to(DEVICE)
    for i in range(max_len-1):
        memory = memory.to(DEVICE)
        tgt_mask = (generate_square_subsequent_mask(ys.size(0))
                    .type(torch.bool)).to(DEVICE)
        out = model.decode(ys, memory, tgt_mask)
        out = out.transpose(0, 1)
        prob = model.generator(out[:, -1])
        _, next_word = torch.max(prob, dim=1)
        next_word = next_word.item()

        ys = torch.cat([ys,
                        torch.ones(1, 1).type_as(src.data).fill_(next_word)], dim=0)
        if next_word == EOS_IDX:
            break
    return ys


# actual function to translate input sentence into target language
def translate(model: torch.nn.Module, src_sentence: str):
    model.eval()
    src = text_transform[SRC_LANGUAGE](src_sentence).view(-1, 1)
    num_tokens = src.shape[0]
    src_mask = (torch.zeros(num_tokens, num_tokens)).type(torch.bool)
    tgt_tokens = greedy_decode(
        model,  src, src_mask, max_len=num_tokens + 5, start_symbol=BOS_IDX).flatten()
    itos = {i: w for w, i in vocab_transform[TGT_LANGUAGE].items()}  # lookup_tokens
    return " ".join([itos[int(i)] for i in list(tgt_tokens.cpu().numpy())]).replace("<bos>", "").replace("<eos>", "")

TRANSLATIONS = [translate(transformer, src) for src, _ in VAL_PAIRS[:4]]
"""

SRC_WORDS = [
    "ein",
    "mann",
    "eine",
    "frau",
    "hund",
    "sieht",
    "isst",
    "rot",
    "blau",
    "gross",
    "klein",
    "haus",
]
TGT_WORDS = [
    "a",
    "man",
    "a",
    "woman",
    "dog",
    "sees",
    "eats",
    "red",
    "blue",
    "big",
    "small",
    "house",
]


def _data(n_train=96, n_val=16, seed=0):
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(n_train + n_val):
        idx = rng.integers(0, len(SRC_WORDS), rng.integers(2, 6))
        pairs.append((" ".join(SRC_WORDS[i] for i in idx), " ".join(TGT_WORDS[i] for i in idx)))
    specials = ["<unk>", "<pad>", "<bos>", "<eos>"]
    vocabs = {
        ln: {w: i for i, w in enumerate(specials + sorted(set(words)))}
        for ln, words in (("de", SRC_WORDS), ("en", TGT_WORDS))
    }
    return pairs[:n_train], pairs[n_train:], vocabs


def _run(imports, **params):
    train, val, vocabs = _data()
    env = {"TRAIN_PAIRS": train, "VAL_PAIRS": val, "VOCABS": vocabs, "INIT": None}
    env.update({"DROPOUT": 0.1, "EPOCHS": 6, "LR": 1e-3, **params})
    exec(compile(imports + PROGRAM, "translation_transformer_port", "exec"), env)
    return env


def test_the_translation_transformer_learns_the_toy_language():
    env = _run(FERRO_IMPORTS, LR=2e-3, EPOCHS=15)
    history = np.array(env["HISTORY"])
    assert len(env["STEP_LOSSES"]) == 15 * 12 and np.all(np.isfinite(history))
    assert history[-1, 0] < 0.6 * history[0, 0] and history[-1, 1] < 0.65 * history[0, 1]
    # greedy decoding stops at EOS or num_tokens + 5 and gives target-language words only
    _, val, vocabs = _data()
    for got, (src, _) in zip(env["TRANSLATIONS"], val[:4], strict=True):
        words = got.split()
        assert 0 < len(words) <= len(src.split()) + 5 and set(words) <= set(vocabs["en"])


@pytest.mark.torch
def test_the_translation_transformer_matches_torch():
    pytest.importorskip("torch")
    init = _run(FERRO_IMPORTS, EPOCHS=0)["STATE"]
    ours = _run(FERRO_IMPORTS, DROPOUT=0.0, EPOCHS=2, INIT=init)
    theirs = _run(TORCH_IMPORTS, DROPOUT=0.0, EPOCHS=2, INIT=init)
    np.testing.assert_allclose(ours["STEP_LOSSES"], theirs["STEP_LOSSES"], rtol=2e-4, atol=1e-5)
    np.testing.assert_allclose(ours["HISTORY"], theirs["HISTORY"], rtol=2e-4, atol=1e-5)
    assert ours["TRANSLATIONS"] == theirs["TRANSLATIONS"]
