"""--check of the generators: what a script computes against the checked-in file, up to float noise.

The generators print every number with all its digits (shortest repr). numpy and OpenBLAS pick
their kernels (AVX2, AVX-512, ...) by the processor they run on, and each kernel adds in its own
order, so the last digits of a sum of many terms, of a BLAS dot product or of an optimizer's
iterate depend on the machine: the same script prints 0.0005257362427912809 on one machine and
0.0005257362427912698 on another. So --check compares text with text and number with number:
  * everything that is not a number must be identical;
  * integers (no '.', no exponent) must be identical;
  * floats must agree to |a - b| <= rel * max(|a|, |b|) + abs, a tolerance each caller
    chooses well below the tolerance of the test that reads the value (and well above the noise
    seen between machines), so a changed expectation that the test could notice fails the check.
"""

import math
import re

# a number not glued to a word or a dot (identifiers such as f64 or x1 stay text)
NUM = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w.])|(?<![\w.])-?inf\b|\bNaN\b")
INT = re.compile(r"[-+]?\d+")


def tokens(text):
    """[(is_number, token)] in order."""
    out = []
    pos = 0
    for m in NUM.finditer(text):
        if m.start() > pos:
            out.append((False, text[pos:m.start()]))
        out.append((True, m.group(0)))
        pos = m.end()
    if pos < len(text):
        out.append((False, text[pos:]))
    return out


def _float(tok):
    return float(tok.replace("NaN", "nan"))


def number_gap(a, b, rel, abs_):
    """0 when number tokens a and b match, else how far apart they are (in units of the tolerance;
    inf when they cannot match at all)."""
    if a == b:
        return 0.0
    if INT.fullmatch(a) or INT.fullmatch(b):
        return math.inf
    x, y = _float(a), _float(b)
    if x == y:
        return 0.0
    if not (math.isfinite(x) and math.isfinite(y)):
        return math.inf
    tol = rel * max(abs(x), abs(y)) + abs_
    return abs(x - y) / tol if tol > 0 else math.inf


def compare(got, want, rel, abs_=0.0, what=""):
    """None when `got` (computed) matches `want` (checked in), else a message saying where not.

    Also returns the largest gap of the floats that matched (<= 1: within the tolerance)."""
    tg, tw = tokens(got), tokens(want)
    worst = 0.0
    line = 1
    for (ng, g), (nw, w) in zip(tg, tw):
        if ng != nw or (not ng and g != w):
            return _text_diff(got, want, what), worst
        if ng:
            gap = number_gap(g, w, rel, abs_)
            if gap > 1:
                return (f"{what} line {line}: computed {g}, checked in {w} "
                        f"(tolerance {rel:g} relative + {abs_:g}; off by {gap:.3g} times it)"), worst
            worst = max(worst, gap)
        line += w.count("\n")
    if len(tg) != len(tw):
        return _text_diff(got, want, what), worst
    return None, worst


def _text_diff(got, want, what):
    gl, wl = got.splitlines(), want.splitlines()
    for i, (a, b) in enumerate(zip(gl, wl)):
        if [t for n, t in tokens(a) if not n] != [t for n, t in tokens(b) if not n] or len(tokens(a)) != len(tokens(b)):
            return f"{what} line {i + 1} differs:\n  computed:   {a[:400]}\n  checked in: {b[:400]}"
    return f"{what}: {len(gl)} lines computed, {len(wl)} checked in"


def find_block(block, text, rel, abs_=0.0):
    """Is `block` in `text`, verbatim or up to float noise? Returns (found, gap).

    A block not present verbatim is looked for as a pattern (its text exactly, each number any
    run of non-blanks) and every candidate is compared number by number."""
    if block in text:
        return True, 0.0
    parts = []
    pos = 0
    for m in NUM.finditer(block):
        parts.append(re.escape(block[pos:m.start()]))
        parts.append(r"\S+?")
        pos = m.end()
    parts.append(re.escape(block[pos:]))
    best = None
    for m in re.finditer("".join(parts), text):
        msg, gap = compare(block, m.group(0), rel, abs_)
        if msg is None and (best is None or gap < best):
            best = gap
    return best is not None, (best or 0.0)


def check_tree(computed_dir, checked_dir, tolerance):
    """Every file a generator wrote into `computed_dir` against its namesake in `checked_dir`.

    tolerance(name) -> [(marker, rel, abs)]: the file is cut before each marker (the first
    section, marker None, starts at the top) and each section compared with its tolerance.
    Prints one line a file; returns the number of files that differ (or are missing)."""
    import os

    bad = 0
    computed = sorted(os.listdir(computed_dir))
    for name in sorted(set(os.listdir(checked_dir)) - set(computed)):
        print(f"DIFFERS: {os.path.join(checked_dir, name)} is checked in but the script no longer writes it")
        bad += 1
    for name in computed:
        path = os.path.join(checked_dir, name)
        if not os.path.exists(path):
            print(f"DIFFERS: the script writes {name}, which is not checked in under {checked_dir}")
            bad += 1
            continue
        with open(os.path.join(computed_dir, name)) as fh:
            got = fh.read()
        with open(path) as fh:
            want = fh.read()
        msg, worst = None, 0.0
        sections = tolerance(name)
        cuts_g, cuts_w = [0], [0]
        for marker, _, _ in sections[1:]:
            cuts_g.append(got.find(marker))
            cuts_w.append(want.find(marker))
        if -1 in cuts_w or -1 in cuts_g:
            msg = f"{path}: a section marker is missing"
        for i, (_, rel, abs_) in enumerate(sections):
            if msg:
                break
            end_g = cuts_g[i + 1] if i + 1 < len(cuts_g) else len(got)
            end_w = cuts_w[i + 1] if i + 1 < len(cuts_w) else len(want)
            msg, gap = compare(got[cuts_g[i]:end_g], want[cuts_w[i]:end_w], rel, abs_, what=path)
            worst = max(worst, gap)
        if msg:
            bad += 1
            print("DIFFERS:", msg)
        else:
            how = "identical" if got == want else f"same up to float noise (at most {worst:.2g} of the tolerance)"
            print(f"{path}: {how}")
    return bad
