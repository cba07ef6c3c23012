# ruff: noqa: E501  (the ported program keeps its upstream line lengths)
"""A nanoGPT / minGPT model (karpathy/nanoGPT model.py: ``CausalSelfAttention`` with a
registered ``tril`` mask buffer or ``F.scaled_dot_product_attention(is_causal=True)``, a
LayerNorm with optional bias via ``F.layer_norm``, GELU MLP, ``nn.ModuleDict`` of
``wte``/``wpe``/``h``/``ln_f``, weight tying, ``apply(self._init_weights)``, AdamW with
weight-decay parameter groups, ``generate`` with ``torch.topk`` and ``torch.multinomial``), run
as one source with only its import lines changed: ``import torch`` and
``import ferro as torch``. The comparison uses dropout 0 and the same initial weights.
"""

import numpy as np
import pytest

TORCH_IMPORTS = """\
import math
import inspect
from dataclasses import dataclass
import torch
import torch.nn as nn
from torch.nn import functional as F
"""

FERRO_IMPORTS = """\
import math
import inspect
from dataclasses import dataclass
import ferro as torch
import ferro.nn as nn
from ferro.nn import functional as F
"""

PROGRAM = """
class LayerNorm(nn.Module):
    \"\"\" LayerNorm but with an optional bias. PyTorch doesn't support simply bias=False \"\"\"

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, input):
        return F.layer_norm(input, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):

    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd, bias=config.bias)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd, bias=config.bias)
        self.attn_dropout = nn.Dropout(config.dropout)
        self.resid_dropout = nn.Dropout(config.dropout)
        self.n_head = config.n_head
        self.n_embd = config.n_embd
        self.dropout = config.dropout
        self.flash = config.flash and hasattr(torch.nn.functional, 'scaled_dot_product_attention')
        if not self.flash:
            self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                                        .view(1, 1, config.block_size, config.block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v  = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) # (B, nh, T, hs)
        if self.flash:
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=self.dropout if self.training else 0, is_causal=True)
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:,:,:T,:T] == 0, float('-inf'))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v # (B, nh, T, T) x (B, nh, T, hs) -> (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        y = self.resid_dropout(self.c_proj(y))
        return y


class MLP(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.c_fc    = nn.Linear(config.n_embd, 4 * config.n_embd, bias=config.bias)
        self.gelu    = nn.GELU()
        self.c_proj  = nn.Linear(4 * config.n_embd, config.n_embd, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x):
        x = self.c_fc(x)
        x = self.gelu(x)
        x = self.c_proj(x)
        x = self.dropout(x)
        return x


class Block(nn.Module):

    def __init__(self, config):
        super().__init__()
        self.ln_1 = LayerNorm(config.n_embd, bias=config.bias)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = LayerNorm(config.n_embd, bias=config.bias)
        self.mlp = MLP(config)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


@dataclass
class GPTConfig:
    block_size: int = 16
    vocab_size: int = 24
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 32
    dropout: float = 0.0
    bias: bool = True
    flash: bool = False


class GPT(nn.Module):

    def __init__(self, config):
        super().__init__()
        assert config.vocab_size is not None
        assert config.block_size is not None
        self.config = config

        self.transformer = nn.ModuleDict(dict(
            wte = nn.Embedding(config.vocab_size, config.n_embd),
            wpe = nn.Embedding(config.block_size, config.n_embd),
            drop = nn.Dropout(config.dropout),
            h = nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f = LayerNorm(config.n_embd, bias=config.bias),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight # https://paperswithcode.com/method/weight-tying

        # init all weights
        self.apply(self._init_weights)
        # apply special scaled init to the residual projections, per GPT-2 paper
        for pn, p in self.named_parameters():
            if pn.endswith('c_proj.weight'):
                torch.nn.init.normal_(p, mean=0.0, std=0.02/math.sqrt(2 * config.n_layer))

    def get_num_params(self, non_embedding=True):
        n_params = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n_params -= self.transformer.wpe.weight.numel()
        return n_params

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx, targets=None):
        device = idx.device
        b, t = idx.size()
        assert t <= self.config.block_size, f"Cannot forward sequence of length {t}, block size is only {self.config.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=device) # shape (t)

        tok_emb = self.transformer.wte(idx) # token embeddings of shape (b, t, n_embd)
        pos_emb = self.transformer.wpe(pos) # position embeddings of shape (t, n_embd)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)

        if targets is not None:
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            logits = self.lm_head(x[:, [-1], :]) # note: using list [-1] to preserve the time dim
            loss = None

        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        param_dict = {pn: p for pn, p in self.named_parameters()}
        param_dict = {pn: p for pn, p in param_dict.items() if p.requires_grad}
        decay_params = [p for n, p in param_dict.items() if p.dim() >= 2]
        nodecay_params = [p for n, p in param_dict.items() if p.dim() < 2]
        optim_groups = [
            {'params': decay_params, 'weight_decay': weight_decay},
            {'params': nodecay_params, 'weight_decay': 0.0}
        ]
        num_decay_params = sum(p.numel() for p in decay_params)
        num_nodecay_params = sum(p.numel() for p in nodecay_params)
        fused_available = 'fused' in inspect.signature(torch.optim.AdamW).parameters
        use_fused = fused_available and device_type == 'cuda'
        extra_args = dict(fused=True) if use_fused else dict()
        optimizer = torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas, **extra_args)
        return optimizer

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= self.config.block_size else idx[:, -self.config.block_size:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float('Inf')
            probs = F.softmax(logits, dim=-1)
            idx_next = torch.multinomial(probs, num_samples=1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


def get_batch(step):
    ix = IX[step]
    x = torch.stack([torch.from_numpy((DATA[i:i+BLOCK]).astype('int64')) for i in ix])
    y = torch.stack([torch.from_numpy((DATA[i+1:i+1+BLOCK]).astype('int64')) for i in ix])
    return x, y


torch.manual_seed(1337)
BLOCK = 16
model = GPT(GPTConfig(block_size=BLOCK, dropout=DROPOUT, flash=FLASH))
if INIT is not None:
    model.load_state_dict({k: torch.tensor(v) for k, v in INIT.items()})
n_params = model.get_num_params()
optimizer = model.configure_optimizers(0.1, 1e-2, (0.9, 0.95), 'cpu')
losses = []
model.train()
for step in range(STEPS):
    X, Y = get_batch(step)
    logits, loss = model(X, Y)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    losses.append(loss.item())
model.eval()
sample = model.generate(torch.zeros((2, 1), dtype=torch.long), 20, temperature=0.8, top_k=5)
state = {k: v.detach().cpu().numpy().copy() for k, v in model.state_dict().items()}
"""


def _corpus(n=600, ntokens=24, seed=0):
    rng = np.random.default_rng(seed)
    nxt = rng.permutation(ntokens)
    ids = [0]
    for _ in range(n - 1):
        ids.append(int(nxt[ids[-1]]) if rng.random() < 0.9 else int(rng.integers(ntokens)))
    return np.array(ids, np.uint16)


def _run(imports, **params):
    data = _corpus()
    rng = np.random.default_rng(5)
    env = {
        "DATA": data,
        "IX": rng.integers(0, len(data) - 17, size=(40, 8)),
        "DROPOUT": 0.0,
        "INIT": None,
        **params,
    }
    exec(compile(imports + PROGRAM, "mingpt_port", "exec"), env)
    return env


@pytest.mark.parametrize("flash", [False, True], ids=["tril_mask", "sdpa"])
def test_the_gpt_trains_and_samples_on_ferro(flash):
    env = _run(FERRO_IMPORTS, FLASH=flash, DROPOUT=0.1, STEPS=30)
    losses = env["losses"]
    assert np.all(np.isfinite(losses))
    assert np.mean(losses[-5:]) < 0.8 * np.mean(losses[:5])
    sample = env["sample"]
    assert tuple(sample.shape) == (2, 21)
    assert 0 <= int(sample.min()) and int(sample.max()) < 24
    model = env["model"]
    assert model.transformer.wte.weight is model.lm_head.weight
    assert ("transformer.h.0.attn.bias" in env["state"]) == (not flash)


@pytest.mark.torch
@pytest.mark.parametrize("flash", [False, True], ids=["tril_mask", "sdpa"])
def test_the_gpt_matches_torch_from_the_same_weights(flash):
    pytest.importorskip("torch")
    import ferro

    ferro.manual_seed(0)
    init = _run(FERRO_IMPORTS, FLASH=flash, STEPS=0)["state"]
    ours = _run(FERRO_IMPORTS, FLASH=flash, STEPS=10, INIT=init)
    theirs = _run(TORCH_IMPORTS, FLASH=flash, STEPS=10, INIT=init)
    assert sorted(ours["state"]) == sorted(theirs["state"])
    assert ours["n_params"] == theirs["n_params"]
    np.testing.assert_allclose(ours["losses"], theirs["losses"], rtol=1e-4)
    for k, v in theirs["state"].items():
        ok = np.ones(v.shape, bool)
        if k.endswith("c_attn.bias"):
            # The key bias has a zero true gradient (softmax is invariant to adding q.b_k to a
            # whole row): both libraries' gradients there are rounding noise, which Adam
            # normalises into lr-sized steps, so those 32 entries cannot match.
            ok[32:64] = False
        np.testing.assert_allclose(ours["state"][k][ok], v[ok], rtol=1e-3, atol=1e-5)
