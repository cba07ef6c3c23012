"""PyTorch's hook-based reparametrizations of a module's weight: :func:`weight_norm` (Salimans
& Kingma: ``w = g * v / ||v||``) and :func:`spectral_norm` (Miyato et al.: ``w = w_orig /
sigma(w_orig)``, sigma by power iteration), with their ``remove_*``. Each moves the weight into
new parameters and buffers under PyTorch's names (``weight_g``/``weight_v``;
``weight_orig``/``weight_u``/``weight_v``), so state dicts load both ways, and a forward
pre-hook recomputes the weight before every call.

Example:
    >>> conv = weight_norm(ferro.nn.Conv1d(4, 8, 3))
    >>> sorted(name for name, _ in conv.named_parameters())
    ['bias', 'weight_g', 'weight_v']
"""

from __future__ import annotations

from ferro.errors import ArgumentError
from ferro.nn.parameter import Parameter


def _norm_except_dim(v, dim):
    # PyTorch's norm_except_dim: dim -1 (also what dim=None becomes) is the whole tensor's norm.
    if dim == -1:
        return v.norm()
    axes = tuple(a for a in range(v.ndim) if a != dim)
    return v.norm(dim=axes, keepdim=True) if axes else v.abs()


class _WeightNorm:
    def __init__(self, name, dim):
        self.name, self.dim = name, dim

    def compute(self, module):
        g = getattr(module, self.name + "_g")
        v = getattr(module, self.name + "_v")
        return v * (g / _norm_except_dim(v, self.dim))

    def __call__(self, module, inputs):
        setattr(module, self.name, self.compute(module))


class _SpectralNorm:
    def __init__(self, name, n_power_iterations, dim, eps):
        self.name, self.n, self.dim, self.eps = name, n_power_iterations, dim, eps

    def matrix(self, w):
        if self.dim != 0:
            w = w.movedim(self.dim, 0)
        return w.reshape(w.shape[0], -1)

    def compute(self, module, do_power_iteration):
        from ferro.autograd import no_grad
        from ferro.nn.functional import normalize

        w = getattr(module, self.name + "_orig")
        u, v = getattr(module, self.name + "_u"), getattr(module, self.name + "_v")
        mat = self.matrix(w)
        if do_power_iteration:
            with no_grad():
                for _ in range(self.n):  # in place: the buffers are the iteration's state
                    v.copy_(normalize(mat.t().mv(u), dim=0, eps=self.eps))
                    u.copy_(normalize(mat.mv(v), dim=0, eps=self.eps))
            if self.n > 0:
                u, v = u.clone(), v.clone()
        sigma = u.dot(mat.mv(v))
        return w / sigma

    def __call__(self, module, inputs):
        setattr(module, self.name, self.compute(module, module.training))


def _hook_key(module, kind, name):
    """The handle key of ``module``'s ``kind`` hook on ``name``, or None."""
    for key, hook in module._forward_pre_hooks.fns.items():
        if isinstance(hook, kind) and hook.name == name:
            return key
    return None


def _find(module, kind, name, who):
    key = _hook_key(module, kind, name)
    if key is None:
        raise ArgumentError(
            f"{who}: {name!r} of {type(module).__name__} has no such reparametrization"
        )
    return key, module._forward_pre_hooks.fns[key]


def _refuse_second(module, kind, name, who):
    if _hook_key(module, kind, name) is not None:
        raise ArgumentError(f"{who}: {name!r} already has a {who} hook")


def weight_norm(module, name: str = "weight", dim: int | None = 0):
    """Reparametrize ``module.<name>`` as ``g * v / ||v||`` (the norm over every dim but
    ``dim``; ``dim=None`` over the whole tensor), with parameters ``<name>_g`` and
    ``<name>_v``; returns ``module``."""
    from ferro.autograd import no_grad

    _refuse_second(module, _WeightNorm, name, "weight_norm")
    fn = _WeightNorm(name, -1 if dim is None else dim)
    weight = getattr(module, name)
    with no_grad():
        g = _norm_except_dim(weight, fn.dim).detach().clone()
    del module._parameters[name]
    module.register_parameter(name + "_g", Parameter(g))
    module.register_parameter(name + "_v", Parameter(weight.detach()))
    setattr(module, name, fn.compute(module))
    module.register_forward_pre_hook(fn)
    return module


def remove_weight_norm(module, name: str = "weight"):
    """Undo :func:`weight_norm`: ``<name>`` is a parameter again (its current value)."""
    key, fn = _find(module, _WeightNorm, name, "remove_weight_norm")
    weight = fn.compute(module).detach()
    del module._forward_pre_hooks.fns[key]
    delattr(module, name)
    del module._parameters[name + "_g"], module._parameters[name + "_v"]
    module.register_parameter(name, Parameter(weight))
    return module


def spectral_norm(
    module, name: str = "weight", n_power_iterations: int = 1, eps: float = 1e-12, dim=None
):
    """Divide ``module.<name>`` by its largest singular value, estimated by
    ``n_power_iterations`` of power iteration per training-mode call (buffers ``<name>_u``,
    ``<name>_v``; parameter ``<name>_orig``); ``dim`` is the output dim (default 0, 1 for
    transposed convolutions). Returns ``module``."""
    from ferro.autograd import no_grad
    from ferro.creation import randn
    from ferro.nn.functional import normalize
    from ferro.nn.modules.conv import _ConvTranspose

    if int(n_power_iterations) < 0:
        raise ArgumentError(
            f"spectral_norm: n_power_iterations must be >= 0, got {n_power_iterations}"
        )
    if dim is None:
        dim = 1 if isinstance(module, _ConvTranspose) else 0
    _refuse_second(module, _SpectralNorm, name, "spectral_norm")
    fn = _SpectralNorm(name, int(n_power_iterations), dim, eps)
    weight = getattr(module, name)
    with no_grad():
        mat = fn.matrix(weight)
        kw = {"dtype": weight.dtype, "device": weight.device}
        u = normalize(randn(mat.shape[0], **kw), dim=0, eps=eps)
        v = normalize(randn(mat.shape[1], **kw), dim=0, eps=eps)
    del module._parameters[name]
    module.register_parameter(name + "_orig", weight)
    setattr(module, name, weight.detach())
    module.register_buffer(name + "_u", u)
    module.register_buffer(name + "_v", v)
    module.register_forward_pre_hook(fn)
    return module


def remove_spectral_norm(module, name: str = "weight"):
    """Undo :func:`spectral_norm`: ``<name>`` is a parameter again (its current value)."""
    key, fn = _find(module, _SpectralNorm, name, "remove_spectral_norm")
    weight = fn.compute(module, do_power_iteration=False).detach()
    del module._forward_pre_hooks.fns[key]
    delattr(module, name)
    del module._parameters[name + "_orig"]
    del module._buffers[name + "_u"], module._buffers[name + "_v"]
    module.register_parameter(name, Parameter(weight))
    return module


__all__ = ["weight_norm", "remove_weight_norm", "spectral_norm", "remove_spectral_norm"]
