# ruff: noqa: E501  (the ported program keeps its upstream line lengths)
"""pytorch/examples dcgan/main.py (its ``weights_init`` by class name, the ``Generator`` of
``ConvTranspose2d``/``BatchNorm2d``/``ReLU(True)``/``Tanh``, the ``Discriminator`` of
``Conv2d``/``LeakyReLU(0.2, inplace=True)``/``Sigmoid`` with ``.view(-1, 1).squeeze(1)``,
``BCELoss``, ``torch.full`` labels refilled with ``fill_``, the two Adam optimizers with
``betas=(0.5, 0.999)`` and the D/G alternation with ``fake.detach()``), fed by a ``DataLoader``
over a ``TensorDataset``, run as one source with only its import lines changed. Two changes for
the comparison: the noise comes from a pre-drawn array instead of ``torch.randn``, and the
images are 64x64 at a few channels (``ngf = ndf = 4``) so that it runs in a test.
"""

import numpy as np
import pytest

TORCH_IMPORTS = """\
import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data
"""

FERRO_IMPORTS = """\
import ferro as torch
import ferro.nn as nn
import ferro.optim as optim
import ferro.utils.data
"""

PROGRAM = """
device = torch.device("cpu")
ngpu = 0
nz = 8
ngf = 4
ndf = 4
nc = 3

dataset = torch.utils.data.TensorDataset(torch.from_numpy(IMAGES), torch.zeros(len(IMAGES), dtype=torch.long))
dataloader = torch.utils.data.DataLoader(dataset, batch_size=4, shuffle=SHUFFLE, num_workers=0)


# custom weights initialization called on netG and netD
def weights_init(m):
    classname = m.__class__.__name__
    if classname.find('Conv') != -1:
        torch.nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find('BatchNorm') != -1:
        torch.nn.init.normal_(m.weight, 1.0, 0.02)
        torch.nn.init.zeros_(m.bias)


class Generator(nn.Module):
    def __init__(self, ngpu):
        super(Generator, self).__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            # input is Z, going into a convolution
            nn.ConvTranspose2d(     nz, ngf * 8, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 8),
            nn.ReLU(True),
            # state size. (ngf*8) x 4 x 4
            nn.ConvTranspose2d(ngf * 8, ngf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            # state size. (ngf*4) x 8 x 8
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            # state size. (ngf*2) x 16 x 16
            nn.ConvTranspose2d(ngf * 2,     ngf, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            # state size. (ngf) x 32 x 32
            nn.ConvTranspose2d(    ngf,      nc, 4, 2, 1, bias=False),
            nn.Tanh()
            # state size. (nc) x 64 x 64
        )

    def forward(self, input):
        if input.is_cuda and self.ngpu > 1:
            output = nn.parallel.data_parallel(self.main, input, range(self.ngpu))
        else:
            output = self.main(input)
        return output


netG = Generator(ngpu).to(device)
netG.apply(weights_init)
if INIT_G is not None:
    netG.load_state_dict({k: torch.from_numpy(v) for k, v in INIT_G.items()})


class Discriminator(nn.Module):
    def __init__(self, ngpu):
        super(Discriminator, self).__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            # input is (nc) x 64 x 64
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf) x 32 x 32
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*2) x 16 x 16
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 4),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*4) x 8 x 8
            nn.Conv2d(ndf * 4, ndf * 8, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 8),
            nn.LeakyReLU(0.2, inplace=True),
            # state size. (ndf*8) x 4 x 4
            nn.Conv2d(ndf * 8, 1, 4, 1, 0, bias=False),
            nn.Sigmoid()
        )

    def forward(self, input):
        if input.is_cuda and self.ngpu > 1:
            output = nn.parallel.data_parallel(self.main, input, range(self.ngpu))
        else:
            output = self.main(input)

        return output.view(-1, 1).squeeze(1)


netD = Discriminator(ngpu).to(device)
netD.apply(weights_init)
if INIT_D is not None:
    netD.load_state_dict({k: torch.from_numpy(v) for k, v in INIT_D.items()})

criterion = nn.BCELoss()

fixed_noise = torch.from_numpy(NOISE[-1])
real_label = 1
fake_label = 0

# setup optimizer
optimizerD = optim.Adam(netD.parameters(), lr=0.0002 * LR_SCALE, betas=(0.5, 0.999))
optimizerG = optim.Adam(netG.parameters(), lr=0.0002 * LR_SCALE, betas=(0.5, 0.999))

history = []
for epoch in range(EPOCHS):
    for i, data in enumerate(dataloader, 0):
        ############################
        # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
        ###########################
        # train with real
        netD.zero_grad()
        real_cpu = data[0].to(device)
        batch_size = real_cpu.size(0)
        label = torch.full((batch_size,), real_label,
                           dtype=real_cpu.dtype, device=device)

        output = netD(real_cpu)
        errD_real = criterion(output, label)
        errD_real.backward()
        D_x = output.mean().item()

        # train with fake
        noise = torch.from_numpy(NOISE[epoch * len(dataloader) + i])
        fake = netG(noise)
        label.fill_(fake_label)
        output = netD(fake.detach())
        errD_fake = criterion(output, label)
        errD_fake.backward()
        D_G_z1 = output.mean().item()
        errD = errD_real + errD_fake
        optimizerD.step()

        ############################
        # (2) Update G network: maximize log(D(G(z)))
        ###########################
        netG.zero_grad()
        label.fill_(real_label)  # fake labels are real for generator cost
        output = netD(fake)
        errG = criterion(output, label)
        errG.backward()
        D_G_z2 = output.mean().item()
        optimizerG.step()

        history.append((errD.item(), errG.item(), D_x, D_G_z1, D_G_z2))

netG.eval()
with torch.no_grad():
    fixed_fake = netG(fixed_noise).detach().cpu().numpy()
state_G = {k: v.detach().cpu().numpy().copy() for k, v in netG.state_dict().items()}
state_D = {k: v.detach().cpu().numpy().copy() for k, v in netD.state_dict().items()}
"""


def _images(n=12, seed=0):
    # Blobs: a bright disc at a random place on a dark, noisy background, scaled into [-1, 1]
    # as the example's Normalize((0.5,) * 3, (0.5,) * 3) leaves them.
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[:64, :64]
    out = np.empty((n, 3, 64, 64), np.float32)
    for k in range(n):
        cy, cx = rng.integers(16, 48, size=2)
        disc = ((yy - cy) ** 2 + (xx - cx) ** 2 < 100).astype(np.float32)
        out[k] = disc * rng.uniform(0.5, 1.0, size=(3, 1, 1)) + 0.05 * rng.standard_normal(
            (3, 64, 64)
        )
    return np.clip(out * 2 - 1, -1, 1).astype(np.float32)


def _run(imports, **params):
    images = _images()
    epochs = params.get("EPOCHS", 1)
    env = {
        "IMAGES": images,
        "NOISE": np.random.default_rng(1)
        .standard_normal((epochs * 3 + 1, 4, 8, 1, 1))
        .astype(np.float32),
        "SHUFFLE": False,
        "LR_SCALE": 1.0,
        "INIT_G": None,
        "INIT_D": None,
        "EPOCHS": epochs,
        **params,
    }
    exec(compile(imports + PROGRAM, "dcgan_port", "exec"), env)
    return env


def test_dcgan_trains_on_ferro():
    env = _run(FERRO_IMPORTS, SHUFFLE=True, EPOCHS=3, LR_SCALE=10.0)
    history = np.array(env["history"])
    assert history.shape == (9, 5) and np.all(np.isfinite(history))
    assert np.all((history[:, 2:] > 0) & (history[:, 2:] < 1))  # D outputs are probabilities
    fake = env["fixed_fake"]
    assert fake.shape == (4, 3, 64, 64) and np.abs(fake).max() <= 1.0
    # weights_init reached every conv and batch norm: N(1, 0.02) BatchNorm weights, zero biases
    # moved only by the optimizer; running statistics were tracked in train mode.
    sg = env["state_G"]
    assert int(sg["main.1.num_batches_tracked"]) == 9
    assert not np.allclose(sg["main.1.running_var"], 1.0)
    # The discriminator learnt the real images: D(x) rose over training.
    assert history[-3:, 2].mean() > history[:3, 2].mean()


@pytest.mark.torch
def test_dcgan_matches_torch_from_the_same_weights():
    pytest.importorskip("torch")
    init = _run(FERRO_IMPORTS, EPOCHS=0)
    ours = _run(FERRO_IMPORTS, EPOCHS=2, INIT_G=init["state_G"], INIT_D=init["state_D"])
    theirs = _run(TORCH_IMPORTS, EPOCHS=2, INIT_G=init["state_G"], INIT_D=init["state_D"])
    np.testing.assert_allclose(ours["history"], theirs["history"], rtol=2e-4, atol=1e-6)
    np.testing.assert_allclose(ours["fixed_fake"], theirs["fixed_fake"], rtol=1e-3, atol=1e-5)
    for name in ("state_G", "state_D"):
        assert sorted(ours[name]) == sorted(theirs[name])
        for k, v in theirs[name].items():
            # atol: Adam moves an entry whose gradient is near zero by up to lr (2e-4) a step
            # whatever the gradient's rounding, so such entries may differ by a fraction of it.
            np.testing.assert_allclose(
                ours[name][k], v, rtol=1e-3, atol=1e-4, err_msg=f"{name}[{k}]"
            )
