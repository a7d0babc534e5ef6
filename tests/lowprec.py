"""Emulated arithmetic for tests/test_tolerances.py: a task's reference re-run so that every intermediate
value is rounded to a chosen dtype, and every sum (reductions, GEMM and convolution contractions, softmax
and normalisation statistics) is accumulated one term at a time in that dtype.

`Emulate(torch.float16)` is the shortcut a tolerance must reject where a task says "accumulate in float32"
(a float16 accumulator, float16 math); `Emulate(torch.float32, reverse=True)` is an honest float32 kernel
that sums in another order (last term first), which every tolerance must accept. Values travel as float64
tensors holding numbers representable in the emulated dtype, so the only rounding is the emulated one.

A TorchFunctionMode sees each torch call of the reference: contractions and reductions it knows are
replaced by sequential emulations, any other call runs in float64 and its result is rounded (one rounding
per elementwise op: "math in the dtype"). Elementwise functions that are one call but several operations in
a kernel (GELU, SiLU) are spelled out, so that their intermediate roundings show."""
from __future__ import annotations

import itertools
import math

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode


def _rounder(dtype: torch.dtype):
    def r(t):
        if isinstance(t, torch.Tensor) and t.is_floating_point():
            return t.to(dtype).to(torch.float64)
        return t
    return r


class Emulate(TorchFunctionMode):
    def __init__(self, dtype: torch.dtype, reverse: bool = False):
        super().__init__()
        self.dtype, self.reverse, self.r = dtype, reverse, _rounder(dtype)

    # ---- sequential building blocks (called with the mode disabled: plain float64 torch) ----
    def _order(self, n: int):
        return range(n - 1, -1, -1) if self.reverse else range(n)

    def seq_sum(self, x, dim=None, keepdim=False):
        r = self.r
        if dim is None:
            dim = tuple(range(x.dim()))
        dims = (dim,) if isinstance(dim, int) else tuple(dim)
        dims = tuple(d % x.dim() for d in dims)
        rest = [d for d in range(x.dim()) if d not in dims]
        y = x.permute(*rest, *dims).reshape(*[x.shape[d] for d in rest], -1)
        acc = torch.zeros(y.shape[:-1], dtype=torch.float64)
        for i in self._order(y.shape[-1]):
            acc = r(acc + y[..., i])
        if keepdim:
            for d in sorted(dims):
                acc = acc.unsqueeze(d)
        return acc

    def seq_mean(self, x, dim=None, keepdim=False):
        s = self.seq_sum(x, dim, keepdim)
        return self.r(s / (x.numel() / max(s.numel(), 1)))

    def contract(self, a, b):
        """a [..., M, K] @ b [..., K, N], the K products accumulated one at a time."""
        r = self.r
        acc = None
        for k in self._order(a.shape[-1]):
            term = r(a[..., :, k:k + 1] * b[..., k:k + 1, :])
            acc = term if acc is None else r(acc + term)
        return acc

    def masked_sum(self, func, x, weight, keep: int, **kw):
        """A convolution as a sum over its weight entries (all but the output-channel dim `keep`): each
        masked call yields one product per output element, added in sequence."""
        r = self.r
        others = [range(n) for d, n in enumerate(weight.shape) if d != keep]
        order = list(itertools.product(*others))
        if self.reverse:
            order.reverse()
        acc = None
        for idx in order:
            full = list(idx)
            full.insert(keep, slice(None))
            w = torch.zeros_like(weight)
            w[tuple(full)] = weight[tuple(full)]
            term = r(func(x, w, None, **kw))
            acc = term if acc is None else r(acc + term)
        return acc

    def softmax(self, s, dim=-1):
        r = self.r
        m = s.amax(dim=dim, keepdim=True)
        m = torch.where(torch.isfinite(m), m, torch.zeros_like(m))
        e = r(torch.exp(r(s - m)))
        return r(e / self.seq_sum(e, dim, keepdim=True))

    def sdpa(self, q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        r = self.r
        if enable_gqa and k.shape[-3] != q.shape[-3]:
            rep = q.shape[-3] // k.shape[-3]
            k, v = k.repeat_interleave(rep, dim=-3), v.repeat_interleave(rep, dim=-3)
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        s = r(self.contract(q, k.transpose(-2, -1)) * scale)
        if is_causal:
            attn_mask = torch.ones(s.shape[-2:], dtype=torch.bool).tril()
        if attn_mask is not None:
            s = s.masked_fill(~attn_mask, float("-inf")) if attn_mask.dtype == torch.bool else r(s + attn_mask)
        return self.contract(self.softmax(s), v)

    def _normalize(self, x, dims, eps):
        r = self.r
        mean = self.seq_mean(x, dims, keepdim=True)
        d = r(x - mean)
        var = self.seq_mean(r(d * d), dims, keepdim=True)
        return r(d * r(torch.rsqrt(r(var + eps))))

    def _affine(self, y, weight, bias):
        r = self.r
        if weight is not None:
            y = r(y * weight)
        if bias is not None:
            y = r(y + bias)
        return y

    def layer_norm(self, x, shape, weight=None, bias=None, eps=1e-5):
        dims = tuple(range(x.dim() - len(shape), x.dim()))
        return self._affine(self._normalize(x, dims, eps), weight, bias)

    def rms_norm(self, x, shape, weight=None, eps=None):
        r = self.r
        dims = tuple(range(x.dim() - len(shape), x.dim()))
        ms = self.seq_mean(r(x * x), dims, keepdim=True)
        eps = torch.finfo(torch.float32).eps if eps is None else eps
        return self._affine(r(x * r(torch.rsqrt(r(ms + eps)))), weight, None)

    def group_norm(self, x, groups, weight=None, bias=None, eps=1e-5):
        n, c = x.shape[:2]
        y = self._normalize(x.reshape(n, groups, -1), (2,), eps).reshape(x.shape)
        view = (1, c) + (1,) * (x.dim() - 2)
        return self._affine(y, None if weight is None else weight.reshape(view),
                            None if bias is None else bias.reshape(view))

    def cumsum(self, x, dim, **_):
        r = self.r
        y = x.movedim(dim, -1)
        out = torch.empty_like(y)
        acc = torch.zeros(y.shape[:-1], dtype=torch.float64)
        for i in range(y.shape[-1]):          # a scan has one order: the reverse is not a reordering
            acc = r(acc + y[..., i])
            out[..., i] = acc
        return out.movedim(-1, dim)

    def cross_entropy(self, x, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                      reduction="mean", label_smoothing=0.0):
        r = self.r
        m = x.amax(dim=-1, keepdim=True)
        lse = r(r(torch.log(self.seq_sum(r(torch.exp(r(x - m))), -1))) + m.squeeze(-1))
        keep = target != ignore_index
        picked = x.gather(-1, target.clamp_min(0).unsqueeze(-1)).squeeze(-1)
        loss = torch.where(keep, r(lse - picked), torch.zeros_like(lse))
        assert reduction == "none", reduction
        return loss

    def gelu(self, x, approximate="none"):
        r = self.r
        if approximate == "tanh":
            inner = r(r(x + r(0.044715 * r(r(x * x) * x))) * math.sqrt(2 / math.pi))
            return r(r(0.5 * x) * r(1 + r(torch.tanh(inner))))
        return r(r(0.5 * x) * r(1 + r(torch.erf(r(x * (1 / math.sqrt(2)))))))

    def silu(self, x, inplace=False):
        return self.r(x * self.r(torch.sigmoid(x)))

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        handler = _HANDLERS.get(func)
        if handler is None and getattr(func, "__qualname__", "").startswith("TensorBase."):
            handler = _METHODS.get(func.__name__)       # x.sum(), x @ y, ...: TensorBase's own methods
        out = handler(self, *args, **kwargs) if handler else func(*args, **kwargs)
        return _round_tree(out, self.r)


def _matmul(em, a, b):
    if b.dim() == 1:
        return em.contract(a, b.unsqueeze(-1)).squeeze(-1)
    if a.dim() == 1:
        return em.contract(a.unsqueeze(0), b).squeeze(0)
    return em.contract(a, b)


def _linear(em, x, weight, bias=None):
    y = em.contract(x, weight.transpose(-2, -1))
    return y if bias is None else em.r(y + bias)


def _pair(v, n=2):
    return tuple(v) if isinstance(v, (tuple, list)) else (v,) * n


def _conv2d(em, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """im2col, then the C/groups * R * S products of each output accumulated one at a time."""
    n, c, h, w = x.shape
    k, cg, r, s = weight.shape
    st, pd, dl = _pair(stride), _pair(padding), _pair(dilation)
    cols = F.unfold(x, (r, s), dilation=dl, padding=pd, stride=st)          # [N, C*R*S, L]
    cols = cols.reshape(n, groups, cg * r * s, -1)
    wm = weight.reshape(1, groups, k // groups, cg * r * s)
    y = em.contract(wm, cols)                                                # [N, G, K/G, L]
    ho = (h + 2 * pd[0] - dl[0] * (r - 1) - 1) // st[0] + 1
    wo = (w + 2 * pd[1] - dl[1] * (s - 1) - 1) // st[1] + 1
    y = y.reshape(n, k, ho, wo)
    return y if bias is None else em.r(y + bias.reshape(1, -1, 1, 1))


def _conv1d(em, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    y = _conv2d(em, x.unsqueeze(2), weight.unsqueeze(2), bias, (1, _pair(stride, 1)[0]),
                (0, _pair(padding, 1)[0]), (1, _pair(dilation, 1)[0]), groups)
    return y.squeeze(2)


def _conv_transpose2d(em, x, weight, bias=None, *args, **kw):
    kw.update(zip(("stride", "padding", "output_padding", "groups", "dilation"), args))
    y = em.masked_sum(F.conv_transpose2d, x, weight, 1, **kw)
    return y if bias is None else em.r(y + bias.reshape(1, -1, 1, 1))


def _sum(em, x, dim=None, keepdim=False, dtype=None):
    if not x.is_floating_point():       # counting (a sum of bools or integers) is exact in any kernel
        return x.sum() if dim is None else x.sum(dim, keepdim=keepdim)
    return em.seq_sum(x, dim, keepdim)


def _mean(em, x, dim=None, keepdim=False, dtype=None):
    return em.seq_mean(x, dim, keepdim)


def _vector_norm(em, x, ord=2, dim=None, keepdim=False, dtype=None):
    assert ord == 2, ord
    return em.r(torch.sqrt(em.seq_sum(em.r(x * x), dim, keepdim)))


def _softmax(em, x, dim=-1, *_, **__):
    return em.softmax(x, dim)


def _batch_norm(em, x, running_mean, running_var, weight=None, bias=None, training=False, momentum=0.1,
                eps=1e-5):
    r, view = em.r, (1, -1) + (1,) * (x.dim() - 2)
    y = r(r(x - running_mean.reshape(view)) * r(torch.rsqrt(r(running_var.reshape(view) + eps))))
    return em._affine(y, None if weight is None else weight.reshape(view), None if bias is None else bias.reshape(view))


_HANDLERS = {
    torch.matmul: _matmul, torch.Tensor.__matmul__: _matmul, torch.mm: _matmul, torch.bmm: _matmul,
    torch.mv: _matmul, F.linear: _linear, torch.addmm: lambda em, c, a, b, **kw: em.r(c + _matmul(em, a, b)),
    F.conv1d: _conv1d, F.conv2d: _conv2d, F.conv_transpose2d: _conv_transpose2d,
    torch.sum: _sum, torch.Tensor.sum: _sum, torch.mean: _mean, torch.Tensor.mean: _mean,
    torch.linalg.vector_norm: _vector_norm, torch.softmax: _softmax, torch.Tensor.softmax: _softmax,
    F.softmax: _softmax, torch.cumsum: lambda em, x, dim, **kw: em.cumsum(x, dim),
    torch.Tensor.cumsum: lambda em, x, dim, **kw: em.cumsum(x, dim),
    F.scaled_dot_product_attention: Emulate.sdpa, F.layer_norm: Emulate.layer_norm,
    F.rms_norm: Emulate.rms_norm, F.group_norm: Emulate.group_norm, F.batch_norm: _batch_norm,
    F.cross_entropy: Emulate.cross_entropy, F.gelu: Emulate.gelu, F.silu: Emulate.silu,
}

_METHODS = {"matmul": _matmul, "__matmul__": _matmul, "mm": _matmul, "bmm": _matmul, "mv": _matmul,
            "sum": _sum, "mean": _mean, "softmax": _softmax, "cumsum": lambda em, x, dim, **kw: em.cumsum(x, dim)}


def _round_tree(out, r):
    if isinstance(out, torch.Tensor):
        return r(out)
    if isinstance(out, tuple):      # torch.return_types (topk, sort, max with dim) keep their type
        items = [_round_tree(o, r) for o in out]
        return type(out)(items) if type(out).__module__ == "torch.return_types" else tuple(items)
    if isinstance(out, list):
        return [_round_tree(o, r) for o in out]
    return out


def run(reference, inputs, dtype: torch.dtype, reverse: bool = False) -> torch.Tensor:
    """The reference on `inputs` (rounded to `dtype` first, as a kernel reading them in it would) with
    every intermediate in `dtype` and every sum sequential; returned as float64."""
    r = _rounder(dtype)
    ins = tuple(r(x.double()) if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs)
    with torch.no_grad(), Emulate(dtype, reverse):
        return reference(*ins)
