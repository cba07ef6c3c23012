# ruff: noqa: E501  (the ported programs keep their upstream line lengths)
"""torchvision's ResNet definition (``conv3x3``/``conv1x1``, ``BasicBlock`` and ``Bottleneck``
with ``out += identity`` after a ``downsample`` ``Sequential``, ``_make_layer``,
``AdaptiveAvgPool2d((1, 1))``, ``torch.flatten(x, 1)``, the ``kaiming_normal_(mode="fan_out")``
and ``constant_`` loop over ``self.modules()``, ``zero_init_residual``), driven by two public
programs with only their import lines changed:

* pytorch/examples imagenet/main.py's loop: SGD with momentum and weight decay, ``StepLR``,
  its ``accuracy`` (``topk``, ``.t()``, ``eq``/``expand_as``, ``mul_``) and ``AverageMeter``, and
  its checkpoint (``torch.save`` of model, optimizer and scheduler ``state_dict`` and a tensor
  ``best_acc1``; resume with ``torch.load``).
* pytorch/examples siamese_network/main.py: a ``Dataset`` subclass pairing MNIST-like digits
  with ``random`` and ``np.array(tensor, dtype=None, copy=None)``, ``resnet18`` with its
  ``conv1`` replaced and its ``children()`` but the last in a ``Sequential``, ``xavier_uniform_``
  and ``m.bias.data.fill_``, ``BCELoss``, ``Adadelta`` with ``StepLR``, and its test loop's
  ``torch.where(outputs > 0.5, 1, 0)`` and ``pred.eq(targets.view_as(pred))``.

The data are synthetic (no torchvision); the comparisons start torch from ferro's initial
weights.
"""

import os
import random

import numpy as np
import pytest

TORCH_IMPORTS = """\
from typing import Any, Callable, List, Optional, Type, Union
import numpy as np
import random
import shutil
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch import Tensor
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import Dataset
"""

FERRO_IMPORTS = """\
from typing import Any, Callable, List, Optional, Type, Union
import numpy as np
import random
import shutil
import ferro as torch
import ferro.nn as nn
import ferro.nn.functional as F
import ferro.optim as optim
from ferro import Tensor
from ferro.optim.lr_scheduler import StepLR
from ferro.utils.data import Dataset
"""

# torchvision/models/resnet.py (weights/progress plumbing and _log_api_usage_once left out).
RESNET = '''
def conv3x3(in_planes: int, out_planes: int, stride: int = 1, groups: int = 1, dilation: int = 1) -> nn.Conv2d:
    """3x3 convolution with padding"""
    return nn.Conv2d(
        in_planes,
        out_planes,
        kernel_size=3,
        stride=stride,
        padding=dilation,
        groups=groups,
        bias=False,
        dilation=dilation,
    )


def conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    """1x1 convolution"""
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion: int = 1

    def __init__(
        self,
        inplanes: int,
        planes: int,
        stride: int = 1,
        downsample: Optional[nn.Module] = None,
        groups: int = 1,
        base_width: int = 64,
        dilation: int = 1,
        norm_layer: Optional[Callable[..., nn.Module]] = None,
    ) -> None:
        super().__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        if groups != 1 or base_width != 64:
            raise ValueError("BasicBlock only supports groups=1 and base_width=64")
        if dilation > 1:
            raise NotImplementedError("Dilation > 1 not supported in BasicBlock")
        # Both self.conv1 and self.downsample layers downsample the input when stride != 1
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = norm_layer(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = norm_layer(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: Tensor) -> Tensor:
        identity = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)

        if self.downsample is not None:
            identity = self.downsample(x)

        out += identity
        out = self.relu(out)

        return out


class Bottleneck(nn.Module):
    expansion: int = 4

    def __init__(
        self,
        inplanes: int,
        planes: int,
        stride: int = 1,
        downsample: Optional[nn.Module] = None,
        groups: int = 1,
        base_width: int = 64,
        dilation: int = 1,
        norm_layer: Optional[Callable[..., nn.Module]] = None,
    ) -> None:
        super().__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        width = int(planes * (base_width / 64.0)) * groups
        # Both self.conv2 and self.downsample layers downsample the input when stride != 1
        self.conv1 = conv1x1(inplanes, width)
        self.bn1 = norm_layer(width)
        self.conv2 = conv3x3(width, width, stride, groups, dilation)
        self.bn2 = norm_layer(width)
        self.conv3 = conv1x1(width, planes * self.expansion)
        self.bn3 = norm_layer(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: Tensor) -> Tensor:
        identity = x

        out = self.conv1(x)
        out = self.bn1(out)
        out = self.relu(out)

        out = self.conv2(out)
        out = self.bn2(out)
        out = self.relu(out)

        out = self.conv3(out)
        out = self.bn3(out)

        if self.downsample is not None:
            identity = self.downsample(x)

        out += identity
        out = self.relu(out)

        return out


class ResNet(nn.Module):
    def __init__(
        self,
        block: Type[Union[BasicBlock, Bottleneck]],
        layers: List[int],
        num_classes: int = 1000,
        zero_init_residual: bool = False,
        groups: int = 1,
        width_per_group: int = 64,
        replace_stride_with_dilation: Optional[List[bool]] = None,
        norm_layer: Optional[Callable[..., nn.Module]] = None,
    ) -> None:
        super().__init__()
        if norm_layer is None:
            norm_layer = nn.BatchNorm2d
        self._norm_layer = norm_layer

        self.inplanes = 64
        self.dilation = 1
        if replace_stride_with_dilation is None:
            # each element in the tuple indicates if we should replace
            # the 2x2 stride with a dilated convolution instead
            replace_stride_with_dilation = [False, False, False]
        if len(replace_stride_with_dilation) != 3:
            raise ValueError(
                "replace_stride_with_dilation should be None "
                f"or a 3-element tuple, got {replace_stride_with_dilation}"
            )
        self.groups = groups
        self.base_width = width_per_group
        self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = norm_layer(self.inplanes)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, 64, layers[0])
        self.layer2 = self._make_layer(block, 128, layers[1], stride=2, dilate=replace_stride_with_dilation[0])
        self.layer3 = self._make_layer(block, 256, layers[2], stride=2, dilate=replace_stride_with_dilation[1])
        self.layer4 = self._make_layer(block, 512, layers[3], stride=2, dilate=replace_stride_with_dilation[2])
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(512 * block.expansion, num_classes)

        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)

        # Zero-initialize the last BN in each residual branch,
        # so that the residual branch starts with zeros, and each residual block behaves like an identity.
        # This improves the model by 0.2~0.3% according to https://arxiv.org/abs/1706.02677
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, Bottleneck) and m.bn3.weight is not None:
                    nn.init.constant_(m.bn3.weight, 0)  # type: ignore[arg-type]
                elif isinstance(m, BasicBlock) and m.bn2.weight is not None:
                    nn.init.constant_(m.bn2.weight, 0)  # type: ignore[arg-type]

    def _make_layer(
        self,
        block: Type[Union[BasicBlock, Bottleneck]],
        planes: int,
        blocks: int,
        stride: int = 1,
        dilate: bool = False,
    ) -> nn.Sequential:
        norm_layer = self._norm_layer
        downsample = None
        previous_dilation = self.dilation
        if dilate:
            self.dilation *= stride
            stride = 1
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(
                conv1x1(self.inplanes, planes * block.expansion, stride),
                norm_layer(planes * block.expansion),
            )

        layers = []
        layers.append(
            block(
                self.inplanes, planes, stride, downsample, self.groups, self.base_width, previous_dilation, norm_layer
            )
        )
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(
                block(
                    self.inplanes,
                    planes,
                    groups=self.groups,
                    base_width=self.base_width,
                    dilation=self.dilation,
                    norm_layer=norm_layer,
                )
            )

        return nn.Sequential(*layers)

    def _forward_impl(self, x: Tensor) -> Tensor:
        # See note [TorchScript super()]
        x = self.conv1(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)

        x = self.layer1(x)
        x = self.layer2(x)
        x = self.layer3(x)
        x = self.layer4(x)

        x = self.avgpool(x)
        x = torch.flatten(x, 1)
        x = self.fc(x)

        return x

    def forward(self, x: Tensor) -> Tensor:
        return self._forward_impl(x)


def resnet18(*, weights=None, progress: bool = True, **kwargs: Any) -> ResNet:
    return ResNet(BasicBlock, [2, 2, 2, 2], **kwargs)


def resnet50(*, weights=None, progress: bool = True, **kwargs: Any) -> ResNet:
    return ResNet(Bottleneck, [3, 4, 6, 3], **kwargs)
'''

# pytorch/examples imagenet/main.py: train(), accuracy(), AverageMeter, save_checkpoint and
# the resume branch (data loading, distributed and CUDA plumbing left out).
IMAGENET = '''
class AverageMeter(object):
    """Computes and stores the average and current value"""
    def __init__(self, name, fmt=':f'):
        self.name = name
        self.fmt = fmt
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

    def __str__(self):
        fmtstr = '{name} {val' + self.fmt + '} ({avg' + self.fmt + '})'
        return fmtstr.format(**self.__dict__)


def accuracy(output, target, topk=(1,)):
    """Computes the accuracy over the k top predictions for the specified values of k"""
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)

        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))

        res = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res


def train(train_loader, model, criterion, optimizer, epoch, device):
    losses = AverageMeter('Loss', ':.4e')
    top1 = AverageMeter('Acc@1', ':6.2f')
    top5 = AverageMeter('Acc@5', ':6.2f')
    model.train()
    for i, (images, target) in enumerate(train_loader):
        images = images.to(device, non_blocking=True)
        target = target.to(device, non_blocking=True)

        # compute output
        output = model(images)
        loss = criterion(output, target)

        # measure accuracy and record loss
        acc1, acc5 = accuracy(output, target, topk=(1, 5))
        losses.update(loss.item(), images.size(0))
        top1.update(acc1[0], images.size(0))
        top5.update(acc5[0], images.size(0))

        # compute gradient and do SGD step
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        LOSSES.append(loss.item())
    return top1.avg


def save_checkpoint(state, is_best, filename='checkpoint.pth.tar'):
    torch.save(state, filename)
    if is_best:
        shutil.copyfile(filename, 'model_best.pth.tar')


device = torch.device("cpu")
torch.manual_seed(0)
model = resnet18(num_classes=10, zero_init_residual=ZERO_INIT)
if INIT is not None:
    model.load_state_dict({k: torch.from_numpy(v) for k, v in INIT.items()})
criterion = nn.CrossEntropyLoss().to(device)
optimizer = torch.optim.SGD(model.parameters(), 0.05, momentum=0.9, weight_decay=1e-4)
scheduler = StepLR(optimizer, step_size=1, gamma=0.5)
start_epoch = 0
best_acc1 = 0
if RESUME:
    checkpoint = torch.load(RESUME, map_location='cpu')
    start_epoch = checkpoint['epoch']
    best_acc1 = checkpoint['best_acc1']
    model.load_state_dict(checkpoint['state_dict'])
    optimizer.load_state_dict(checkpoint['optimizer'])
    scheduler.load_state_dict(checkpoint['scheduler'])

train_loader = torch.utils.data.DataLoader(
    torch.utils.data.TensorDataset(torch.from_numpy(IMAGES), torch.from_numpy(LABELS)),
    batch_size=8, shuffle=False)
LOSSES = []
for epoch in range(start_epoch, EPOCHS):
    acc1 = train(train_loader, model, criterion, optimizer, epoch, device)
    scheduler.step()
    is_best = acc1 > best_acc1
    best_acc1 = max(acc1, best_acc1)
    save_checkpoint({
        'epoch': epoch + 1,
        'arch': 'resnet18',
        'state_dict': model.state_dict(),
        'best_acc1': best_acc1,
        'optimizer' : optimizer.state_dict(),
        'scheduler' : scheduler.state_dict()
    }, is_best)
model.eval()
with torch.no_grad():
    logits = model(torch.from_numpy(IMAGES[:8])).numpy()
state = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
'''

# pytorch/examples siamese_network/main.py (argument parsing left out; MNIST is a stand-in
# object with the same .data/.targets).
SIAMESE = """
class SiameseNetwork(nn.Module):
    def __init__(self):
        super(SiameseNetwork, self).__init__()
        # get resnet model
        self.resnet = resnet18(weights=None)

        # over-write the first conv layer to be able to read MNIST images
        # as resnet18 reads (3,x,x) where 3 is RGB channels
        # whereas MNIST has (1,x,x) where 1 is a gray-scale channel
        self.resnet.conv1 = nn.Conv2d(1, 64, kernel_size=(7, 7), stride=(2, 2), padding=(3, 3), bias=False)
        self.fc_in_features = self.resnet.fc.in_features

        # remove the last layer of resnet18 (linear layer which is before avgpool layer)
        self.resnet = torch.nn.Sequential(*(list(self.resnet.children())[:-1]))

        # add linear layers to compare between the features of the two images
        self.fc = nn.Sequential(
            nn.Linear(self.fc_in_features * 2, 256),
            nn.ReLU(inplace=True),
            nn.Linear(256, 1),
        )

        self.sigmoid = nn.Sigmoid()

        # initialize the weights
        self.resnet.apply(self.init_weights)
        self.fc.apply(self.init_weights)

    def init_weights(self, m):
        if isinstance(m, nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight)
            m.bias.data.fill_(0.01)

    def forward_once(self, x):
        output = self.resnet(x)
        output = output.view(output.size()[0], -1)
        return output

    def forward(self, input1, input2):
        # get two images' features
        output1 = self.forward_once(input1)
        output2 = self.forward_once(input2)

        # concatenate both images' features
        output = torch.cat((output1, output2), 1)

        # pass the concatenation to the linear layers
        output = self.fc(output)

        # pass the out of the linear layers to sigmoid layer
        output = self.sigmoid(output)

        return output


class APP_MATCHER(Dataset):
    def __init__(self, dataset):
        super(APP_MATCHER, self).__init__()

        # get MNIST dataset
        self.dataset = dataset

        # as `self.dataset.data`'s shape is (Nx28x28), where N is the number of
        # examples in MNIST dataset, a single dimension is added at the beginning
        # e.g., (Nx1x28x28)
        self.data = self.dataset.data.unsqueeze(1).clone()

        self.group_examples()

    def group_examples(self):
        # get the targets from MNIST dataset
        np_arr = np.array(self.dataset.targets.clone(), dtype=None, copy=None)

        # group examples based on class
        self.grouped_examples = {}
        for i in range(0,10):
            self.grouped_examples[i] = np.where((np_arr==i))[0]

    def __len__(self):
        return self.data.shape[0]

    def __getitem__(self, index):
        # pick some random class for the first image
        selected_class = random.randint(0, 9)

        # pick a random index for the first image in the grouped indices based of the label
        # of the class
        random_index_1 = random.randint(0, self.grouped_examples[selected_class].shape[0]-1)

        # pick the index to get the first image
        index_1 = self.grouped_examples[selected_class][random_index_1]

        # get the first image
        image_1 = self.data[index_1].clone().float()

        # same class
        if index % 2 == 0:
            # pick a random index for the second image
            random_index_2 = random.randint(0, self.grouped_examples[selected_class].shape[0]-1)

            # ensure that the index of the second image isn't the same as the first image
            while random_index_2 == random_index_1:
                random_index_2 = random.randint(0, self.grouped_examples[selected_class].shape[0]-1)

            # pick the index to get the second image
            index_2 = self.grouped_examples[selected_class][random_index_2]

            # get the second image
            image_2 = self.data[index_2].clone().float()

            # set the label for this example to be positive (1)
            target = torch.tensor(1, dtype=torch.float)

        # different class
        else:
            # pick a random class
            other_selected_class = random.randint(0, 9)

            # ensure that the class of the second image isn't the same as the first image
            while other_selected_class == selected_class:
                other_selected_class = random.randint(0, 9)

            # pick a random index for the second image in the grouped indices based of the label
            # of the class
            random_index_2 = random.randint(0, self.grouped_examples[other_selected_class].shape[0]-1)

            # pick the index to get the second image
            index_2 = self.grouped_examples[other_selected_class][random_index_2]

            # get the second image
            image_2 = self.data[index_2].clone().float()

            # set the label for this example to be negative (0)
            target = torch.tensor(0, dtype=torch.float)

        return image_1, image_2, target


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()

    # we aren't using `TripletLoss` as the MNIST dataset is simple, so `BCELoss` can do the trick.
    criterion = nn.BCELoss()

    for batch_idx, (images_1, images_2, targets) in enumerate(train_loader):
        images_1, images_2, targets = images_1.to(device), images_2.to(device), targets.to(device)
        optimizer.zero_grad()
        outputs = model(images_1, images_2).squeeze()
        loss = criterion(outputs, targets)
        loss.backward()
        optimizer.step()
        LOSSES.append(loss.item())


def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0

    # we aren't using `TripletLoss` as the MNIST dataset is simple, so `BCELoss` can do the trick.
    criterion = nn.BCELoss()

    with torch.no_grad():
        for (images_1, images_2, targets) in test_loader:
            images_1, images_2, targets = images_1.to(device), images_2.to(device), targets.to(device)
            outputs = model(images_1, images_2).squeeze()
            test_loss += criterion(outputs, targets).sum().item()  # sum up batch loss
            pred = torch.where(outputs > 0.5, 1, 0)  # get the index of the max log-probability
            correct += pred.eq(targets.view_as(pred)).sum().item()

    test_loss /= len(test_loader.dataset)
    return test_loss, correct


class MNIST:
    data = torch.from_numpy(DIGITS)
    targets = torch.from_numpy(LABELS)


device = torch.device("cpu")
random.seed(0)
train_loader = torch.utils.data.DataLoader(APP_MATCHER(MNIST()), batch_size=8, shuffle=False)
random.seed(1)
test_pairs = [APP_MATCHER(MNIST())[i] for i in range(16)]
test_loader = torch.utils.data.DataLoader(test_pairs, batch_size=8)
model = SiameseNetwork().to(device)
if INIT is not None:
    model.load_state_dict({k: torch.from_numpy(v) for k, v in INIT.items()})
optimizer = optim.Adadelta(model.parameters(), lr=1.0)
scheduler = StepLR(optimizer, step_size=1, gamma=0.7)
LOSSES = []
random.seed(2)
for epoch in range(1, EPOCHS + 1):
    train(None, model, device, train_loader, optimizer, epoch)
    test_loss, correct = test(model, device, test_loader)
    scheduler.step()
state = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
"""


def _cifar_like(n=8, seed=0):
    # Ten classes, each a fixed colour pattern plus noise: learnable in a few steps.
    rng = np.random.default_rng(seed)
    protos = rng.standard_normal((10, 3, 32, 32)).astype(np.float32)
    labels = np.arange(n) % 10
    images = protos[labels] + 0.5 * rng.standard_normal((n, 3, 32, 32)).astype(np.float32)
    return images.astype(np.float32), labels.astype(np.int64)


def _digits(n=24, seed=0):
    rng = np.random.default_rng(seed)
    protos = rng.integers(0, 256, size=(10, 28, 28))
    labels = np.arange(n) % 10
    noise = rng.integers(-40, 41, size=(n, 28, 28))
    # int64 where torchvision's MNIST.data is uint8: ferro has no uint8 (test_port_gaps.py).
    return np.clip(protos[labels] + noise, 0, 255).astype(np.int64), labels.astype(np.int64)


def _run(imports, program, **params):
    env = {"INIT": None, "RESUME": None, "ZERO_INIT": False, "EPOCHS": 1, **params}
    exec(compile(imports + RESNET + program, "resnet_port", "exec"), env)
    return env


def _imagenet(imports, **params):
    images, labels = _cifar_like()
    return _run(imports, IMAGENET, IMAGES=images, LABELS=labels, **params)


def _siamese(imports, **params):
    digits, labels = _digits()
    return _run(imports, SIAMESE, DIGITS=digits, LABELS=labels, **params)


def test_the_torchvision_definitions_build_as_in_torchvision():
    env = _run(FERRO_IMPORTS, "")
    model = env["resnet18"](num_classes=10, zero_init_residual=True)
    names = dict(model.named_modules())
    assert isinstance(names["layer2.0.downsample.0"], env["nn"].Conv2d)
    assert "layer1.0.downsample" not in names and names["layer1.0"].downsample is None
    assert sum(p.numel() for p in model.parameters()) == 11181642  # torchvision's count
    assert all(
        float(m.bn2.weight.abs().sum()) == 0.0
        for m in model.modules()
        if isinstance(m, env["BasicBlock"])
    )
    w = model.layer4[1].conv1.weight.detach().numpy()
    assert abs(w.std() - np.sqrt(2.0 / (512 * 9))) < 0.05 * np.sqrt(2.0 / (512 * 9))  # fan_out
    # resnet50's Bottleneck, at 64x64 input with two images.
    r50 = env["resnet50"](num_classes=7)
    assert sum(p.numel() for p in r50.parameters()) == 23522375
    r50.eval()
    out = r50(env["torch"].randn(2, 3, 64, 64))
    assert tuple(out.shape) == (2, 7)


def test_the_imagenet_loop_trains_checkpoints_and_resumes(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = _imagenet(FERRO_IMPORTS, EPOCHS=2)
    assert np.all(np.isfinite(first["LOSSES"]))
    assert first["LOSSES"][-1] < first["LOSSES"][0]
    assert os.path.exists("checkpoint.pth.tar") and os.path.exists("model_best.pth.tar")
    assert first["scheduler"].get_last_lr() == [pytest.approx(0.0125)]
    # Resume from epoch 2 and train a third: the same as three epochs in one go.
    resumed = _imagenet(FERRO_IMPORTS, EPOCHS=3, RESUME="checkpoint.pth.tar")
    assert resumed["start_epoch"] == 2 and len(resumed["LOSSES"]) == 1
    assert float(resumed["best_acc1"]) == float(first["best_acc1"]) or resumed["is_best"]
    straight = _imagenet(FERRO_IMPORTS, EPOCHS=3)
    np.testing.assert_allclose(resumed["LOSSES"], straight["LOSSES"][-1:], rtol=1e-5)
    assert resumed["optimizer"].param_groups[0]["lr"] == pytest.approx(0.05 * 0.5**3)


@pytest.mark.torch
def test_the_imagenet_loop_matches_torch(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    init = _imagenet(FERRO_IMPORTS, EPOCHS=0)["state"]
    ours = _imagenet(FERRO_IMPORTS, EPOCHS=2, INIT=init)
    theirs = _imagenet(TORCH_IMPORTS, EPOCHS=2, INIT=init)
    np.testing.assert_allclose(ours["LOSSES"], theirs["LOSSES"], rtol=1e-3)
    # After the second step the eval logits differ by up to 1e-3 of their scale: layer4's batch
    # norms see 1x1 maps of 8 images, and a channel that few of them activate has a tiny batch
    # variance that amplifies the first step's float32 rounding (after one step all parameters
    # agree to 1e-5 of their scale).
    scale = np.abs(theirs["logits"]).max()
    np.testing.assert_allclose(ours["logits"], theirs["logits"], rtol=0, atol=1e-3 * scale)
    assert float(ours["best_acc1"]) == float(theirs["best_acc1"])
    assert sorted(ours["state"]) == sorted(theirs["state"])


def test_the_siamese_network_trains():
    env = _siamese(FERRO_IMPORTS, EPOCHS=2)
    assert len(env["LOSSES"]) == 6 and np.all(np.isfinite(env["LOSSES"]))
    assert 0 <= env["correct"] <= 16 and np.isfinite(env["test_loss"])
    # conv1 was replaced and the fc dropped: a 1-channel stem, the avgpool last.
    resnet = env["model"].resnet
    assert tuple(resnet[0].weight.shape) == (64, 1, 7, 7)
    assert type(resnet[-1]).__name__ == "AdaptiveAvgPool2d"
    assert env["model"].fc[0].bias.tolist() == pytest.approx([0.01] * 256, abs=0.5)
    assert env["optimizer"].param_groups[0]["lr"] == pytest.approx(0.49)


@pytest.mark.torch
def test_the_siamese_network_matches_torch():
    pytest.importorskip("torch")
    random.seed(0)
    init = _siamese(FERRO_IMPORTS, EPOCHS=0)["state"]
    ours = _siamese(FERRO_IMPORTS, EPOCHS=1, INIT=init)
    theirs = _siamese(TORCH_IMPORTS, EPOCHS=1, INIT=init)
    np.testing.assert_allclose(ours["LOSSES"], theirs["LOSSES"], rtol=1e-3, atol=1e-5)
    # The example feeds 0-255 pixels, so the sigmoid saturates and BCE's gradient reaches 1e11
    # (PyTorch's 1e-12 floor, which ferro now shares): Adadelta amplifies the float32 rounding of
    # the three steps into a ~2% difference of the eval loss.
    np.testing.assert_allclose(ours["test_loss"], theirs["test_loss"], rtol=5e-2)
    assert abs(ours["correct"] - theirs["correct"]) <= 1
