import torch, numpy as np
from fractions import Fraction
print(torch.__version__, torch.backends.cpu.get_cpu_capability())
torch.set_num_threads(1)
def fma_sub(end, step, n):  # round(end - step*n) exactly once
    return float(Fraction(end) - Fraction(step) * n)
diff_np = []; bad_formula = []; fma_hits = []
for M in range(1, 10001):
    t = torch.linspace(0, 1, M + 1, dtype=torch.float64).numpy()
    n = np.linspace(0, 1, M + 1)
    steps = M + 1; step = 1.0 / M; half = steps // 2
    f = np.array([step * k if k < half else 1.0 - step * (steps - k - 1) for k in range(steps)])
    if not np.array_equal(t, f):
        bad_formula.append(M)
        g = np.array([step * k if k < half else fma_sub(1.0, step, steps - k - 1) for k in range(steps)])
        if np.array_equal(t, g): fma_hits.append(M)
    if not np.array_equal(t, n):
        diff_np.append(M)
print("formula mismatches:", len(bad_formula), bad_formula[:20], "fma explains:", len(fma_hits))
print("torch != numpy for", len(diff_np), "of 10000 M; first:", diff_np[:40])
for M in (10, 15):
    t = torch.linspace(0, 1, M + 1, dtype=torch.float64).numpy(); n = np.linspace(0, 1, M + 1)
    print(M, [(k, repr(float(n[k])), repr(float(t[k])), repr(k / M)) for k in range(M + 1) if t[k] != n[k] or n[k] != k / M])
