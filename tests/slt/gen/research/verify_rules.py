"""Check the reference bin rules in rules.py against the tools' own code paths, for many M and
adversarial p (k/M in several float computations, their neighbours, 0, 1, ties).
Exits 1 on a mismatch; CI runs it through tests/gen/check.sh (docs/binning-rules.md rests on it)."""
import sys, warnings
import numpy as np, torch
from sklearn.calibration import calibration_curve
from netcal.metrics import ECE, ACE, MCE
from torchmetrics.functional.classification import binary_calibration_error
from torchmetrics.functional.classification.calibration_error import _binning_bucketize
import relplot.metrics as rm
from calibration import utils as cu
from rules import *
torch.set_num_threads(1)
warnings.filterwarnings("ignore")
rng = np.random.default_rng(1)

def adversarial(M):
    v = set([0.0, 1.0, 1 - EPS, EPS, 0.5, np.nextafter(1.0, 0)])
    s = 1.0 / M
    for k in range(M + 1):
        for x in (k / M, k * s, k * (1.0 / M), float(Fraction(k, M)), 1.0 - (M - k) * s, fma(-s, M - k, 1.0), round(k / M, 2)):
            if 0 <= x <= 1:
                v.add(x); v.add(float(np.nextafter(x, 0))); v.add(float(np.nextafter(x, 1)))
    v = np.array(sorted(x for x in v if 0 <= x <= 1))
    return v

def data(M):
    a = adversarial(M)
    r = rng.random(200)
    p = np.concatenate([a, a, r, np.round(r, 2)])
    y = rng.integers(0, 2, len(p))
    return p, y

bad = []
Ms = list(range(1, 61)) + [64, 97, 100, 128, 1000, 1234, 10000]
for M in Ms:
    p, y = data(M)
    N = len(p)
    # sklearn uniform
    b, nb, lo, hi, pu = assign(p, M, "sklearn")
    pt, pp = calibration_curve(y, p, n_bins=M, strategy="uniform")
    cnt = np.bincount(b, minlength=nb); ne = cnt > 0
    mp = np.bincount(b, weights=p, minlength=nb)[ne] / cnt[ne]; fy = np.bincount(b, weights=y, minlength=nb)[ne] / cnt[ne]
    if not (np.array_equal(pt, fy) and np.array_equal(pp, mp)): bad.append(("sklearn", M))
    # sklearn quantile
    for pq in (p, np.round(p, 1), np.sort(rng.random(37))):
        yq = rng.integers(0, 2, len(pq))
        e_np = np.percentile(pq, np.linspace(0, 1, M + 1) * 100)
        if not np.array_equal(e_np, pct_edges(pq, M)): bad.append(("pct_edges", M))
        b, nb, *_ = assign(pq, M, "quantile")
        pt, pp = calibration_curve(yq, pq, n_bins=M, strategy="quantile")
        cnt = np.bincount(b, minlength=nb); ne = cnt > 0
        if not (np.array_equal(pt, np.bincount(b, weights=yq, minlength=nb)[ne] / cnt[ne]) and
                np.array_equal(pp, np.bincount(b, weights=pq, minlength=nb)[ne] / cnt[ne])): bad.append(("quantile", M))
        wq = rng.choice([0.0, 0.25, 0.5, 1.0, 1.5, 3.0], len(pq))
        if not np.array_equal(np.percentile(pq, np.linspace(0, 1, M + 1) * 100, weights=wq, method="inverted_cdf"), wpct_edges(pq, wq, M)):
            bad.append(("wpct", M))
    # netcal
    b, nb, lo, hi, pc = assign(p, M, "netcal")
    nc = ECE(bins=M)
    X, matched, _, bounds, _ = nc.prepare(p, y)
    (acc, conf), nsh, _, _ = nc.binning(bounds[0], X[0], matched[0], X[0][:, 0])
    cnt = np.bincount(b, minlength=nb)
    if not np.array_equal(nsh, cnt): bad.append(("netcal counts", M))
    # torchmetrics
    b, nb, *_ = assign(p, M, "torchmetrics")
    tb = torch.linspace(0, 1, M + 1, dtype=torch.float64)
    if not np.array_equal(tb.numpy(), torch_linspace_edges(M)): bad.append(("torch linspace", M))
    idx = (torch.bucketize(torch.tensor(p), tb, right=True) - 1).numpy()
    if not np.array_equal(idx, b): bad.append(("torch bucketize", M))
    # relplot
    b, nb, *_ = assign(p, M, "relplot")
    s = np.zeros(nb); np.add.at(s, b, p - y)
    if not np.array_equal(rm.binning(p, y, bin_size=1.0 / M), s): bad.append(("relplot", M))
    if nb != M + 1: print("relplot bins_cnt != M+1 for M =", M, nb)
    # kumar
    b, nb, *_ = assign(p, M, "kumar")
    bd = cu.fast_bin(list(zip(p, y)), cu.get_equal_prob_bins(p, num_bins=M))
    if not np.array_equal([len(x) for x in bd], np.bincount(b, minlength=nb)): bad.append(("kumar", M))
print("mismatches:", bad)
sys.exit(1 if bad else 0)  # tests/gen/check.sh runs this (with --check, which changes nothing)
