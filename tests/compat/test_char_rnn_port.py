# ruff: noqa: E501  (the ported programs keep their upstream line lengths)
"""PyTorch's "NLP From Scratch" char-RNN tutorials, run as one source each with only the import
lines changed, on generated names (four made-up "languages", each with its own letters and
endings) instead of the names data set:

* classifying names (char_rnn_classification_tutorial.py): a ``Dataset`` subclass holding one
  ``torch.tensor([label_index], dtype=torch.long)`` and one one-hot ``lineToTensor`` (chained
  setitem ``tensor[li][0][idx] = 1``) per name, ``random_split(alldata, [.85, .15],
  generator=torch.Generator(device=device).manual_seed(2024))`` with fractions,
  ``torch.set_default_device``, ``CharRNN`` (``nn.RNN`` whose final ``hidden[0]`` feeds a Linear
  and ``LogSoftmax(dim=1)``), the loop over ``np.array_split`` batches of shuffled indices (NumPy
  integers indexing a ``Subset``) summing per-name losses, ``clip_grad_norm_``, SGD, and the
  confusion matrix under ``no_grad`` (``confusion[label_i][guess_i] += 1``, rows divided by
  their sums, ``topk(1)`` and ``top_i[0].item()``).
* generating names (char_rnn_generation_tutorial.py): the ``RNN`` of ``i2h``/``i2o``/``o2o``
  over ``torch.cat((category, input, hidden), 1)`` with ``Dropout`` and ``LogSoftmax``,
  ``torch.LongTensor(letter_indexes)`` targets made 2-D by ``unsqueeze_(-1)``, the loss
  accumulated into ``torch.Tensor([0])`` with ``+=``, the manual update
  ``p.data.add_(p.grad.data, alpha=-learning_rate)``, and ``sample`` under ``no_grad`` indexing a
  string with a 0-d tensor (``all_letters[topi]``) and comparing it with an int.

For the comparison with PyTorch both start from the same weights, the generator's dropout is 0,
and ``random_split`` is replaced in both libraries by a fixed split (their generators differ;
Python's ``random`` drives the rest and is seeded the same).
"""

import random
import string
import sys

import numpy as np
import pytest

TORCH_IMPORTS = """\
import math
import random
import time
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import Dataset
"""

FERRO_IMPORTS = """\
import math
import random
import time
import numpy as np
import ferro as torch
import ferro.nn as nn
from ferro.utils.data import Dataset
"""

CLASSIFICATION = """
device = torch.device('cpu')
torch.set_default_device(device)

allowed_characters = string.ascii_letters + " .,;'"
n_letters = len(allowed_characters)


def letterToIndex(letter):
    if letter not in allowed_characters:
        return allowed_characters.find("_")
    else:
        return allowed_characters.find(letter)


def lineToTensor(line):
    tensor = torch.zeros(len(line), 1, n_letters)
    for li, letter in enumerate(line):
        tensor[li][0][letterToIndex(letter)] = 1
    return tensor


class NamesDataset(Dataset):

    def __init__(self, pairs):
        self.data = []
        self.data_tensors = []
        self.labels = []
        self.labels_tensors = []

        labels_set = set()
        for label, name in pairs:
            self.data.append(name)
            self.data_tensors.append(lineToTensor(name))
            self.labels.append(label)
            labels_set.add(label)

        self.labels_uniq = sorted(labels_set)
        for idx in range(len(self.labels)):
            temp_tensor = torch.tensor([self.labels_uniq.index(self.labels[idx])], dtype=torch.long)
            self.labels_tensors.append(temp_tensor)

    def __len__(self):
        return len(self.data)

    def __getitem__(self, idx):
        data_item = self.data[idx]
        data_label = self.labels[idx]
        data_tensor = self.data_tensors[idx]
        label_tensor = self.labels_tensors[idx]

        return label_tensor, data_tensor, data_label, data_item


alldata = NamesDataset(PAIRS)
train_set, test_set = torch.utils.data.random_split(alldata, [.85, .15], generator=torch.Generator(device=device).manual_seed(2024))


class CharRNN(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super(CharRNN, self).__init__()

        self.rnn = nn.RNN(input_size, hidden_size)
        self.h2o = nn.Linear(hidden_size, output_size)
        self.softmax = nn.LogSoftmax(dim=1)

    def forward(self, line_tensor):
        rnn_out, hidden = self.rnn(line_tensor)
        output = self.h2o(hidden[0])
        output = self.softmax(output)

        return output


n_hidden = 32
rnn = CharRNN(n_letters, n_hidden, len(alldata.labels_uniq))
if INIT is not None:
    rnn.load_state_dict({k: torch.from_numpy(v) for k, v in INIT.items()})


def label_from_output(output, output_labels):
    top_n, top_i = output.topk(1)
    label_i = top_i[0].item()
    return output_labels[label_i], label_i


def train(rnn, training_data, n_epoch=10, n_batch_size=64, report_every=50, learning_rate=0.2, criterion=nn.NLLLoss()):
    current_loss = 0
    all_losses = []
    rnn.train()
    optimizer = torch.optim.SGD(rnn.parameters(), lr=learning_rate)

    start = time.time()
    print(f"training on data set with n = {len(training_data)}")

    for iter in range(1, n_epoch + 1):
        rnn.zero_grad()

        batches = list(range(len(training_data)))
        random.shuffle(batches)
        batches = np.array_split(batches, len(batches) // n_batch_size)

        for idx, batch in enumerate(batches):
            batch_loss = 0
            for i in batch:
                (label_tensor, text_tensor, label, text) = training_data[i]
                output = rnn.forward(text_tensor)
                loss = criterion(output, label_tensor)
                batch_loss += loss

            batch_loss.backward()
            nn.utils.clip_grad_norm_(rnn.parameters(), 3)
            optimizer.step()
            optimizer.zero_grad()

            current_loss += batch_loss.item() / len(batch)

        all_losses.append(current_loss / len(batches))
        if iter % report_every == 0:
            print(f"{iter} ({iter / n_epoch:.0%}): \\t average batch loss = {all_losses[-1]}")
        current_loss = 0

    return all_losses


def evaluate(rnn, testing_data, classes):
    confusion = torch.zeros(len(classes), len(classes))

    rnn.eval()
    with torch.no_grad():
        for i in range(len(testing_data)):
            (label_tensor, text_tensor, label, text) = testing_data[i]
            output = rnn(text_tensor)
            guess, guess_i = label_from_output(output, classes)
            label_i = classes.index(label)
            confusion[label_i][guess_i] += 1

    for i in range(len(classes)):
        denom = confusion[i].sum()
        if denom > 0:
            confusion[i] = confusion[i] / denom

    return confusion


random.seed(0)
all_losses = train(rnn, train_set, n_epoch=EPOCHS, learning_rate=0.15, n_batch_size=BATCH, report_every=1)
CONFUSION = evaluate(rnn, test_set, classes=alldata.labels_uniq).numpy()
GUESS = label_from_output(rnn(lineToTensor(PROBE)), alldata.labels_uniq)[0]
STATE = {k: v.detach().numpy().copy() for k, v in rnn.state_dict().items()}
"""

GENERATION = """
all_letters = string.ascii_letters + " .,;'-"
n_letters = len(all_letters) + 1  # Plus EOS marker
category_lines = {}
for category, name in PAIRS:
    category_lines.setdefault(category, []).append(name)
all_categories = sorted(category_lines)
n_categories = len(all_categories)


class RNN(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super(RNN, self).__init__()
        self.hidden_size = hidden_size

        self.i2h = nn.Linear(n_categories + input_size + hidden_size, hidden_size)
        self.i2o = nn.Linear(n_categories + input_size + hidden_size, output_size)
        self.o2o = nn.Linear(hidden_size + output_size, output_size)
        self.dropout = nn.Dropout(DROPOUT)
        self.softmax = nn.LogSoftmax(dim=1)

    def forward(self, category, input, hidden):
        input_combined = torch.cat((category, input, hidden), 1)
        hidden = self.i2h(input_combined)
        output = self.i2o(input_combined)
        output_combined = torch.cat((hidden, output), 1)
        output = self.o2o(output_combined)
        output = self.dropout(output)
        output = self.softmax(output)
        return output, hidden

    def initHidden(self):
        return torch.zeros(1, self.hidden_size)


def randomChoice(l):
    return l[random.randint(0, len(l) - 1)]


def randomTrainingPair():
    category = randomChoice(all_categories)
    line = randomChoice(category_lines[category])
    return category, line


def categoryTensor(category):
    li = all_categories.index(category)
    tensor = torch.zeros(1, n_categories)
    tensor[0][li] = 1
    return tensor


def inputTensor(line):
    tensor = torch.zeros(len(line), 1, n_letters)
    for li in range(len(line)):
        letter = line[li]
        tensor[li][0][all_letters.find(letter)] = 1
    return tensor


def targetTensor(line):
    letter_indexes = [all_letters.find(line[li]) for li in range(1, len(line))]
    letter_indexes.append(n_letters - 1)  # EOS
    return torch.LongTensor(letter_indexes)


def randomTrainingExample():
    category, line = randomTrainingPair()
    category_tensor = categoryTensor(category)
    input_line_tensor = inputTensor(line)
    target_line_tensor = targetTensor(line)
    return category_tensor, input_line_tensor, target_line_tensor


criterion = nn.NLLLoss()

learning_rate = 0.0005 * 40


def train(category_tensor, input_line_tensor, target_line_tensor):
    target_line_tensor.unsqueeze_(-1)
    hidden = rnn.initHidden()

    rnn.zero_grad()

    loss = torch.Tensor([0])  # you can also just simply use ``loss = 0``

    for i in range(input_line_tensor.size(0)):
        output, hidden = rnn(category_tensor, input_line_tensor[i], hidden)
        l = criterion(output, target_line_tensor[i])
        loss += l

    loss.backward()

    for p in rnn.parameters():
        p.data.add_(p.grad.data, alpha=-learning_rate)

    return output, loss.item() / input_line_tensor.size(0)


def timeSince(since):
    now = time.time()
    s = now - since
    m = math.floor(s / 60)
    s -= m * 60
    return '%dm %ds' % (m, s)


rnn = RNN(n_letters, 32, n_letters)
if INIT is not None:
    rnn.load_state_dict({k: torch.from_numpy(v) for k, v in INIT.items()})

random.seed(0)
n_iters = ITERS
print_every = 50
plot_every = 25
all_losses = []
total_loss = 0  # Reset every ``plot_every`` ``iters``

start = time.time()

for iter in range(1, n_iters + 1):
    output, loss = train(*randomTrainingExample())
    total_loss += loss

    if iter % print_every == 0:
        print('%s (%d %d%%) %.4f' % (timeSince(start), iter, iter / n_iters * 100, loss))

    if iter % plot_every == 0:
        all_losses.append(total_loss / plot_every)
        total_loss = 0

max_length = 20


def sample(category, start_letter='A'):
    with torch.no_grad():  # no need to track history in sampling
        category_tensor = categoryTensor(category)
        input = inputTensor(start_letter)
        hidden = rnn.initHidden()

        output_name = start_letter

        for i in range(max_length):
            output, hidden = rnn(category_tensor, input[0], hidden)
            topv, topi = output.topk(1)
            topi = topi[0][0]
            if topi == n_letters - 1:
                break
            else:
                letter = all_letters[topi]
                output_name += letter
            input = inputTensor(letter)

        return output_name


SAMPLES = {c: sample(c, s) for c, s in zip(all_categories, "KMTZ")}
STATE = {k: v.detach().numpy().copy() for k, v in rnn.state_dict().items()}
"""

# Four made-up languages: a start letter, a syllable alphabet and an ending each.
LANGUAGES = {
    "Kalvic": ("K", "aov", "ov"),
    "Mirran": ("M", "ein", "an"),
    "Tosu": ("T", "ous", "u"),
    "Zeppish": ("Z", "epi", "sh"),
}


def _pairs(n_per_language=16, seed=0):
    rng = random.Random(seed)
    pairs = []
    for label, (start, letters, ending) in LANGUAGES.items():
        for _ in range(n_per_language):
            middle = "".join(rng.choice(letters) for _ in range(rng.randint(1, 3)))
            pairs.append((label, start + middle + ending))
    rng.shuffle(pairs)
    return pairs


@pytest.fixture(autouse=True)
def _default_device_restored():
    # the classification program calls torch.set_default_device(device)
    yield
    import ferro

    ferro.set_default_device(None)
    if "torch" in sys.modules:
        sys.modules["torch"].set_default_device(None)


def _run(imports, program, **params):
    env = {"string": string, "PAIRS": _pairs(), "INIT": None, **params}
    exec(compile(imports + program, "char_rnn_port", "exec"), env)
    return env


def _init(shapes, seed):
    rng = np.random.default_rng(seed)
    return {k: rng.uniform(-0.3, 0.3, s).astype(np.float32) for k, s in shapes.items()}


def test_the_name_classifier_learns_the_languages():
    env = _run(FERRO_IMPORTS, CLASSIFICATION, EPOCHS=6, BATCH=8, PROBE="Kaavov")
    losses = env["all_losses"]
    assert len(losses) == 6 and losses[-1] < 0.5 * losses[0]
    assert len(env["train_set"]) == 55 and len(env["test_set"]) == 9
    confusion = env["CONFUSION"]
    rows = confusion.sum(1)
    assert np.allclose(rows[rows > 0], 1.0) and np.trace(confusion) >= 0.7 * (rows > 0).sum()
    assert env["GUESS"] == "Kalvic"


def test_the_name_generator_learns_each_languages_ending():
    env = _run(FERRO_IMPORTS, GENERATION, ITERS=300, DROPOUT=0.1)
    losses = env["all_losses"]
    assert len(losses) == 12 and np.mean(losses[-3:]) < 0.6 * losses[0]
    # Each sample starts with the language's letter and, greedily decoded, ends as it does.
    for label, name in env["SAMPLES"].items():
        assert name.endswith(LANGUAGES[label][2]) and len(name) <= 21, (label, name)


def _fixed_split(monkeypatch, module):
    def random_split(dataset, lengths, generator=None):
        n = round(lengths[0] * len(dataset))
        return [
            module.utils.data.Subset(dataset, range(n)),
            module.utils.data.Subset(dataset, range(n, len(dataset))),
        ]

    monkeypatch.setattr(module.utils.data, "random_split", random_split)


@pytest.mark.torch
def test_the_char_rnn_tutorials_match_torch(monkeypatch):
    torch = pytest.importorskip("torch")
    import ferro

    n_letters = len(string.ascii_letters + " .,;'")
    cls_init = _init(
        {
            "rnn.weight_ih_l0": (32, n_letters),
            "rnn.weight_hh_l0": (32, 32),
            "rnn.bias_ih_l0": (32,),
            "rnn.bias_hh_l0": (32,),
            "h2o.weight": (4, 32),
            "h2o.bias": (4,),
        },
        1,
    )
    gen_letters = len(string.ascii_letters + " .,;'-") + 1
    width = 4 + gen_letters + 32
    gen_init = _init(
        {
            "i2h.weight": (32, width),
            "i2h.bias": (32,),
            "i2o.weight": (gen_letters, width),
            "i2o.bias": (gen_letters,),
            "o2o.weight": (gen_letters, 32 + gen_letters),
            "o2o.bias": (gen_letters,),
        },
        2,
    )
    results = []
    for module, imports in ((ferro, FERRO_IMPORTS), (torch, TORCH_IMPORTS)):
        _fixed_split(monkeypatch, module)
        cls = _run(imports, CLASSIFICATION, EPOCHS=2, BATCH=8, PROBE="Kaavov", INIT=cls_init)
        gen = _run(imports, GENERATION, ITERS=50, DROPOUT=0.0, INIT=gen_init)
        results.append((cls, gen))
    (ours_cls, ours_gen), (theirs_cls, theirs_gen) = results
    np.testing.assert_allclose(ours_cls["all_losses"], theirs_cls["all_losses"], rtol=1e-4)
    np.testing.assert_allclose(ours_cls["CONFUSION"], theirs_cls["CONFUSION"])
    np.testing.assert_allclose(ours_gen["all_losses"], theirs_gen["all_losses"], rtol=1e-4)
    assert ours_gen["SAMPLES"] == theirs_gen["SAMPLES"]
    for ours, theirs in ((ours_cls, theirs_cls), (ours_gen, theirs_gen)):
        for k, v in theirs["STATE"].items():
            np.testing.assert_allclose(ours["STATE"][k], v, rtol=1e-3, atol=1e-5)
