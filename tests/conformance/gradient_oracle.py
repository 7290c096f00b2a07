#!/usr/bin/env python3
"""mixprec's loss and gradients against PyTorch's, on the same weights and the same batch.

    gradient_oracle.py [--build PROGRAM] [--models mlp,cnn,vit] [--precisions float32,mixed_float16]
                       [--seed 1] [--batch 32] [--probes 16] [--work DIR]

For each model and precision, conformance_gradients (tests/conformance/gradients.cpp) builds the model as
mixprec-train does, draws a batch and writes the weights, the batch, the loss and the gradient of every
variable (no loss scaling) to a safetensors file. This script builds the same architecture from torch.nn,
loads the weights (a Dense kernel (in, out) is the transpose of a Linear weight (out, in); Conv2D kernels
are (out, in, kh, kw) in both; the attention's fused qkv kernel is MultiheadAttention's in_proj_weight
transposed), runs forward and backward on the batch and compares. It needs PyTorch 2.x, safetensors and
NumPy (tests/conformance/run.sh gradients makes such an environment and runs it).

float32: the bound. Both programs compute the same function in float32, each in its own order (BLAS
blocking, oneDNN convolutions, PyTorch's fused flash attention, Welford or two-pass variances), so they
differ by rounding. Every rounding is bounded: fl(a op b) = (a op b)(1 + d), |d| <= u = 2^-24; exp and tanh
within 2 ulp. A worst-case bound (all roundings adding up with the same sign, propagated through the
absolute values of every Jacobian) is valid but useless here: through the vit's LayerNorms and products it
grows about tenfold per layer and ends 10^13 times above the observed differences. So the bound is the
probabilistic one of Higham and Mary (SIAM J. Sci. Comput. 41, 2019): the rounding errors d_i are
independent, of mean zero and |d_i| <= u. To first order an output's error is then sum_i c_i d_i, and
Hoeffding's inequality gives |error| <= LAMBDA sigma with sigma^2 = sum_i (c_i u |v_i|)^2 (v_i the value
rounded), except with probability 2 exp(-LAMBDA^2 / 2) = 2.5e-14 per element for LAMBDA = 8.
sigma is computed without forming the c_i: class Analysis runs forward and backward in float64, written op
by op as both programs compute them, and in each of --probes runs moves every rounded intermediate by
+-l (a random sign per element) where l^2 bounds the sum of (u |v|)^2 over the roundings that made it:
  - a sum of k products (matrix product, convolution with its bias, a reduction over the batch, softmax's
    and layer norm's sums): at most 2k roundings, each of a value <= sum |terms|, so l = sqrt(2k) u
    sum |terms|, whatever the order or blocking (for k <= 128, LAMBDA l exceeds the worst case
    gamma_k sum |terms|);
  - elementwise ops: a few u |v|; softmax's probabilities u p (1 + log sum) more, which also covers
    exp(log_softmax) and the online softmax of fused attention; layer norm's terms in |x| + |mean| rather
    than |x - mean|, covering the centred form (mixprec) and PyTorch's x rstd - mean rstd, and any
    variance algorithm; the attention backward's row sum covers rowsum(dO * O) (fused kernels) beside
    sum_j P dP; values both programs recompute in the backward pass (P, tanh in GELU, x̂) get new roundings.
The mean of the squared deviations of the probe runs from the unperturbed run estimates sigma^2 for every
element of the loss and the gradients (ReLU and max-pooling decisions are redecided in each probe, so
a pre-activation within rounding of 0 widens sigma there). mixprec and PyTorch are each within LAMBDA
sigma of the exact value, so they differ by at most bound = 2 LAMBDA sigma. Per variable the script
prints max |mixprec - torch|, the relative difference max |mixprec - torch| / max |torch|, the worst
|mixprec - torch| / bound over the elements, and how many sigma each program is from the float64 value
(both must stay below LAMBDA; PyTorch's distance checks the analysis itself). The local bounds are
worst cases, so real differences sit far inside: ratios of 1e-3 to 1e-2 are normal, while a real
difference (an erf GELU, another epsilon, a transposed kernel) gives ratios of 10^2 and more.

mixed_float16 (report only): PyTorch runs under torch.autocast("cpu", dtype=torch.float16), mixprec under
its mixed_float16 policy, both without loss scaling. Per variable: the relative difference (as above)
between the two and of each from the float64 values, and the fraction of gradient elements that are 0
though their exact value rounds to a non-zero float16 (underflow). Then the ops autocast ran, by result
dtype (from a TorchDispatchMode log). Where they differ, and why:
  - both cast the batch to float16 and compute every product (Linear, Conv2d, the attention's products)
    on float16 operands with float32 accumulation and one rounding of the result, bias included (PyTorch's
    CPU addmm, mm and convolution do so); relu, max pooling and their gradients are float16 in both; the
    cross-entropy takes float16 logits, is computed in float32 (autocast runs log_softmax and nll_loss in
    float32), and its gradient is rounded to float16 (autocast casts it back at the boundary); a Linear or
    Conv2d weight gradient is a float16 product in both, widened to float32. So for mlp and cnn the two
    differ by float16 rounding order only (about one float16 unit, 2^-11, of the largest gradient).
  - mixprec rounds every op's result to float16 and reads every variable as its float16 working copy; autocast
    rounds only where an op on its lower-precision list runs, and elsewhere type promotion decides: a float16
    product plus a float32 tensor is float32. In the vit, the position embeddings (a float32 parameter) make
    the residual stream float32 from the first addition on: x + attention, y + mlp, all three layer norms
    and every layer norm (input, gamma, beta, output), the mean over tokens and all their gradients are
    float32 in PyTorch and float16 in mixprec, whose layer norm keeps only its statistics in float32. Only
    the products, GELU (on mlp1's float16 output) and the attention kernel see float16 in PyTorch.
  - PyTorch's packed attention projection adds the bias after the float16 product (two roundings, where
    mixprec has one). Its fused flash attention keeps the scores and the softmax sums in float32, rounds
    only exp(s - max) to float16 for the product with V and divides by the float32 sum at the end; mixprec
    rounds the scores, P and the context to float16 one by one.
  - without loss scaling, activation gradients of the order of the loss gradient (softmax - onehot)/B
    times a few weights are already near float16's subnormal range (below 6.1e-5 the spacing is 6e-8), so
    the first layers' gradients carry percent-level errors in both programs, alike, as on real hardware.
    This is what loss scaling is for.

Output: the per-variable lines, then a markdown table: model | precision | loss (mixprec / torch) | worst
gradient relative difference | worst diff/bound | result. Exit status 1 if a float32 comparison exceeds
its bound (mixed_float16 never fails), 2 if conformance_gradients cannot be run.
"""

import argparse
import math
import os
import subprocess
import sys
import tempfile

import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from torch import nn
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

U = 2.0 ** -24  # float32's unit roundoff
LAMBDA = 8  # standard deviations: Hoeffding gives P(|error| > 8σ) <= 2 exp(-32) = 2.5e-14 per element
GELU_K = math.sqrt(2 / math.pi)
GELU_C = 0.044715


def sum_scale(k):
    """The rounding scale of a float32 sum of k products, relative to Σ|terms|: at most 2k roundings (k
    products, k - 1 additions, in any order), each of a value at most Σ|terms|, so Σ (u·value)² <= 2k u²."""
    return math.sqrt(2 * k) * U


# ---- the models in torch.nn, named as mixprec names its layers ---------------------------------------


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense, self.dense_1, self.dense_2 = nn.Linear(784, 512), nn.Linear(512, 512), nn.Linear(512, 10)

    def forward(self, x):
        x = F.relu(self.dense(x.flatten(1)))
        return self.dense_2(F.relu(self.dense_1(x)))


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv2d, self.conv2d_1 = nn.Conv2d(1, 32, 3), nn.Conv2d(32, 64, 3)  # "valid"
        self.dense, self.dense_1 = nn.Linear(64 * 5 * 5, 128), nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv2d(x)), 2)  # 28 -> 26 -> 13
        x = F.max_pool2d(F.relu(self.conv2d_1(x)), 2)  # 13 -> 11 -> 5 (the last row and column dropped)
        return self.dense_1(F.relu(self.dense(x.flatten(1))))  # channels first: (64, 5, 5) -> 1600


def patches(x):
    """(B, 1, 28, 28) -> (B, 16, 49): 7x7 patches row-major, each laid out channel, row, column."""
    n = x.shape[0]
    return x.reshape(n, 1, 4, 7, 4, 7).permute(0, 2, 4, 1, 3, 5).reshape(n, 16, 49)


class Block(nn.Module):
    """Pre-norm: x + attention(norm1(x)), then y + mlp2(gelu_tanh(mlp1(norm2(y))))."""

    def __init__(self, width=64, heads=4, mlp_width=128):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(width, eps=1e-6), nn.LayerNorm(width, eps=1e-6)
        self.attention = nn.MultiheadAttention(width, heads, batch_first=True)
        self.mlp1, self.mlp2 = nn.Linear(width, mlp_width), nn.Linear(mlp_width, width)

    def forward(self, x):
        h = self.norm1(x)
        y = x + self.attention(h, h, h, need_weights=False)[0]
        return y + self.mlp2(F.gelu(self.mlp1(self.norm2(y)), approximate="tanh"))


class Vit(nn.Module):
    def __init__(self):
        super().__init__()
        self.dense = nn.Linear(49, 64)
        self.position_embedding = nn.Parameter(torch.zeros(16, 64))
        self.transformer_block, self.transformer_block_1 = Block(), Block()
        self.layer_normalization = nn.LayerNorm(64, eps=1e-6)
        self.dense_1 = nn.Linear(64, 10)

    def forward(self, x):
        h = self.dense(patches(x)) + self.position_embedding
        h = self.transformer_block_1(self.transformer_block(h))
        return self.dense_1(self.layer_normalization(h).mean(1))


TORCH_MODELS = {"mlp": Mlp, "cnn": Cnn, "vit": Vit}


def torch_name(name):
    """The torch parameter for a mixprec variable: 'transformer_block/attention/qkv/kernel' ->
    'transformer_block.attention.in_proj_weight'."""
    parts = name.split("/")
    last = {"kernel": "weight", "gamma": "weight", "beta": "bias"}.get(parts[-1], parts[-1])
    path = ".".join(parts[:-1] + [last])
    path = path.replace("attention.qkv.weight", "attention.in_proj_weight")
    path = path.replace("attention.qkv.bias", "attention.in_proj_bias")
    path = path.replace("attention.output.", "attention.out_proj.")
    return path.replace("position_embedding.embeddings", "position_embedding")


def is_dense_kernel(name, tensor):
    return name.endswith("/kernel") and tensor.dim() == 2  # (in, out); torch's Linear weight is (out, in)


def torch_model(model, weights, names):
    """The torch.nn model holding mixprec's float32 weights; every parameter must get one."""
    net = TORCH_MODELS[model]()
    params = dict(net.named_parameters())
    if sorted(torch_name(n) for n in names) != sorted(params):
        sys.exit("gradient_oracle: %s's variables %s do not map onto the torch parameters %s"
                 % (model, sorted(names), sorted(params)))
    with torch.no_grad():
        for name in names:
            value = weights[name].T if is_dense_kernel(name, weights[name]) else weights[name]
            target = params[torch_name(name)]
            if target.shape != value.shape:
                sys.exit("gradient_oracle: %s is %s, torch's %s is %s"
                         % (name, tuple(value.shape), torch_name(name), tuple(target.shape)))
            target.copy_(value)
    return net


def torch_step(net, names, x, labels, autocast):
    """Loss and gradients by mixprec name, in mixprec's layouts, as float64."""
    net.zero_grad()
    with torch.autocast("cpu", dtype=torch.float16, enabled=autocast):
        loss = F.cross_entropy(net(x), labels)
    loss.backward()
    params = dict(net.named_parameters())
    grads = {}
    for name in names:
        g = params[torch_name(name)].grad
        grads[name] = (g.T if is_dense_kernel(name, g) else g).double()
    return loss.item(), grads


# ---- the float64 model of a float32 computation -------------------------------------------------------


class Analysis:
    """One forward and backward pass in float64, ops recorded on a small tape, gradients by variable name.
    With a generator, every rounded intermediate v becomes v ± l (a random sign per element), where l² bounds
    Σ (u·value)² over the roundings that made v (the module docstring); without one, the values are exact
    (to float64)."""

    def __init__(self, params, generator=None):
        self.p = params
        self.generator = generator
        self.steps = []
        self.grads = {}

    def rounded(self, value, bound):
        if self.generator is None:
            return value
        signs = torch.randint(0, 2, value.shape, generator=self.generator, dtype=value.dtype) * 2 - 1
        return value + signs * bound

    def record(self, inputs, output, backward):
        self.steps.append((inputs, output, backward))
        return output

    def backward(self, output, seed):
        pending = {id(output): seed}
        for inputs, out, back in reversed(self.steps):
            dy = pending.pop(id(out), None)
            if dy is None:
                continue
            for node, dx in zip(inputs, back(dy)):
                if id(node) in pending:  # fan-out: the two gradients are added, one more rounding
                    total = pending[id(node)] + dx
                    pending[id(node)] = self.rounded(total, U * total.abs())
                else:
                    pending[id(node)] = dx

    def sum_rows(self, t):  # Σ over the leading axes (the batch, the tokens), as a weight gradient's
        rows = t.reshape(-1, t.shape[-1])
        return self.rounded(rows.sum(0), sum_scale(rows.shape[0]) * rows.abs().sum(0))

    def product(self, a, b):  # a @ b, k terms per element
        return self.rounded(a @ b, sum_scale(a.shape[-1]) * (a.abs() @ b.abs()))

    def dense(self, x, name):  # x (..., k) @ kernel (k, n) + bias
        w, b = self.p[name + "/kernel"], self.p[name + "/bias"]
        k, n = w.shape
        y = self.rounded(x @ w + b, sum_scale(k + 1) * (x.abs() @ w.abs() + b.abs()))

        def back(dy):
            xr, gr = x.reshape(-1, k), dy.reshape(-1, n)
            self.grads[name + "/kernel"] = self.product(xr.T, gr)
            self.grads[name + "/bias"] = self.sum_rows(dy)
            return [self.product(dy, w.T)]

        return self.record([x], y, back)

    def conv(self, x, name):  # "valid", stride 1, NCHW, kernel (o, c, kh, kw)
        w, b = self.p[name + "/kernel"], self.p[name + "/bias"]
        o, c, kh, kw = w.shape
        magnitude = F.conv2d(x.abs(), w.abs(), b.abs())
        y = self.rounded(F.conv2d(x, w, b), sum_scale(c * kh * kw + 1) * magnitude)

        def back(dy):
            rows = dy.shape[0] * dy.shape[2] * dy.shape[3]
            dw, dx = torch.nn.grad.conv2d_weight, torch.nn.grad.conv2d_input
            self.grads[name + "/kernel"] = self.rounded(dw(x, w.shape, dy),
                                                        sum_scale(rows) * dw(x.abs(), w.shape, dy.abs()))
            self.grads[name + "/bias"] = self.sum_rows(dy.permute(0, 2, 3, 1))
            return [self.rounded(dx(x.shape, w, dy), sum_scale(o * kh * kw) * dx(x.shape, w.abs(), dy.abs()))]

        return self.record([x], y, back)

    def relu(self, x):
        return self.record([x], x.clamp(min=0), lambda dy: [dy * (x > 0)])

    def max_pool(self, x):  # 2x2 windows, stride 2, remainder rows and columns dropped
        n, c, h, w = x.shape
        ho, wo = h // 2, w // 2
        windows = x[..., :2 * ho, :2 * wo].reshape(n, c, ho, 2, wo, 2).permute(0, 1, 2, 4, 3, 5).reshape(
            n, c, ho, wo, 4)
        first = windows.argmax(-1, keepdim=True)  # the first maximum, as both programs take it

        def back(dy):
            picked = torch.zeros_like(windows).scatter_(-1, first, dy.unsqueeze(-1))
            dx = torch.zeros_like(x)
            dx[..., :2 * ho, :2 * wo] = picked.reshape(n, c, ho, wo, 2, 2).permute(0, 1, 2, 4, 3, 5).reshape(
                n, c, 2 * ho, 2 * wo)
            return [dx]

        return self.record([x], windows.gather(-1, first).squeeze(-1), back)

    def reshape(self, x, shape):
        return self.record([x], x.reshape(shape), lambda dy: [dy.reshape(x.shape)])

    def add(self, a, b):  # a residual connection
        total = a + b
        return self.record([a, b], self.rounded(total, U * total.abs()), lambda dy: [dy, dy])

    def add_variable(self, x, name):  # x (batch, ...) + a variable of the example's shape
        total = x + self.p[name]

        def back(dy):
            self.grads[name] = self.rounded(dy.sum(0), sum_scale(dy.shape[0]) * dy.abs().sum(0))
            return [dy]

        return self.record([x], self.rounded(total, U * total.abs()), back)

    def mean_tokens(self, x):  # (batch, tokens, width) -> (batch, width)
        t = x.shape[1]
        m = x.mean(1)

        def back(dy):
            dx = (dy / t).unsqueeze(1).expand_as(x)
            return [self.rounded(dx, U * dx.abs())]

        return self.record([x], self.rounded(m, sum_scale(t) * x.abs().mean(1) + U * m.abs()), back)

    def layer_norm(self, x, name, eps=1e-6):
        """Rounding bounds in |x| + |mean| rather than |x - mean|, so that they hold for the centred form
        (mixprec) and the uncentred x·rstd - mean·rstd (PyTorch), and for any variance algorithm."""
        g, b = self.p[name + "/gamma"], self.p[name + "/beta"]
        d = x.shape[-1]

        def mean(t):
            return t.mean(-1, keepdim=True)

        mu = self.rounded(mean(x), sum_scale(d + 1) * mean(x.abs()))
        var = mean((x - mu) ** 2)
        var = self.rounded(var, sum_scale(2 * d + 2) * mean(x * x) + 2 * mu.abs() * sum_scale(d + 1) * mean(x.abs()))
        r = (var + eps).rsqrt()
        r = self.rounded(r, 3 * U * r)
        wide = r * (x.abs() + mu.abs())
        xh = self.rounded((x - mu) * r, 2 * U * wide)
        y = self.rounded(g * xh + b, 2 * U * ((g * xh).abs() + b.abs()))

        def back(dy):
            xb = self.rounded(xh, 2 * U * wide)  # x̂ again: PyTorch recomputes it
            self.grads[name + "/beta"] = self.sum_rows(dy)
            self.grads[name + "/gamma"] = self.sum_rows(dy * xb)
            gd = self.rounded(g * dy, U * (g * dy).abs())
            a = self.rounded(mean(gd), sum_scale(d + 1) * mean(gd.abs()))
            c = self.rounded(mean(gd * xb), sum_scale(d + 2) * mean(gd.abs() * wide))
            dx = r * (gd - a - xb * c)
            return [self.rounded(dx, 4 * U * r * (gd.abs() + a.abs() + wide * c.abs()))]

        return self.record([x], y, back)

    def gelu(self, x):  # the tanh form: ½x(1 + tanh(K(x + C x³)))
        def inner():  # recomputed in the backward pass by both programs
            z = self.rounded(GELU_K * (x + GELU_C * x ** 3), 5 * U * GELU_K * (x.abs() + GELU_C * x.abs() ** 3))
            t = torch.tanh(z)
            return self.rounded(t, 3 * U * t.abs())

        t = inner()
        y = self.rounded(0.5 * x * (1 + t), 1.5 * U * x.abs() * (1 + t.abs()))

        def back(dy):
            t = inner()
            slope = GELU_K * (1 + 3 * GELU_C * x * x)
            left, right = 0.5 * (1 + t), 0.5 * x * (1 - t * t) * slope
            derivative = self.rounded(left + right, 8 * U * (left.abs() + right.abs()))
            return [self.rounded(dy * derivative, U * (dy * derivative).abs())]

        return self.record([x], y, back)

    def softmax(self, s):
        """On the last axis. The bound on p covers exp(s - max)/Σ, exp(log_softmax) and online softmax."""
        shifted = s - s.max(-1, keepdim=True).values
        shifted = self.rounded(shifted, U * shifted.abs())
        e = shifted.exp()
        e = self.rounded(e, 2 * U * e)  # exp within 2 ulp
        total = e.sum(-1, keepdim=True)
        total = self.rounded(total, sum_scale(s.shape[-1]) * total)
        p = e / total
        return self.rounded(p, U * p * (1 + total.log())), total

    def attention(self, x, name, heads=4):
        return self.dense(self.heads(self.dense(x, name + "/qkv"), heads), name + "/output")

    def heads(self, qkv, heads):
        """softmax(q kᵀ / √K) v per head, from the fused (B, T, 3HK) projection; back to (B, T, HK)."""
        n, t, width3 = qkv.shape
        d = width3 // 3
        k = d // heads
        scale = k ** -0.5
        assert math.log2(scale) == round(math.log2(scale)), "1/√K must be a power of two (exact)"
        q, kk, v = qkv.reshape(n, t, 3, heads, k).permute(2, 0, 3, 1, 4)
        q = q * scale
        s = self.product(q, kk.mT)
        p = self.softmax(s)[0]
        o = self.product(p, v)

        def back(dy):
            go = dy.reshape(n, t, heads, k).permute(0, 2, 1, 3)
            pb = self.softmax(s)[0]  # both programs recompute P
            dp = self.product(go, v.mT)
            dv = self.product(pb.mT, go)
            # Σ_j P dP, or rowsum(dO ∘ O) as fused kernels compute it: the same terms, within these bounds.
            row = (pb * dp).sum(-1, keepdim=True)
            row = self.rounded(row, sum_scale(t + k) * (pb * (go.abs() @ v.abs().mT)).sum(-1, keepdim=True))
            ds = self.rounded(pb * (dp - row), 2 * U * pb * (dp.abs() + row.abs()))
            dq = self.product(ds, kk) * scale
            dk = self.product(ds.mT, q)
            return [torch.stack([dq, dk, dv]).permute(1, 3, 0, 2, 4).reshape(n, t, width3)]

        return self.record([qkv], o.permute(0, 2, 1, 3).reshape(n, t, d), back)

    def cross_entropy(self, z, labels):
        """Mean cross-entropy of the logits z (B, C) and its gradient (softmax - onehot)/B."""
        n, c = z.shape
        onehot = F.one_hot(labels, c).to(z.dtype)
        p, total = self.softmax(z)
        log_total = total.log()
        log_total = self.rounded(log_total, 2 * U * log_total.abs())
        picked = ((z - z.max(1, keepdim=True).values) * onehot).sum(1, keepdim=True)
        rows = self.rounded(log_total - picked, U * (log_total.abs() + 2 * picked.abs()))
        loss = self.rounded(rows.mean(), sum_scale(n + 1) * rows.abs().mean())
        dz = (p - onehot) / n
        return loss, self.rounded(dz, 2 * U * dz.abs())


def analyse_mlp(a, x):
    h = a.relu(a.dense(x.flatten(1), "dense"))
    return a.dense(a.relu(a.dense(h, "dense_1")), "dense_2")


def analyse_cnn(a, x):
    h = a.max_pool(a.relu(a.conv(x, "conv2d")))
    h = a.max_pool(a.relu(a.conv(h, "conv2d_1")))
    h = a.relu(a.dense(a.reshape(h, (x.shape[0], -1)), "dense"))
    return a.dense(h, "dense_1")


def analyse_vit(a, x):
    h = a.add_variable(a.dense(patches(x), "dense"), "position_embedding/embeddings")
    for block in ("transformer_block", "transformer_block_1"):
        y = a.add(h, a.attention(a.layer_norm(h, block + "/norm1"), block + "/attention"))
        mlp = a.dense(a.gelu(a.dense(a.layer_norm(y, block + "/norm2"), block + "/mlp1")), block + "/mlp2")
        h = a.add(y, mlp)
    return a.dense(a.mean_tokens(a.layer_norm(h, "layer_normalization")), "dense_1")


ANALYSES = {"mlp": analyse_mlp, "cnn": analyse_cnn, "vit": analyse_vit}


def float64_step(model, params, x, labels, generator=None):
    """Loss and gradients in float64, every rounding perturbed when a generator is given."""
    a = Analysis(params, generator)
    logits = ANALYSES[model](a, x)
    loss, dz = a.cross_entropy(logits, labels)
    a.backward(logits, dz)
    return loss, a.grads


def exact_and_sigma(model, weights, names, x, labels, probes):
    """The exact (float64) loss and gradients, and the standard deviation σ of each under the probes."""
    params = {name: weights[name].double() for name in names}
    x = x.double()
    loss, grads = float64_step(model, params, x, labels)
    generator = torch.Generator().manual_seed(12345)
    loss_sq, grads_sq = 0.0, {name: torch.zeros_like(g) for name, g in grads.items()}
    for _ in range(probes):
        probe_loss, probe_grads = float64_step(model, params, x, labels, generator)
        loss_sq += (probe_loss - loss).item() ** 2
        for name in grads:
            grads_sq[name] += (probe_grads[name] - grads[name]) ** 2
    sigma = {name: (s / probes).sqrt() for name, s in grads_sq.items()}
    return loss.item(), grads, math.sqrt(loss_sq / probes), sigma


# ---- which ops ran in which dtype ----------------------------------------------------------------------


class DtypeLog(TorchDispatchMode):
    """Records the floating dtypes of each aten op's results (views and copies left out)."""

    IGNORED = {"view", "_unsafe_view", "reshape", "t", "transpose", "permute", "expand", "unsqueeze", "squeeze",
               "select", "slice", "clone", "detach", "ones_like", "zeros_like", "alias", "unbind", "split"}

    def __init__(self):
        super().__init__()
        self.ops = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        name = func.overloadpacket.__name__
        if name not in self.IGNORED:
            dtypes = {str(t.dtype).replace("torch.", "") for t in pytree.tree_leaves(out)
                      if isinstance(t, torch.Tensor) and t.is_floating_point()}
            if name == "_to_copy":
                name = "_to_copy(%s)" % "->".join(sorted(dtypes))
            self.ops.setdefault(name, set()).update(dtypes)
        return out

    def summary(self):
        by_dtype = {}
        for op, dtypes in sorted(self.ops.items()):
            by_dtype.setdefault("/".join(sorted(dtypes)) or "-", []).append(op)
        return "; ".join("%s: %s" % (d, ", ".join(ops)) for d, ops in sorted(by_dtype.items()))


def autocast_ops(net, x, labels):
    forward, backward = DtypeLog(), DtypeLog()
    net.zero_grad()
    with forward, torch.autocast("cpu", dtype=torch.float16):
        loss = F.cross_entropy(net(x), labels)
    with backward:
        loss.backward()
    return forward.summary(), backward.summary()


# ---- comparison ---------------------------------------------------------------------------------------


def worst_ratio(difference, bound):
    """max difference / bound over the elements (0 where equal, inf where the bound is 0 and they differ)."""
    ratio = torch.where(difference == 0, torch.zeros_like(difference), difference / bound)
    return ratio.max().item()


def relative(a, b):
    """max |a - b| / max |b|: the difference relative to the gradient's scale."""
    scale = b.abs().max().item()
    difference = (a - b).abs().max().item()
    return difference / scale if scale > 0 else (0.0 if difference == 0 else math.inf)


def run_program(build, model, precision, seed, batch, work):
    path = os.path.join(work, "%s-%s.safetensors" % (model, precision))
    command = [build, "--model", model, "--precision", precision, "--seed", str(seed), "--batch", str(batch),
               "--out", path]
    try:
        result = subprocess.run(command, capture_output=True, text=True)
    except OSError as error:
        print("gradient_oracle: cannot run %s: %s (build the target conformance_gradients and pass its path "
              "with --build)" % (build, error.strerror), file=sys.stderr)
        sys.exit(2)
    if result.returncode != 0:
        print("gradient_oracle: %s failed (%d):\n%s%s"
              % (" ".join(command), result.returncode, result.stdout, result.stderr), file=sys.stderr)
        sys.exit(2)
    return load_file(path)


def compare_float32(model, content, names, x, labels, probes):
    net = torch_model(model, content, names)
    torch_loss, theirs = torch_step(net, names, x, labels, autocast=False)
    exact_loss, exact, loss_sigma, sigma = exact_and_sigma(model, content, names, x, labels, probes)
    ours_loss = content["__loss__"].item()
    loss_ratio = worst_ratio(torch.tensor(abs(ours_loss - torch_loss)), torch.tensor(2 * LAMBDA * loss_sigma))
    print("\n%s float32: loss mixprec %.9g, torch %.9g, float64 %.9g (sigma %.2g), |diff|/bound %.3g"
          % (model, ours_loss, torch_loss, exact_loss, loss_sigma, loss_ratio))
    print("  %-44s %10s %10s %10s %10s %10s" % ("variable", "max|diff|", "rel diff", "diff/bound",
                                                "mixprec/σ", "torch/σ"))
    worst, worst_rel, failed = loss_ratio, 0.0, loss_ratio > 1
    for name in names:
        ours = content["grad/" + name].double()
        ratio = worst_ratio((ours - theirs[name]).abs(), 2 * LAMBDA * sigma[name])
        ours_sigmas = worst_ratio((ours - exact[name]).abs(), sigma[name])
        torch_sigmas = worst_ratio((theirs[name] - exact[name]).abs(), sigma[name])
        rel = relative(ours, theirs[name])
        bad = ratio > 1 or max(ours_sigmas, torch_sigmas) > LAMBDA
        print("  %-44s %10.3g %10.3g %10.3g %10.3g %10.3g%s"
              % (name, (ours - theirs[name]).abs().max().item(), rel, ratio, ours_sigmas, torch_sigmas,
                 "  EXCEEDS" if bad else ""))
        worst, worst_rel, failed = max(worst, ratio), max(worst_rel, rel), failed or bad
    return [model, "float32", "%.7f / %.7f" % (ours_loss, torch_loss), "%.2e" % worst_rel, "%.3g" % worst,
            "FAIL" if failed else "pass"], failed


def compare_mixed(model, content, names, x, labels):
    net = torch_model(model, content, names)
    torch_loss, theirs = torch_step(net, names, x, labels, autocast=True)
    params = {name: content[name].double() for name in names}
    exact_loss, exact = float64_step(model, params, x.double(), labels)
    ours_loss = content["__loss__"].item()
    print("\n%s mixed_float16 (report only): loss mixprec %.7g, torch autocast %.7g, exact %.7g"
          % (model, ours_loss, torch_loss, exact_loss.item()))
    print("  %-44s %12s %12s %12s %9s %9s" % ("variable", "rel mp/torch", "rel mp/exact", "rel torch/ex",
                                              "0s mp", "0s torch"))
    worst_rel = 0.0
    for name in names:
        ours = content["grad/" + name].double()
        nonzero = exact[name].abs() >= 2.0 ** -25  # rounds to a non-zero float16
        flushed = [((g == 0) & nonzero).sum().item() / max(nonzero.sum().item(), 1) for g in (ours, theirs[name])]
        rel = relative(ours, theirs[name])
        worst_rel = max(worst_rel, rel)
        columns = (name, rel, relative(ours, exact[name]), relative(theirs[name], exact[name]),
                   100 * flushed[0], 100 * flushed[1])
        print("  %-44s %12.3g %12.3g %12.3g %8.2f%% %8.2f%%" % columns)
    forward, backward = autocast_ops(net, x, labels)
    print("  autocast forward ops by result dtype: " + forward)
    print("  autocast backward ops by result dtype: " + backward)
    return [model, "mixed_float16", "%.7f / %.7f" % (ours_loss, torch_loss), "%.2e" % worst_rel, "n/a", "report"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build/tests/conformance/conformance_gradients",
                        help="the conformance_gradients program")
    parser.add_argument("--models", default="mlp,cnn,vit")
    parser.add_argument("--precisions", default="float32,mixed_float16")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--probes", type=int, default=16, help="perturbed float64 runs that estimate σ")
    parser.add_argument("--work", help="where the safetensors files go (default: a temporary directory)")
    args = parser.parse_args()

    table, failed = [], False
    with tempfile.TemporaryDirectory() as scratch:
        work = args.work or scratch
        os.makedirs(work, exist_ok=True)
        for model in args.models.split(","):
            for precision in args.precisions.split(","):
                content = run_program(args.build, model, precision, args.seed, args.batch, work)
                names = [n for n in content if not n.startswith(("grad/", "__"))]
                x, labels = content["__input__"], content["__labels__"].long()
                if precision == "float32":
                    row, bad = compare_float32(model, content, names, x, labels, args.probes)
                    failed = failed or bad
                else:
                    row = compare_mixed(model, content, names, x, labels)
                table.append(row)

    header = ["model", "precision", "loss (mixprec / torch)", "worst gradient relative difference",
              "worst diff/bound", "result"]
    print("\nPyTorch %s, seed %d, batch %d\n" % (torch.__version__, args.seed, args.batch))
    print("| " + " | ".join(header) + " |")
    print("|" + "|".join("---" for _ in header) + "|")
    for row in table:
        print("| " + " | ".join(row) + " |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
