"""Replace the generated blocks of an .slt file made by an old generator with a new one's.
usage: replace_blocks.py OLD_GEN_DIR NEW_GEN_DIR MODULE SLT_PATH"""
import importlib, sys
old_dir, new_dir, mod, slt = sys.argv[1:5]
def blocks(d):
    sys.path.insert(0, d)
    for k in [k for k in sys.modules if k in (mod, "common")]:
        del sys.modules[k]
    m = importlib.import_module(mod)
    out = [b for _, bs in m.sections() for b in bs]
    sys.path.pop(0)
    return out
old = blocks(old_dir)
new = blocks(new_dir)
assert len(old) == len(new), (len(old), len(new))
text = open(slt).read()
changed = 0
for o, n in zip(old, new):
    if o == n:
        continue
    if text.count(o) != 1:
        import re
        o2 = re.sub(r"^(query [A-Z]+)\n", r"\1 rowsort\n", o, flags=re.M)
        n = re.sub(r"^(query [A-Z]+)\n", r"\1 rowsort\n", n, flags=re.M)
        o = o2
    assert text.count(o) == 1, ("not found once", o[:200])
    text = text.replace(o, n)
    changed += 1
open(slt, "w").write(text)
print("replaced", changed, "of", len(old))
