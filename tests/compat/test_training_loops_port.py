# ruff: noqa: E501  (the ported programs keep their upstream line lengths)
"""Training loops of public PyTorch tutorials and scripts, run as one source each with only the
import lines changed, on synthetic data:

* the "Training a Classifier" (CIFAR-10) tutorial: its ``Net``, SGD with momentum, saving and
  reloading ``net.state_dict()`` with ``torch.save``/``torch.load(PATH, weights_only=True)``,
  ``torch.max(outputs.data, 1)``, and the per-class count that indexes a tuple with a 0-d tensor
  (``classes[label]``) and compares two (``if label == prediction``).
* the transfer-learning tutorial's ``train_model``: ``random_split`` into train/val loaders,
  train/val phases under ``torch.set_grad_enabled(phase == 'train')``, ``torch.sum(preds ==
  labels.data)`` accumulated into an int and ``.double()``, the best weights saved in a
  ``TemporaryDirectory``, and the fixed-feature-extractor setup (``requires_grad = False`` on
  every parameter, a new ``fc``, SGD over ``model.fc.parameters()``, ``StepLR``).
* a Hugging Face ``run_glue``-style loop: AdamW over ``no_decay`` parameter groups,
  ``get_linear_schedule_with_warmup`` (a ``LambdaLR``), gradient accumulation,
  ``clip_grad_norm_``, ``model.zero_grad()``, and ``OneCycleLR``/``CosineAnnealingLR``/
  ``ReduceLROnPlateau`` in its place.
"""

import numpy as np
import pytest

TORCH_IMPORTS = """\
import os
import time
from tempfile import TemporaryDirectory
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader, Subset, TensorDataset, random_split
"""

FERRO_IMPORTS = """\
import os
import time
from tempfile import TemporaryDirectory
import ferro as torch
import ferro.nn as nn
import ferro.nn.functional as F
import ferro.optim as optim
from ferro.optim import lr_scheduler
from ferro.utils.data import DataLoader, Subset, TensorDataset, random_split
"""

NET = """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 6, 5)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(6, 16, 5)
        self.fc1 = nn.Linear(16 * 5 * 5, 120)
        self.fc2 = nn.Linear(120, 84)
        self.fc3 = nn.Linear(84, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1) # flatten all dimensions except batch
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        x = self.fc3(x)
        return x


def make_net():
    net = Net()
    if INIT is not None:
        net.load_state_dict({k: torch.from_numpy(v) for k, v in INIT.items()})
    return net


full = TensorDataset(torch.from_numpy(IMAGES), torch.from_numpy(LABELS))
"""

CIFAR_TUTORIAL = """
classes = ('plane', 'car', 'bird', 'cat',
           'deer', 'dog', 'frog', 'horse', 'ship', 'truck')
trainloader = DataLoader(full, batch_size=4, shuffle=SHUFFLE, num_workers=0)
testloader = DataLoader(full, batch_size=4, shuffle=False, num_workers=0)

net = make_net()
criterion = nn.CrossEntropyLoss()
optimizer = optim.SGD(net.parameters(), lr=0.01, momentum=0.9)

LOSSES = []
for epoch in range(2):  # loop over the dataset multiple times

    running_loss = 0.0
    for i, data in enumerate(trainloader, 0):
        # get the inputs; data is a list of [inputs, labels]
        inputs, labels = data

        # zero the parameter gradients
        optimizer.zero_grad()

        # forward + backward + optimize
        outputs = net(inputs)
        loss = criterion(outputs, labels)
        loss.backward()
        optimizer.step()

        # print statistics
        running_loss += loss.item()
        LOSSES.append(loss.item())
        if i % 5 == 4:    # print every 5 mini-batches
            print(f'[{epoch + 1}, {i + 1:5d}] loss: {running_loss / 5:.3f}')
            running_loss = 0.0

PATH = os.path.join(TMP, 'cifar_net.pth')
torch.save(net.state_dict(), PATH)

dataiter = iter(testloader)
images, labels = next(dataiter)
GROUND_TRUTH = ' '.join(f'{classes[labels[j]]:5s}' for j in range(4))

net = Net()
net.load_state_dict(torch.load(PATH, weights_only=True))
outputs = net(images)
_, predicted = torch.max(outputs, 1)
PREDICTED = ' '.join(f'{classes[predicted[j]]:5s}' for j in range(4))

correct = 0
total = 0
# since we're not training, we don't need to calculate the gradients for our outputs
with torch.no_grad():
    for data in testloader:
        images, labels = data
        # calculate outputs by running images through the network
        outputs = net(images)
        # the class with the highest energy is what we choose as prediction
        _, predicted = torch.max(outputs.data, 1)
        total += labels.size(0)
        correct += (predicted == labels).sum().item()

# prepare to count predictions for each class
correct_pred = {classname: 0 for classname in classes}
total_pred = {classname: 0 for classname in classes}

# again no gradients needed
with torch.no_grad():
    for data in testloader:
        images, labels = data
        outputs = net(images)
        _, predictions = torch.max(outputs, 1)
        # collect the correct predictions for each class
        for label, prediction in zip(labels, predictions):
            if label == prediction:
                correct_pred[classes[label]] += 1
            total_pred[classes[label]] += 1

ACCURACY = {classname: 100 * float(correct_count) / total_pred[classname] for classname, correct_count in correct_pred.items()}
"""

TRANSFER_TUTORIAL = """
if SPLIT is None:
    train_set, val_set = random_split(full, [0.75, 0.25], generator=torch.Generator().manual_seed(42))
else:
    train_set, val_set = Subset(full, SPLIT[0]), Subset(full, SPLIT[1])
image_datasets = {'train': train_set, 'val': val_set}
dataloaders = {x: DataLoader(image_datasets[x], batch_size=4, shuffle=SHUFFLE and x == 'train', num_workers=0)
               for x in ['train', 'val']}
dataset_sizes = {x: len(image_datasets[x]) for x in ['train', 'val']}
device = torch.device("cpu")
HISTORY = []


def train_model(model, criterion, optimizer, scheduler, num_epochs=25):
    since = time.time()

    # Create a temporary directory to save training checkpoints
    with TemporaryDirectory() as tempdir:
        best_model_params_path = os.path.join(tempdir, 'best_model_params.pt')

        torch.save(model.state_dict(), best_model_params_path)
        best_acc = 0.0

        for epoch in range(num_epochs):
            # Each epoch has a training and validation phase
            for phase in ['train', 'val']:
                if phase == 'train':
                    model.train()  # Set model to training mode
                else:
                    model.eval()   # Set model to evaluate mode

                running_loss = 0.0
                running_corrects = 0

                # Iterate over data.
                for inputs, labels in dataloaders[phase]:
                    inputs = inputs.to(device)
                    labels = labels.to(device)

                    # zero the parameter gradients
                    optimizer.zero_grad()

                    # forward
                    # track history if only in train
                    with torch.set_grad_enabled(phase == 'train'):
                        outputs = model(inputs)
                        _, preds = torch.max(outputs, 1)
                        loss = criterion(outputs, labels)

                        # backward + optimize only if in training phase
                        if phase == 'train':
                            loss.backward()
                            optimizer.step()

                    # statistics
                    running_loss += loss.item() * inputs.size(0)
                    running_corrects += torch.sum(preds == labels.data)
                if phase == 'train':
                    scheduler.step()

                epoch_loss = running_loss / dataset_sizes[phase]
                epoch_acc = running_corrects.double() / dataset_sizes[phase]
                HISTORY.append((phase, epoch_loss, float(epoch_acc), scheduler.get_last_lr()[0]))

                # deep copy the model
                if phase == 'val' and epoch_acc > best_acc:
                    best_acc = epoch_acc
                    torch.save(model.state_dict(), best_model_params_path)

        time_elapsed = time.time() - since

        # load best model weights
        model.load_state_dict(torch.load(best_model_params_path, weights_only=True))
    return model, best_acc


model_conv = make_net()
for param in model_conv.parameters():
    param.requires_grad = False

# Parameters of newly constructed modules have requires_grad=True by default
num_ftrs = model_conv.fc3.in_features
model_conv.fc3 = nn.Linear(num_ftrs, 10)
if FC_INIT is not None:
    model_conv.fc3.load_state_dict({k: torch.from_numpy(v) for k, v in FC_INIT.items()})
FC_STATE = {k: v.detach().numpy().copy() for k, v in model_conv.fc3.state_dict().items()}

criterion = nn.CrossEntropyLoss()

# Observe that only parameters of final layer are being optimized as
# opposed to before.
optimizer_conv = optim.SGD(model_conv.fc3.parameters(), lr=0.01, momentum=0.9)

# Decay LR by a factor of 0.1 every 7 epochs
exp_lr_scheduler = lr_scheduler.StepLR(optimizer_conv, step_size=2, gamma=0.1)

model_conv, best_acc = train_model(model_conv, criterion, optimizer_conv,
                                   exp_lr_scheduler, num_epochs=5)
FROZEN_GRADS = [p.grad for n, p in model_conv.named_parameters() if not n.startswith('fc3')]
STATE = {k: v.detach().numpy().copy() for k, v in model_conv.state_dict().items()}
"""

HF_LOOP = """
class TextClassifier(nn.Module):
    def __init__(self, vocab_size, hidden_size, num_labels):
        super().__init__()
        self.embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=0)
        self.dense = nn.Linear(hidden_size, hidden_size)
        self.LayerNorm = nn.LayerNorm(hidden_size, eps=1e-12)
        self.dropout = nn.Dropout(0.0)
        self.classifier = nn.Linear(hidden_size, num_labels)

    def forward(self, input_ids=None, attention_mask=None, labels=None):
        hidden = self.embeddings(input_ids)
        mask = attention_mask.unsqueeze(-1).float()
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        pooled = self.LayerNorm(torch.tanh(self.dense(pooled)))
        logits = self.classifier(self.dropout(pooled))
        outputs = (logits,)
        if labels is not None:
            loss_fct = nn.CrossEntropyLoss()
            loss = loss_fct(logits.view(-1, logits.size(-1)), labels.view(-1))
            outputs = (loss,) + outputs
        return outputs


def get_linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps, last_epoch=-1):
    def lr_lambda(current_step: int):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        return max(
            0.0, float(num_training_steps - current_step) / float(max(1, num_training_steps - num_warmup_steps))
        )

    return lr_scheduler.LambdaLR(optimizer, lr_lambda, last_epoch)


class args:
    weight_decay = 0.01
    learning_rate = 5e-2
    adam_epsilon = 1e-8
    gradient_accumulation_steps = 2
    max_grad_norm = 1.0
    num_train_epochs = 3
    warmup_steps = 2
    device = torch.device("cpu")


torch.manual_seed(42)
model = TextClassifier(30, 16, 3)
if INIT is not None:
    model.load_state_dict({k: torch.from_numpy(v) for k, v in INIT.items()})
dataset = TensorDataset(torch.from_numpy(IDS), torch.from_numpy(MASK), torch.from_numpy(LABELS))
train_dataloader = DataLoader(dataset, batch_size=4)
t_total = len(train_dataloader) // args.gradient_accumulation_steps * args.num_train_epochs

# Prepare optimizer and schedule (linear warmup and decay)
no_decay = ["bias", "LayerNorm.weight"]
optimizer_grouped_parameters = [
    {
        "params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
        "weight_decay": args.weight_decay,
    },
    {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
]
optimizer = optim.AdamW(optimizer_grouped_parameters, lr=args.learning_rate, eps=args.adam_epsilon)
if SCHEDULE == "linear_warmup":
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=args.warmup_steps, num_training_steps=t_total)
elif SCHEDULE == "one_cycle":
    scheduler = lr_scheduler.OneCycleLR(optimizer, max_lr=args.learning_rate, total_steps=t_total, pct_start=0.3)
elif SCHEDULE == "cosine":
    scheduler = lr_scheduler.CosineAnnealingLR(optimizer, T_max=t_total, eta_min=1e-4)
else:
    scheduler = lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=0)

global_step = 0
tr_loss = 0.0
LOSSES, LRS = [], []
model.zero_grad()
for _ in range(args.num_train_epochs):
    for step, batch in enumerate(train_dataloader):
        model.train()
        batch = tuple(t.to(args.device) for t in batch)
        inputs = {"input_ids": batch[0], "attention_mask": batch[1], "labels": batch[2]}
        outputs = model(**inputs)
        loss = outputs[0]  # model outputs are always tuple in transformers (see doc)

        if args.gradient_accumulation_steps > 1:
            loss = loss / args.gradient_accumulation_steps

        loss.backward()
        tr_loss += loss.item()
        LOSSES.append(loss.item())
        if (step + 1) % args.gradient_accumulation_steps == 0:
            GRAD_NORM = torch.nn.utils.clip_grad_norm_(model.parameters(), args.max_grad_norm).item()
            optimizer.step()
            if SCHEDULE == "plateau":
                scheduler.step(tr_loss / (global_step + 1))
            else:
                scheduler.step()  # Update learning rate schedule
            model.zero_grad()
            global_step += 1
            LRS.append([group["lr"] for group in optimizer.param_groups])
STATE = {k: v.detach().numpy().copy() for k, v in model.state_dict().items()}
"""


def _cifar(n=24, seed=0):
    rng = np.random.default_rng(seed)
    protos = rng.standard_normal((10, 3, 32, 32)).astype(np.float32)
    labels = np.arange(n) % 10
    images = protos[labels] + 0.8 * rng.standard_normal((n, 3, 32, 32))
    return images.astype(np.float32), labels.astype(np.int64)


def _text(n=16, seed=0):
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, size=n)
    ids = rng.integers(1, 30, size=(n, 7))
    ids[:, 0] = 1 + labels * 9  # a class token the classifier can learn
    lengths = rng.integers(3, 8, size=n)
    mask = (np.arange(7)[None, :] < lengths[:, None]).astype(np.int64)
    return (ids * mask).astype(np.int64), mask, labels.astype(np.int64)


def _run(imports, program, **params):
    images, labels = _cifar()
    env = {"IMAGES": images, "LABELS": labels, "INIT": None, "SHUFFLE": False, **params}
    exec(compile(imports + NET + program, "training_loops_port", "exec"), env)
    return env


def _init():
    import ferro

    ferro.manual_seed(3)
    env = {
        "IMAGES": np.zeros((1, 3, 32, 32), np.float32),
        "LABELS": np.zeros(1, np.int64),
        "INIT": None,
    }
    exec(compile(FERRO_IMPORTS + NET, "init", "exec"), env)
    return {k: v.detach().numpy().copy() for k, v in env["Net"]().state_dict().items()}


def test_the_cifar_tutorial_trains_saves_and_counts_per_class(tmp_path):
    env = _run(FERRO_IMPORTS, CIFAR_TUTORIAL, TMP=str(tmp_path), SHUFFLE=True)
    losses = env["LOSSES"]
    assert len(losses) == 12 and np.all(np.isfinite(losses))
    assert np.mean(losses[-3:]) < np.mean(losses[:3])
    assert env["total"] == 24 and sum(env["total_pred"].values()) == 24
    assert env["correct"] == sum(env["correct_pred"].values())
    assert env["GROUND_TRUTH"] == "plane car   bird  cat  "
    assert len(env["PREDICTED"].split()) == 4


@pytest.mark.torch
def test_the_cifar_tutorial_matches_torch(tmp_path):
    pytest.importorskip("torch")
    init = _init()
    ours = _run(FERRO_IMPORTS, CIFAR_TUTORIAL, TMP=str(tmp_path), INIT=init)
    theirs = _run(TORCH_IMPORTS, CIFAR_TUTORIAL, TMP=str(tmp_path), INIT=init)
    np.testing.assert_allclose(ours["LOSSES"], theirs["LOSSES"], rtol=1e-4)
    assert ours["PREDICTED"] == theirs["PREDICTED"]
    assert ours["ACCURACY"] == theirs["ACCURACY"]


def test_the_transfer_learning_loop_trains_only_the_new_head():
    env = _run(
        FERRO_IMPORTS, TRANSFER_TUTORIAL, SPLIT=None, SHUFFLE=True, FC_INIT=None, INIT=_init()
    )
    history = env["HISTORY"]
    assert [h[0] for h in history] == ["train", "val"] * 5
    assert [h[3] for h in history[::2]] == pytest.approx([0.01, 0.001, 0.001, 0.0001, 0.0001])
    assert env["dataset_sizes"] == {"train": 18, "val": 6}
    assert all(g is None for g in env["FROZEN_GRADS"])
    assert 0.0 <= float(env["best_acc"]) <= 1.0
    # The frozen backbone is as it was loaded.
    init = _init()
    for k, v in env["STATE"].items():
        if not k.startswith("fc3"):
            np.testing.assert_array_equal(v, init[k])


@pytest.mark.torch
def test_the_transfer_learning_loop_matches_torch():
    pytest.importorskip("torch")
    import ferro

    init = _init()
    ferro.manual_seed(0)
    perm = np.random.default_rng(0).permutation(24)
    split = (perm[:18].tolist(), perm[18:].tolist())
    first = _run(FERRO_IMPORTS, TRANSFER_TUTORIAL, SPLIT=split, FC_INIT=None, INIT=init)
    params = {"SPLIT": split, "FC_INIT": first["FC_STATE"], "INIT": init}
    ours = _run(FERRO_IMPORTS, TRANSFER_TUTORIAL, **params)
    theirs = _run(TORCH_IMPORTS, TRANSFER_TUTORIAL, **params)
    for a, b in zip(ours["HISTORY"], theirs["HISTORY"], strict=True):
        assert a[0] == b[0] and a[2] == b[2]
        np.testing.assert_allclose(a[1], b[1], rtol=1e-5)
        assert a[3] == pytest.approx(b[3], rel=1e-12)
    assert float(ours["best_acc"]) == float(theirs["best_acc"])
    for k, v in theirs["STATE"].items():
        np.testing.assert_allclose(ours["STATE"][k], v, rtol=1e-5, atol=1e-6, err_msg=k)


SCHEDULES = ["linear_warmup", "one_cycle", "cosine", "plateau"]


def _hf(imports, **params):
    ids, mask, labels = _text()
    env = {"IDS": ids, "MASK": mask, "LABELS": labels, "INIT": None, **params}
    exec(compile(imports + HF_LOOP, "hf_loop_port", "exec"), env)
    return env


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_the_hf_style_loop_trains(schedule):
    env = _hf(FERRO_IMPORTS, SCHEDULE=schedule)
    assert len(env["LOSSES"]) == 12 and len(env["LRS"]) == 6 and np.all(np.isfinite(env["LOSSES"]))
    assert np.mean(env["LOSSES"][-4:]) < np.mean(env["LOSSES"][:4])
    groups = env["optimizer"].param_groups
    assert [g["weight_decay"] for g in groups] == [0.01, 0.0]
    names = {id(p): n for n, p in env["model"].named_parameters()}
    assert sorted(names[id(p)] for p in groups[1]["params"]) == [
        "LayerNorm.bias",
        "LayerNorm.weight",
        "classifier.bias",
        "dense.bias",
    ]
    if schedule == "linear_warmup":
        assert env["LRS"][0] == [0.025, 0.025] and env["LRS"][-1] == [0.0, 0.0]


@pytest.mark.torch
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_the_hf_style_loop_matches_torch(schedule):
    pytest.importorskip("torch")
    init = _hf(FERRO_IMPORTS, SCHEDULE=schedule)["model"]
    init = {k: v.detach().numpy().copy() for k, v in type(init)(30, 16, 3).state_dict().items()}
    ours = _hf(FERRO_IMPORTS, SCHEDULE=schedule, INIT=init)
    theirs = _hf(TORCH_IMPORTS, SCHEDULE=schedule, INIT=init)
    np.testing.assert_allclose(ours["LRS"], theirs["LRS"], rtol=1e-12)
    np.testing.assert_allclose(ours["LOSSES"], theirs["LOSSES"], rtol=1e-4)
    assert ours["GRAD_NORM"] == pytest.approx(theirs["GRAD_NORM"], rel=1e-4)
    for k, v in theirs["STATE"].items():
        np.testing.assert_allclose(ours["STATE"][k], v, rtol=1e-4, atol=1e-5, err_msg=k)
