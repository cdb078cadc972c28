"""Reference bin rules (pure numpy) for the calibsql strategies; verified against the tools in verify_rules.py."""
import math
from fractions import Fraction
import numpy as np

EPS = float(np.finfo(np.float64).eps)


def fma(a, b, c):
    """a*b + c rounded once (Python 3.11 has no math.fma)."""
    return float(Fraction(a) * Fraction(b) + Fraction(c))


def np_linspace_edges(M):
    s = 1.0 / M
    e = [k * s for k in range(M + 1)]
    e[M] = 1.0
    return np.array(e)


def torch_linspace_edges(M, use_fma=True):
    s = 1.0 / M
    steps = M + 1
    half = steps // 2
    out = []
    for k in range(steps):
        if k < half:
            out.append(s * k)
        else:
            n = steps - k - 1
            out.append(fma(-s, n, 1.0) if use_fma else 1.0 - s * n)
    return np.array(out)


def kumar_edges(M):
    return np.array([i / M for i in range(1, M + 1)])


def pct_qs(M):
    """the q actually used by np.percentile(p, np.linspace(0, 1, M+1) * 100): ((k*(1/M))*100)/100"""
    return np_linspace_edges(M) * 100 / 100


def pct_edges(p, M):
    """numpy.percentile(p, linspace(0,1,M+1)*100), method='linear', re-derived."""
    a = np.sort(p)
    n = len(a)
    out = []
    for q in pct_qs(M):
        vi = (n - 1) * q
        if vi >= n - 1:
            out.append(a[n - 1])
            continue
        j = math.floor(vi)
        g = vi - j
        lo, hi = a[j], a[j + 1]
        d = hi - lo
        out.append(hi - d * (1 - g) if g >= 0.5 else lo + d * g)
    return np.array(out)


def wpct_edges(p, w, M):
    """numpy.percentile(p, linspace(0,1,M+1)*100, weights=w, method='inverted_cdf'), re-derived."""
    o = np.argsort(p)  # numpy uses np.argsort (quicksort): tie order is unspecified
    a, ws = p[o], w[o]
    cdf = np.cumsum(ws, dtype=np.float64)
    cdf = cdf / cdf[-1]
    if cdf[0] == 0:
        cdf[cdf == 0] = -1
    idx = np.minimum(np.searchsorted(cdf, pct_qs(M), side="left"), len(a) - 1)
    return a[idx]


def assign(p, M, strategy, w=None):
    """(bin index per row, number of bins, lower edges, upper edges, p as used for mean_p)"""
    p = np.asarray(p, dtype=np.float64)
    if strategy == "uniform":
        b = np.minimum(np.floor(p * M), M - 1).astype(int)
        lo = np.array([k / M for k in range(M)]); hi = np.array([(k + 1) / M for k in range(M)])
        return b, M, lo, hi, p
    if strategy == "sklearn":
        e = np_linspace_edges(M)
        return np.searchsorted(e[1:-1], p, side="left"), M, e[:-1], e[1:], p
    if strategy == "quantile":
        e = pct_edges(p, M) if w is None else wpct_edges(p, w, M)
        return np.searchsorted(e[1:-1], p, side="left"), M, e[:-1], e[1:], p
    if strategy == "netcal":
        e = np_linspace_edges(M)
        pc = np.clip(p, EPS, 1 - EPS)
        return np.searchsorted(e, pc, side="right") - 1, M, e[:-1], e[1:], pc
    if strategy == "torchmetrics":
        e = torch_linspace_edges(M)
        b = np.searchsorted(e, p, side="right") - 1   # 0..M; M only for p == 1.0
        return b, M + 1, np.append(e[:-1], 1.0), np.append(e[1:], 1.0), p
    if strategy == "relplot":
        s = 1.0 / M
        nb = int(1.0 / s) + 1
        b = (p / s).astype(int)
        lo = np.array([k * s for k in range(nb)]); hi = np.array([min((k + 1) * s, 1.0) for k in range(nb)])
        lo[nb - 1] = hi[nb - 1] = 1.0
        return b, nb, lo, hi, p
    if strategy == "kumar":
        e = kumar_edges(M)
        lo = np.concatenate(([0.0], e[:-1]))
        return np.searchsorted(e, p, side="left"), M, lo, e, p
    raise ValueError(strategy)
