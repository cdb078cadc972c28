import sys; sys.path.insert(0, '/work/main/tests/slt/gen')
import numpy as np
from fractions import Fraction
def fma(a,b,c): return float(Fraction(a)*Fraction(b)+Fraction(c))
def tl(M, f):
    s = 1.0/M; h = (M+1)//2
    return [s*k if k < h else (fma(-s, M-k, 1.0) if f else 1.0 - s*(M-k)) for k in range(M+1)]
def nl(M):
    s = 1.0/M; e = [k*s for k in range(M+1)]; e[-1] = 1.0; return e
R = range(1, 10001)
print("torch(fma)==numpy:", [M for M in R if tl(M, True) == nl(M)])
print("torch(nofma)==numpy:", [M for M in R if tl(M, False) == nl(M)])
print("fma==nofma for M<=100:", [M for M in range(1,101) if tl(M, True) == tl(M, False)])
print("numpy==k/M (kumar) M<=10000:", [M for M in R if nl(M) == [k/M for k in range(M+1)]][:40])
print("relplot int(1/(1/M)) != M:", [M for M in R if int(1.0/(1.0/M)) != M])
print("floor(fl(k/M)*M) != k for M<=100:", sum(1 for M in range(1,101) for k in range(M+1) if np.floor((k/M)*M) != k))
print("uniform vs netcal (p = fl(k/M)) differ, M<=30:", {M: [k for k in range(1, M) if min(np.floor((k/M)*M), M-1) != np.searchsorted(nl(M), k/M, 'right')-1] for M in range(1,31) if any(min(np.floor((k/M)*M), M-1) != np.searchsorted(nl(M), k/M, 'right')-1 for k in range(1, M))})
