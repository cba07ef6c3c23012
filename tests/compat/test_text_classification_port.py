# ruff: noqa: E501  (the ported program keeps its upstream line lengths)
"""The PyTorch "Text classification with the torchtext library" tutorial (AG_NEWS with
``nn.EmbeddingBag``), run as one source with only its import lines changed, on a generated
four-topic corpus instead of AG_NEWS (torchtext's tokenizer and vocab are replaced by
``str.split`` and a dict): ``TextClassificationModel`` (``nn.EmbeddingBag(vocab_size,
embed_dim, sparse=False)`` fed a flat ``text`` and ``offsets``, ``init_weights`` with
``weight.data.uniform_`` and ``bias.data.zero_()``), ``collate_batch`` (``torch.tensor(...,
dtype=torch.int64)`` per text, ``torch.tensor(offsets[:-1]).cumsum(dim=0)``, ``torch.cat``),
``DataLoader(collate_fn=...)`` over ``random_split`` parts, SGD at ``lr=5`` with
``StepLR(1.0, gamma=0.1)`` stepped when the validation accuracy stalls,
``clip_grad_norm_(model.parameters(), 0.1)``, ``(predicted_label.argmax(1) == label).sum()
.item()``, and ``predict`` on a single text with ``torch.tensor([0])`` as its offsets.

For the comparison with PyTorch, both start from the same weights, shuffling is off, and
``random_split`` is replaced in both libraries by a fixed split (their generators differ).
"""

import numpy as np
import pytest

TORCH_IMPORTS = """\
import time
import torch
from torch import nn
from torch.utils.data import DataLoader
from torch.utils.data.dataset import random_split
"""

FERRO_IMPORTS = """\
import time
import ferro as torch
from ferro import nn
from ferro.utils.data import DataLoader
from ferro.utils.data.dataset import random_split
"""

PROGRAM = """
tokenizer = str.split
vocab = {word: i for i, word in enumerate(VOCAB)}
text_pipeline = lambda x: [vocab[token] for token in tokenizer(x)]
label_pipeline = lambda x: int(x) - 1

device = torch.device("cuda" if torch.cuda.is_available() and not NO_ACCEL else "cpu")


def collate_batch(batch):
    label_list, text_list, offsets = [], [], [0]
    for _label, _text in batch:
        label_list.append(label_pipeline(_label))
        processed_text = torch.tensor(text_pipeline(_text), dtype=torch.int64)
        text_list.append(processed_text)
        offsets.append(processed_text.size(0))
    label_list = torch.tensor(label_list, dtype=torch.int64)
    offsets = torch.tensor(offsets[:-1]).cumsum(dim=0)
    text_list = torch.cat(text_list)
    return label_list.to(device), text_list.to(device), offsets.to(device)


class TextClassificationModel(nn.Module):
    def __init__(self, vocab_size, embed_dim, num_class):
        super(TextClassificationModel, self).__init__()
        self.embedding = nn.EmbeddingBag(vocab_size, embed_dim, sparse=False)
        self.fc = nn.Linear(embed_dim, num_class)
        self.init_weights()

    def init_weights(self):
        initrange = 0.5
        self.embedding.weight.data.uniform_(-initrange, initrange)
        self.fc.weight.data.uniform_(-initrange, initrange)
        self.fc.bias.data.zero_()

    def forward(self, text, offsets):
        embedded = self.embedding(text, offsets)
        return self.fc(embedded)


num_class = len(set([label for (label, text) in TRAIN_ITER]))
vocab_size = len(vocab)
emsize = 16
model = TextClassificationModel(vocab_size, emsize, num_class).to(device)
if INIT is not None:
    model.load_state_dict({k: torch.from_numpy(v) for k, v in INIT.items()})


def train(dataloader):
    model.train()
    total_acc, total_count = 0, 0
    log_interval = 5
    start_time = time.time()

    for idx, (label, text, offsets) in enumerate(dataloader):
        optimizer.zero_grad()
        predicted_label = model(text, offsets)
        loss = criterion(predicted_label, label)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
        optimizer.step()
        LOSSES.append(loss.item())
        total_acc += (predicted_label.argmax(1) == label).sum().item()
        total_count += label.size(0)
        if idx % log_interval == 0 and idx > 0:
            elapsed = time.time() - start_time
            print(
                "| epoch {:3d} | {:5d}/{:5d} batches "
                "| accuracy {:8.3f}".format(
                    epoch, idx, len(dataloader), total_acc / total_count
                )
            )
            total_acc, total_count = 0, 0
            start_time = time.time()


def evaluate(dataloader):
    model.eval()
    total_acc, total_count = 0, 0

    with torch.no_grad():
        for idx, (label, text, offsets) in enumerate(dataloader):
            predicted_label = model(text, offsets)
            loss = criterion(predicted_label, label)
            total_acc += (predicted_label.argmax(1) == label).sum().item()
            total_count += label.size(0)
    return total_acc / total_count


EPOCHS = 4
LR = 5
BATCH_SIZE = 8

criterion = torch.nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=LR)
scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1.0, gamma=0.1)
total_accu = None
train_dataset = list(TRAIN_ITER)
test_dataset = list(TEST_ITER)
num_train = int(len(train_dataset) * 0.95)
split_train_, split_valid_ = random_split(
    train_dataset, [num_train, len(train_dataset) - num_train]
)

train_dataloader = DataLoader(
    split_train_, batch_size=BATCH_SIZE, shuffle=SHUFFLE, collate_fn=collate_batch
)
valid_dataloader = DataLoader(
    split_valid_, batch_size=BATCH_SIZE, shuffle=SHUFFLE, collate_fn=collate_batch
)
test_dataloader = DataLoader(
    test_dataset, batch_size=BATCH_SIZE, shuffle=SHUFFLE, collate_fn=collate_batch
)

LOSSES, LRS, ACCS = [], [], []
for epoch in range(1, EPOCHS + 1):
    epoch_start_time = time.time()
    train(train_dataloader)
    accu_val = evaluate(valid_dataloader)
    if total_accu is not None and total_accu > accu_val:
        scheduler.step()
    else:
        total_accu = accu_val
    LRS.append(optimizer.param_groups[0]["lr"])
    ACCS.append(accu_val)
    print("-" * 59)
    print(
        "| end of epoch {:3d} | time: {:5.2f}s | "
        "valid accuracy {:8.3f} ".format(
            epoch, time.time() - epoch_start_time, accu_val
        )
    )
    print("-" * 59)

accu_test = evaluate(test_dataloader)
print("test accuracy {:8.3f}".format(accu_test))

topic_label = {1: "World", 2: "Sports", 3: "Business", 4: "Sci/Tec"}


def predict(text, text_pipeline):
    with torch.no_grad():
        text = torch.tensor(text_pipeline(text))
        output = model(text, torch.tensor([0]))
        return output.argmax(1).item() + 1


model = model.to("cpu")
PREDICTED = topic_label[predict(EXAMPLE, text_pipeline)]
STATE = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
"""

TOPICS = 4
WORDS_PER_TOPIC = 12
COMMON = ["the", "a", "of", "on", "in", "and", "to", "was"]
VOCAB = COMMON + [f"t{t}w{i}" for t in range(TOPICS) for i in range(WORDS_PER_TOPIC)]


def _corpus(n, seed):
    """``n`` (label, text) pairs: label in "1".."4", a text of 4-11 words, half of them words
    of its topic, the rest common words and words of other topics."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        topic = int(rng.integers(TOPICS))
        words = []
        for _ in range(int(rng.integers(4, 12))):
            r = rng.random()
            if r < 0.5:
                words.append(f"t{topic}w{rng.integers(WORDS_PER_TOPIC)}")
            elif r < 0.8:
                words.append(COMMON[rng.integers(len(COMMON))])
            else:
                words.append(f"t{rng.integers(TOPICS)}w{rng.integers(WORDS_PER_TOPIC)}")
        out.append((str(topic + 1), " ".join(words)))
    return out


def _init():
    rng = np.random.default_rng(5)
    return {
        "embedding.weight": rng.uniform(-0.5, 0.5, (len(VOCAB), 16)).astype(np.float32),
        "fc.weight": rng.uniform(-0.5, 0.5, (TOPICS, 16)).astype(np.float32),
        "fc.bias": np.zeros(TOPICS, np.float32),
    }


def _run(imports, init=None, shuffle=True):
    env = {
        "VOCAB": VOCAB,
        "TRAIN_ITER": _corpus(160, 0),
        "TEST_ITER": _corpus(40, 1),
        "EXAMPLE": " ".join(f"t1w{i}" for i in range(6)) + " the of",
        "INIT": init,
        "SHUFFLE": shuffle,
        "NO_ACCEL": True,
    }
    exec(compile(imports + PROGRAM, "text_classification_port", "exec"), env)
    return env


def test_the_text_classifier_learns_the_topics():
    env = _run(FERRO_IMPORTS)
    losses = env["LOSSES"]
    assert len(losses) == 4 * 19  # 152 training texts in batches of 8
    assert np.mean(losses[-10:]) < 0.5 * np.mean(losses[:5])
    assert env["accu_test"] > 0.8
    assert env["PREDICTED"] == "Sports"
    assert env["STATE"]["embedding.weight"].shape == (len(VOCAB), 16)


def _fixed_split(monkeypatch, module):
    from_module = module.utils.data

    def random_split(dataset, lengths):
        start, parts = 0, []
        for n in lengths:
            parts.append(from_module.Subset(dataset, list(range(start, start + n))))
            start += n
        return parts

    monkeypatch.setattr(from_module.dataset, "random_split", random_split)


@pytest.mark.torch
def test_the_text_classifier_matches_torch(monkeypatch):
    torch = pytest.importorskip("torch")
    import ferro

    _fixed_split(monkeypatch, ferro)
    ours = _run(FERRO_IMPORTS, init=_init(), shuffle=False)
    _fixed_split(monkeypatch, torch)
    theirs = _run(TORCH_IMPORTS, init=_init(), shuffle=False)
    np.testing.assert_allclose(ours["LOSSES"], theirs["LOSSES"], rtol=1e-4, atol=1e-5)
    assert ours["LRS"] == pytest.approx(theirs["LRS"])
    assert ours["ACCS"] == theirs["ACCS"] and ours["accu_test"] == theirs["accu_test"]
    for k, v in theirs["STATE"].items():
        np.testing.assert_allclose(ours["STATE"][k], v, rtol=1e-4, atol=1e-5)
