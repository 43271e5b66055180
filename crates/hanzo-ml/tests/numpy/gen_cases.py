#!/usr/bin/env python3
"""NumPy reference cases for tests/numpy_conformance.rs.

Every expected value comes from NumPy (float64 math on the exact input values), never from
hanzo-ml. Usage: gen_cases.py [OUT.json]  (default: cases.json beside this script).
Each case: name, op, args, inputs [{dtype, shape, data, view}], expected {dtype, shape,
data}, atol, rtol. A view is applied to the input on both sides: {"transpose": [a, b]},
{"narrow": [dim, start, len]}, {"broadcast": shape} or {"permute": perm}.
"""
import json
import math
import os
import sys

import numpy as np

rng = np.random.default_rng(0)
CASES = []
TOL = {"f64": (1e-12, 1e-10), "f32": (1e-5, 1e-5), "f16": (2e-3, 2e-3), "bf16": (2e-2, 2e-2)}
NP = {"f32": np.float32, "f64": np.float64, "f16": np.float16, "u8": np.uint8, "u32": np.uint32, "i64": np.int64}


def bf16_round(a):
    """Round float32 values to the nearest bfloat16 (ties to even), kept as float32."""
    u = np.asarray(a, dtype=np.float32).view(np.uint32).astype(np.uint64)
    u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000
    return u.astype(np.uint32).view(np.float32)


def make(dtype, shape, lo=-2.0, hi=2.0):
    """Random data exactly representable in `dtype` (returned as float64 or int64)."""
    if dtype in ("u8", "u32", "i64"):
        lo_i = 0 if dtype != "i64" else int(lo * 10)
        return rng.integers(lo_i, int(hi * 10) + 1, size=shape).astype(np.int64)
    a = rng.uniform(lo, hi, size=shape)
    if dtype == "bf16":
        return bf16_round(a).astype(np.float64)
    return a.astype(NP[dtype]).astype(np.float64)


def apply_view(a, view):
    if view is None:
        return a
    (k, v), = view.items()
    if k == "transpose":
        return np.swapaxes(a, v[0], v[1])
    if k == "narrow":
        d, s, n = v
        return np.take(a, range(s, s + n), axis=d)
    if k == "broadcast":
        return np.broadcast_to(a, v)
    if k == "permute":
        return np.transpose(a, v)
    raise ValueError(k)


def enc(x):
    x = float(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    return x


def inp(dtype, shape, view=None, lo=-2.0, hi=2.0, data=None):
    base = make(dtype, shape, lo, hi) if data is None else np.asarray(data, dtype=np.float64).reshape(shape)
    spec = {"dtype": dtype, "shape": list(shape), "data": [enc(x) for x in base.ravel()]}
    if view is not None:
        spec["view"] = view
    return spec, apply_view(base, view)


def case(name, op, inputs, expected, out_dtype, args=None, tol=None):
    exp = np.asarray(expected, dtype=np.float64)
    atol, rtol = tol if tol is not None else TOL.get(out_dtype, (0.0, 0.0))
    CASES.append({
        "name": name, "op": op, "args": args or {},
        "inputs": [s for s, _ in inputs],
        "expected": {"dtype": out_dtype, "shape": list(exp.shape), "data": [enc(x) for x in exp.ravel()]},
        "atol": atol, "rtol": rtol,
    })


def erf(a):
    return np.vectorize(math.erf)(a)


def sigmoid(a):
    return 1 / (1 + np.exp(-a))


UNARY = {
    "neg": (lambda a: -a, None), "abs": (np.abs, None), "exp": (np.exp, None),
    "log": (np.log, (0.1, 3.0)), "sqrt": (np.sqrt, (0.0, 3.0)), "sqr": (np.square, None),
    "recip": (lambda a: 1 / a, (0.2, 3.0)), "relu": (lambda a: np.maximum(a, 0), None),
    "gelu": (lambda a: 0.5 * a * (1 + np.tanh(math.sqrt(2 / math.pi) * (a + 0.044715 * a ** 3))), None),
    "gelu_erf": (lambda a: 0.5 * a * (1 + erf(a / math.sqrt(2))), None),
    "silu": (lambda a: a * sigmoid(a), None), "tanh": (np.tanh, None), "sigmoid": (sigmoid, None),
    "sin": (np.sin, None), "cos": (np.cos, None), "floor": (np.floor, None), "ceil": (np.ceil, None),
    "round": (np.round, None), "sign": (np.sign, None),
}

for name, (f, rng_) in UNARY.items():
    lo, hi = rng_ or (-3.0, 3.0)
    for dt in ["f32", "f64", "f16", "bf16"]:
        i = inp(dt, (3, 5), lo=lo, hi=hi)
        tol = TOL[dt]
        if name in ("floor", "ceil", "round", "sign"):
            tol = (0.0, 0.0)
        case(f"{name}_{dt}", name, [i], f(i[1]), dt, tol=tol)
    i = inp("f32", (4, 6), view={"transpose": [0, 1]}, lo=lo, hi=hi)
    case(f"{name}_f32_transposed", name, [i], f(i[1]), "f32")

# Round halves to even, as NumPy does.
i = inp("f32", (6,), data=[0.5, 1.5, 2.5, -0.5, -1.5, 3.49])
case("round_half_even", "round", [i], np.round(i[1]), "f32", tol=(0, 0))
for dt in ["u8", "u32", "i64"]:
    i = inp(dt, (7,), lo=-1, hi=2)
    n = i[1].astype(NP[dt])  # integer results wrap in the dtype, as NumPy's do
    case(f"abs_{dt}", "abs", [i], np.abs(n), dt)
    case(f"sqr_{dt}", "sqr", [i], np.square(n), dt)
i = inp("f32", (3, 4))
case("affine", "affine", [i], i[1] * 1.5 - 0.25, "f32", {"mul": 1.5, "add": -0.25})
case("clamp", "clamp", [i], np.clip(i[1], -0.5, 0.7), "f32", {"min": -0.5, "max": 0.7})
i = inp("f64", (3, 4), lo=0.1, hi=2.0)
case("powf", "powf", [i], i[1] ** 2.5, "f64", {"e": 2.5})

BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
          "maximum": np.maximum, "minimum": np.minimum, "pow": np.power}
SHAPES = [((3, 4), (3, 4)), ((2, 3, 4), (4,)), ((3, 1), (1, 5)), ((2, 1, 4), (3, 1)), ((), (2, 3))]
for name, f in BINARY.items():
    for k, (sa, sb) in enumerate(SHAPES):
        lo = 0.2 if name in ("pow", "div") else -2.0
        a, b = inp("f32", sa, lo=lo), inp("f32", sb, lo=lo)
        case(f"{name}_bcast{k}", name, [a, b], f(a[1], b[1]), "f32")
    a = inp("f32", (4, 3), view={"transpose": [0, 1]}, lo=0.2)
    b = inp("f32", (3, 8), view={"narrow": [1, 2, 4]}, lo=0.2)
    case(f"{name}_strided", name, [a, b], f(a[1], b[1]), "f32")
    for dt in ["f64", "f16", "bf16"]:
        a, b = inp(dt, (2, 3), lo=0.2), inp(dt, (3,), lo=0.2)
        case(f"{name}_{dt}", name, [a, b], f(a[1], b[1]), dt)

# NumPy type promotion.
PROMO = [("u8", "f32", "f32"), ("f16", "f32", "f32"), ("bf16", "f16", "f32"), ("u32", "f32", "f64"),
         ("i64", "f32", "f64"), ("u8", "f16", "f16"), ("u8", "u32", "u32"), ("u32", "i64", "i64")]
for da, db, dout in PROMO:
    a, b = inp(da, (2, 3), lo=0, hi=2), inp(db, (2, 3), lo=0, hi=2)
    case(f"promote_add_{da}_{db}", "add", [a, b], a[1] + b[1], dout)
for dt in ["u8", "u32", "i64"]:
    a, b = inp(dt, (3, 4), lo=0, hi=5), inp(dt, (4,), lo=0, hi=5)
    na, nb = a[1].astype(NP[dt]), b[1].astype(NP[dt])
    case(f"int_add_{dt}", "add", [a, b], na + nb, dt)
    case(f"int_mul_{dt}", "mul", [a, b], na * nb, dt)
    case(f"int_maximum_{dt}", "maximum", [a, b], np.maximum(na, nb), dt)
    case(f"int_sum_{dt}", "sum", [a], na.sum(axis=1, dtype=NP[dt]), dt, {"dims": [1], "keepdim": False})

CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}
for name, f in CMP.items():
    a = inp("f32", (3, 4), data=rng.integers(-2, 3, 12))
    b = inp("f32", (4,), data=rng.integers(-2, 3, 4))
    case(f"{name}_bcast", name, [a, b], f(a[1], b[1]).astype(np.uint8), "u8")
c = inp("u8", (3, 1), data=[1, 0, 1])
a, b = inp("f32", (3, 4)), inp("f32", (4,))
case("where_cond", "where_cond", [c, a, b], np.where(c[1] != 0, a[1], b[1]), "f32")

x = inp("f32", (3, 4, 5))
for dims in ([0], [1], [2], [0, 2], [0, 1, 2]):
    for keep in (False, True):
        ax = tuple(dims)
        args = {"dims": dims, "keepdim": keep}
        tag = "_".join(map(str, dims)) + ("_keep" if keep else "")
        case(f"sum_{tag}", "sum", [x], x[1].sum(axis=ax, keepdims=keep), "f32", args)
        case(f"mean_{tag}", "mean", [x], x[1].mean(axis=ax, keepdims=keep), "f32", args)
        case(f"max_{tag}", "max", [x], x[1].max(axis=ax, keepdims=keep), "f32", args)
        case(f"min_{tag}", "min", [x], x[1].min(axis=ax, keepdims=keep), "f32", args)
    case(f"var_{'_'.join(map(str, dims))}", "var", [x], x[1].var(axis=tuple(dims), ddof=1), "f32", {"dims": dims})
for d in range(3):
    case(f"argmax_{d}", "argmax", [x], x[1].argmax(axis=d), "u32", {"dim": d})
    case(f"argmin_{d}", "argmin", [x], x[1].argmin(axis=d), "u32", {"dim": d})
    case(f"cumsum_{d}", "cumsum", [x], x[1].cumsum(axis=d), "f32", {"dim": d})
xt = inp("f32", (5, 4), view={"transpose": [0, 1]})
case("sum_transposed", "sum", [xt], xt[1].sum(axis=1), "f32", {"dims": [1], "keepdim": False})
case("sum_all", "sum_all", [x], x[1].sum(), "f32")
for dt in ["f64", "f16", "bf16"]:
    y = inp(dt, (4, 33))
    case(f"sum_{dt}", "sum", [y], y[1].sum(axis=1), dt, {"dims": [1], "keepdim": False},
         tol=(TOL[dt][0] * 10, TOL[dt][1]))
    case(f"max_{dt}", "max", [y], y[1].max(axis=1), dt, {"dims": [1], "keepdim": False})
e = inp("f32", (0, 3))
case("sum_empty", "sum", [e], e[1].sum(axis=0), "f32", {"dims": [0], "keepdim": False})
s = inp("f32", ())
case("scalar_exp", "exp", [s], np.exp(s[1]), "f32")
one = inp("f32", (1, 4, 1))
case("sum_size1_dims", "sum", [one], one[1].sum(axis=(0, 2)), "f32", {"dims": [0, 2], "keepdim": False})

dup = inp("f32", (2, 6), data=[3, 1, 2, 1, 3, 0, 5, 5, 4, 5, 4, 4])
case("argsort_asc_stable", "argsort", [dup], np.argsort(dup[1], axis=1, kind="stable"), "u32", {"dim": 1, "asc": True})
case("argsort_dim0", "argsort", [x], np.argsort(x[1], axis=0, kind="stable"), "u32", {"dim": 0, "asc": True})
tk = inp("f32", (3, 7))
idx = np.argsort(-tk[1], axis=1, kind="stable")[:, :3]
case("topk_values", "topk_values", [tk], np.take_along_axis(tk[1], idx, 1), "f32", {"k": 3, "dim": 1})
case("topk_indices", "topk_indices", [tk], idx, "u32", {"k": 3, "dim": 1})

for dt in ["f32", "f64", "f16", "bf16"]:
    a, b = inp(dt, (5, 7)), inp(dt, (7, 3))
    t = TOL[dt]
    case(f"matmul_{dt}", "matmul", [a, b], a[1] @ b[1], dt, tol=(t[0] * 20, t[1] * 5))
a, b = inp("f32", (2, 3, 4, 5)), inp("f32", (3, 5, 6))
case("matmul_broadcast_batch", "matmul", [a, b], a[1] @ b[1], "f32")
a, b = inp("f32", (6, 4), view={"transpose": [0, 1]}), inp("f32", (3, 6), view={"transpose": [0, 1]})
case("matmul_transposed_views", "matmul", [a, b], a[1] @ b[1], "f32")
a, b = inp("f32", (40, 64)), inp("f32", (64, 1))
case("matvec", "matmul", [a, b], a[1] @ b[1], "f32", tol=(1e-4, 1e-5))
a, b = inp("f32", (1, 64)), inp("f32", (33, 64), view={"transpose": [0, 1]})
case("vecmat_transposed", "matmul", [a, b], a[1] @ b[1], "f32", tol=(1e-4, 1e-5))
a, b = inp("f32", (2, 0)), inp("f32", (0, 3))
case("matmul_empty_k", "matmul", [a, b], a[1] @ b[1], "f32")

x = inp("f32", (2, 3, 4))
case("reshape", "reshape", [x], x[1].reshape(4, 6), "f32", {"shape": [4, 6]})
xt = inp("f32", (3, 4), view={"transpose": [0, 1]})
case("reshape_of_transpose", "reshape", [xt], xt[1].reshape(12), "f32", {"shape": [12]})
v = inp("f32", (2, 3, 4), view={"transpose": [0, 2]})
case("transpose_contiguous", "contiguous", [v], v[1], "f32")
v = inp("f32", (2, 3, 4), view={"permute": [2, 0, 1]})
case("permute", "contiguous", [v], v[1], "f32")
v = inp("f32", (4, 6), view={"narrow": [1, 2, 3]})
case("narrow", "contiguous", [v], v[1], "f32")
v = inp("f32", (3, 1), view={"broadcast": [2, 3, 4]})
case("broadcast", "contiguous", [v], v[1], "f32")
a, b = inp("f32", (2, 3)), inp("f32", (2, 5))
case("cat_dim1", "cat", [a, b], np.concatenate([a[1], b[1]], 1), "f32", {"dim": 1})
a, b = inp("f32", (2, 3)), inp("f32", (4, 3))
case("cat_dim0", "cat", [a, b], np.concatenate([a[1], b[1]], 0), "f32", {"dim": 0})
a, b = inp("f32", (2, 3)), inp("f32", (2, 3))
case("stack_dim1", "stack", [a, b], np.stack([a[1], b[1]], 1), "f32", {"dim": 1})
case("pad", "pad", [x], np.pad(x[1], [(0, 0), (1, 2), (2, 0)], constant_values=0.5), "f32",
     {"pads": [[0, 0], [1, 2], [2, 0]], "value": 0.5})
case("unsqueeze_squeeze", "unsqueeze", [x], np.expand_dims(x[1], 1), "f32", {"dim": 1})
case("flatten", "flatten", [x], x[1].reshape(2, 12), "f32", {"start": 1, "end": 2})
case("chunk_1", "chunk", [x], np.array_split(x[1], 3, axis=2)[1], "f32", {"n": 3, "dim": 2, "i": 1})

t = inp("f32", (5, 3))
ids = inp("u32", (4,), data=[4, 0, 2, 4])
case("index_select", "index_select", [t, ids], t[1][[4, 0, 2, 4]], "f32", {"dim": 0})
ids1 = inp("i64", (2,), data=[2, 0])
case("index_select_dim1_i64", "index_select", [t, ids1], t[1][:, [2, 0]], "f32", {"dim": 1})
g = inp("u32", (5, 2), data=rng.integers(0, 3, 10))
case("gather", "gather", [t, g], np.take_along_axis(t[1], g[1].astype(np.int64), 1), "f32", {"dim": 1})
src = inp("f32", (5, 2))
out = t[1].copy()
gi = g[1].astype(np.int64)
for r in range(5):
    for c_ in range(2):
        out[r, gi[r, c_]] += src[1][r, c_]
case("scatter_add", "scatter_add", [t, g, src], out, "f32", {"dim": 1})
ia = inp("u32", (3,), data=[1, 1, 4])
srca = inp("f32", (3, 3))
out = t[1].copy()
np.add.at(out, [1, 1, 4], srca[1])
case("index_add", "index_add", [t, ia, srca], out, "f32", {"dim": 0})
tab = inp("f32", (6, 4))
eids = inp("u32", (2, 3), data=[5, 0, 1, 1, 3, 5])
case("embedding", "embedding", [tab, eids], tab[1][eids[1].astype(np.int64)], "f32")


def softmax(a, axis):
    m = a.max(axis=axis, keepdims=True)
    e = np.exp(a - m)
    return e / e.sum(axis=axis, keepdims=True)


for dt in ["f32", "f64", "f16", "bf16"]:
    x = inp(dt, (3, 4, 9), lo=-4, hi=4)
    for d in (2, 1):
        case(f"softmax_{dt}_d{d}", "softmax", [x], softmax(x[1], d), dt, {"dim": d})
        case(f"log_softmax_{dt}_d{d}", "log_softmax", [x], np.log(softmax(x[1], d)), dt, {"dim": d},
             tol=(TOL[dt][0] * 4, TOL[dt][1]))
    w, b = inp(dt, (9,)), inp(dt, (9,))
    xx = x[1]
    mu = xx.mean(-1, keepdims=True)
    ln = (xx - mu) / np.sqrt(xx.var(-1, keepdims=True) + 1e-5) * w[1] + b[1]
    case(f"layer_norm_{dt}", "layer_norm", [x, w, b], ln, dt, {"eps": 1e-5}, tol=(TOL[dt][0] * 4, TOL[dt][1] * 2))
    rms = xx / np.sqrt((xx ** 2).mean(-1, keepdims=True) + 1e-6) * w[1]
    case(f"rms_norm_{dt}", "rms_norm", [x, w], rms, dt, {"eps": 1e-6}, tol=(TOL[dt][0] * 4, TOL[dt][1] * 2))
big = inp("f32", (2, 3), data=[1000, 1001, 1002, -1000, -1001, -1002])
case("softmax_large_values", "softmax", [big], softmax(big[1], 1), "f32", {"dim": 1})


def rope_ref(x, cos, sin, interleaved):
    d = x.shape[-1]
    if interleaved:
        a, b = x[..., 0::2], x[..., 1::2]
    else:
        a, b = x[..., : d // 2], x[..., d // 2:]
    ra, rb = a * cos - b * sin, a * sin + b * cos
    out = np.empty_like(x)
    if interleaved:
        out[..., 0::2], out[..., 1::2] = ra, rb
    else:
        out[..., : d // 2], out[..., d // 2:] = ra, rb
    return out


for dt in ["f32", "f16"]:
    q = inp(dt, (2, 3, 5, 8))
    ang = rng.uniform(-3, 3, (5, 4))
    cs, sn = inp(dt, (5, 4), data=np.cos(ang)), inp(dt, (5, 4), data=np.sin(ang))
    # Values must be exact in the dtype: re-read them rounded.
    cs = inp(dt, (5, 4), data=cs[1].astype(NP[dt]).astype(np.float64))
    sn = inp(dt, (5, 4), data=sn[1].astype(NP[dt]).astype(np.float64))
    for kind in ("interleaved", "half"):
        case(f"rope_{kind}_{dt}", "rope", [q, cs, sn], rope_ref(q[1], cs[1], sn[1], kind == "interleaved"), dt,
             {"interleaved": kind == "interleaved"})


def sdpa(q, k, v, mask=None, scale=None, causal=False):
    hq, hk = q.shape[1], k.shape[1]
    k, v = np.repeat(k, hq // hk, axis=1), np.repeat(v, hq // hk, axis=1)
    s = (q @ np.swapaxes(k, -1, -2)) * (scale if scale is not None else 1 / math.sqrt(q.shape[-1]))
    if causal:
        tq, tk = s.shape[-2], s.shape[-1]
        keep = np.arange(tk)[None, :] <= np.arange(tq)[:, None] + (tk - tq)
        s = np.where(keep, s, -np.inf)
    if mask is not None:
        s = s + mask
    return softmax(s, -1) @ v


q, k, v = inp("f32", (2, 4, 3, 8)), inp("f32", (2, 2, 5, 8)), inp("f32", (2, 2, 5, 6))
case("sdpa_gqa_causal", "sdpa", [q, k, v], sdpa(q[1], k[1], v[1], causal=True), "f32", {"mask": "causal"})
case("sdpa_none_scale", "sdpa", [q, k, v], sdpa(q[1], k[1], v[1], scale=0.2), "f32", {"mask": "none", "scale": 0.2})
m = inp("f32", (3, 5))
case("sdpa_additive", "sdpa", [q, k, v, m], sdpa(q[1], k[1], v[1], mask=m[1]), "f32", {"mask": "additive"})

def conv2d_ref(x, k, pad, stride, dil, groups):
    """Direct definition: every output channel sums kernel taps over its group's inputs."""
    b, cin, h, w = x.shape
    cout, cpg, kh, kw = k.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    oh = (h + 2 * pad[0] - dil[0] * (kh - 1) - 1) // stride[0] + 1
    ow = (w + 2 * pad[1] - dil[1] * (kw - 1) - 1) // stride[1] + 1
    out = np.zeros((b, cout, oh, ow))
    opg = cout // groups
    for o in range(cout):
        for ci in range(cpg):
            c = (o // opg) * cpg + ci
            for i in range(kh):
                for j in range(kw):
                    y0, x0 = i * dil[0], j * dil[1]
                    out[:, o] += k[o, ci, i, j] * xp[:, c, y0:y0 + stride[0] * (oh - 1) + 1:stride[0],
                                                     x0:x0 + stride[1] * (ow - 1) + 1:stride[1]]
    return out


def conv_transpose2d_ref(x, k, pad, opad, stride, dil, groups):
    """Direct definition: each input element scatters kernel-weighted copies into the output."""
    b, cin, h, w = x.shape
    _, copg, kh, kw = k.shape
    H = (h - 1) * stride[0] - 2 * pad[0] + dil[0] * (kh - 1) + opad[0] + 1
    W = (w - 1) * stride[1] - 2 * pad[1] + dil[1] * (kw - 1) + opad[1] + 1
    full = np.zeros((b, copg * groups, (h - 1) * stride[0] + dil[0] * (kh - 1) + 1 + opad[0],
                     (w - 1) * stride[1] + dil[1] * (kw - 1) + 1 + opad[1]))
    cipg = cin // groups
    for c in range(cin):
        for oc in range(copg):
            o = (c // cipg) * copg + oc
            for i in range(kh):
                for j in range(kw):
                    y0, x0 = i * dil[0], j * dil[1]
                    full[:, o, y0:y0 + stride[0] * (h - 1) + 1:stride[0], x0:x0 + stride[1] * (w - 1) + 1:stride[1]] += \
                        x[:, c] * k[c, oc, i, j]
    return full[:, :, pad[0]:pad[0] + H, pad[1]:pad[1] + W]


def pool_ref(x, k, stride, f):
    b, c, h, w = x.shape
    oh, ow = (h - k[0]) // stride[0] + 1, (w - k[1]) // stride[1] + 1
    out = np.zeros((b, c, oh, ow))
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = f(x[:, :, i * stride[0]:i * stride[0] + k[0], j * stride[1]:j * stride[1] + k[1]], axis=(2, 3))
    return out


CONV2D = [  # (x shape, kernel shape, padding, stride, dilation, groups)
    ((1, 1, 3, 3), (1, 1, 2, 2), (0, 0), (1, 1), (1, 1), 1),
    ((2, 3, 7, 6), (4, 3, 3, 3), (1, 1), (1, 1), (1, 1), 1),
    ((1, 2, 9, 8), (3, 2, 3, 2), (1, 0), (2, 3), (1, 1), 1),
    ((1, 2, 9, 9), (2, 2, 3, 3), (2, 2), (1, 1), (2, 2), 1),
    ((2, 4, 6, 5), (6, 2, 3, 3), (1, 1), (1, 1), (1, 1), 2),
    ((1, 4, 8, 8), (4, 1, 3, 3), (1, 1), (2, 2), (1, 1), 4),
]
for n, (xs, ks, pad, st, dl, g) in enumerate(CONV2D):
    for dt in (["f32", "f64"] if n != 1 else ["f32", "f64", "f16", "bf16"]):
        x, k = inp(dt, xs), inp(dt, ks)
        t = TOL[dt]
        case(f"conv2d_{n}_{dt}", "conv2d", [x, k], conv2d_ref(x[1], k[1], pad, st, dl, g), dt,
             {"padding": list(pad), "stride": list(st), "dilation": list(dl), "groups": g}, tol=(t[0] * 20, t[1] * 5))
for n, (xs, ks, pad, st, dl, g) in enumerate([((2, 3, 10), (4, 3, 3), 1, 1, 1, 1), ((1, 4, 11), (2, 2, 2), 0, 3, 2, 2)]):
    x, k = inp("f32", xs), inp("f32", ks)
    ref = conv2d_ref(x[1][:, :, None, :], k[1][:, :, None, :], (0, pad), (1, st), (1, dl), g)[:, :, 0, :]
    case(f"conv1d_{n}", "conv1d", [x, k], ref, "f32", {"padding": pad, "stride": st, "dilation": dl, "groups": g})

CONVT2D = [  # (x shape, kernel shape [c_in, c_out/g, kh, kw], padding, output_padding, stride, dilation, groups)
    ((1, 1, 2, 2), (1, 1, 2, 2), (0, 0), (0, 0), (1, 1), (1, 1), 1),
    ((2, 3, 4, 5), (3, 2, 3, 3), (1, 1), (1, 1), (2, 2), (1, 1), 1),
    ((1, 2, 5, 4), (2, 3, 3, 2), (0, 1), (0, 0), (3, 1), (1, 2), 1),
    ((1, 4, 3, 3), (4, 1, 3, 3), (2, 2), (0, 0), (1, 1), (1, 1), 2),
    ((1, 2, 4, 4), (2, 2, 2, 2), (0, 0), (1, 0), (2, 2), (2, 1), 1),
]
for n, (xs, ks, pad, opad, st, dl, g) in enumerate(CONVT2D):
    x, k = inp("f32", xs), inp("f32", ks)
    case(f"conv_transpose2d_{n}", "conv_transpose2d", [x, k], conv_transpose2d_ref(x[1], k[1], pad, opad, st, dl, g), "f32",
         {"padding": list(pad), "output_padding": list(opad), "stride": list(st), "dilation": list(dl), "groups": g},
         tol=(1e-4, 1e-5))
x, k = inp("f32", (2, 2, 6)), inp("f32", (2, 3, 3))
ref = conv_transpose2d_ref(x[1][:, :, None, :], k[1][:, :, None, :], (0, 1), (0, 1), (1, 2), (1, 1), 1)[:, :, 0, :]
case("conv_transpose1d", "conv_transpose1d", [x, k], ref, "f32",
     {"padding": 1, "output_padding": 1, "stride": 2, "dilation": 1, "groups": 1})

x = inp("f32", (2, 3, 7, 8))
for kk, st in [((2, 2), (2, 2)), ((3, 2), (2, 3)), ((3, 3), (1, 1))]:
    case(f"avg_pool2d_{kk}_{st}", "avg_pool2d", [x], pool_ref(x[1], kk, st, np.mean), "f32", {"k": list(kk), "stride": list(st)})
    case(f"max_pool2d_{kk}_{st}", "max_pool2d", [x], pool_ref(x[1], kk, st, np.max), "f32", {"k": list(kk), "stride": list(st)})
x = inp("f32", (1, 2, 3, 4))
for oh, ow in [(6, 8), (5, 7), (2, 3)]:
    hi = (np.arange(oh) * 3) // oh
    wi = (np.arange(ow) * 4) // ow
    case(f"upsample_nearest2d_{oh}x{ow}", "upsample_nearest2d", [x], x[1][:, :, hi][:, :, :, wi], "f32", {"h": oh, "w": ow})


out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "cases.json")
with open(out, "w") as fh:
    json.dump(CASES, fh, separators=(",", ":"))
print(f"wrote {len(CASES)} cases to {out}", file=sys.stderr)
