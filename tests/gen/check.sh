#!/usr/bin/env bash
# Every generator of expected values, with --check: what each script computes from its reference
# library must be what the checked-in file holds, so an expected value cannot change without its
# reference changing (tests/README.md, "Expected values"). Needs python3 (3.11) and PyPI; not cargo.
#
#   bash tests/gen/check.sh             # all of them
#   bash tests/gen/check.sh smooth.py   # the generators whose path contains an argument
#
# The venv is $CALIBSQL_GEN_VENV (default ~/.cache/calibsql/gen-venv), with exactly the versions
# of tests/gen/requirements.txt (remade when that file changes). Its first install downloads and
# unpacks about 6 GB (torch and the CUDA libraries its PyPI wheel cannot import without): 2 to 5
# minutes; the checks take 3 to 4 minutes on 2 cores, most of it calibrators.py's fits.
set -euo pipefail
cd "$(dirname "$0")/../.."

venv="${CALIBSQL_GEN_VENV:-$HOME/.cache/calibsql/gen-venv}"
req=tests/gen/requirements.txt
pip_version=26.3

# generator | what it checks (one line each; the order is the cheap ones first)
generators=(
  "tests/gen/doc_examples.py|docs/functions.md: the examples a library computes (smooth_ece: relplot)"
  "tests/slt/gen/scalars.py|tests/slt/scalars.slt"
  "tests/slt/gen/field.py|tests/slt/field.slt"
  "tests/slt/gen/field_metrics.py|tests/slt/multi_field.slt"
  "tests/slt/gen/logloss.py|tests/slt/logloss.slt"
  "tests/slt/gen/auc.py|tests/slt/auc.slt"
  "tests/slt/gen/binned.py|tests/slt/binned.slt"
  "tests/slt/gen/multiclass_loss.py|tests/slt/multiclass_loss.slt (scikit-learn's multiclass log_loss and brier_score_loss)"
  "tests/slt/gen/cbpe.py|tests/slt/cbpe.slt (NannyML's CBPE formulas; scikit-learn's weighted roc_auc_score)"
  "tests/slt/gen/multiclass_fits.py|tests/slt/multiclass_fits.slt (scikit-learn's CalibratedClassifierCV temperature / isotonic, statsmodels' GLM)"
  "tests/slt/gen/top_label.py|tests/slt/top_label.slt (torchmetrics' multiclass_calibration_error, uncertainty-calibration's get_ece)"
  "tests/slt/gen/smooth.py|tests/slt/smooth.slt"
  "tests/slt/gen/strategies.py|tests/slt/strategies.slt"
  "tests/slt/gen/intervals.py|tests/slt/intervals.slt (bootstrap weights reproduced in numpy; a pROC DeLong port)"
  "tests/slt/gen/research/verify_rules.py|docs/binning-rules.md's bin rules against the tools' own code"
  "tests/inference_gen/gen.py|tests/data/inference/ (CSV files and expected.rs)"
  "tests/fits_gen/gen.py|tests/data/fits/ (CSV files and expected.rs)"
  "tests/fits_gen/calibrators.py|tests/data/calibrators/ (CSV files and expected.rs)"
)

if ! command -v python3 >/dev/null 2>&1; then
  echo "tests/gen/check.sh: python3 is not installed; the generators need Python 3.11" >&2
  exit 1
fi

want="$(sha256sum "$req" | cut -d' ' -f1) pip==$pip_version $(python3 -c 'import sys; print(sys.version.split()[0])')"
if [ ! -x "$venv/bin/python" ] || [ "$(cat "$venv/.calibsql-requirements" 2>/dev/null)" != "$want" ]; then
  echo "making $venv from $req"
  start=$SECONDS
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "pip==$pip_version"
  # --no-deps: requirements.txt lists every package, so what is installed is exactly that list
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps -r "$req"
  "$venv/bin/python" -m pip check
  echo "$want" > "$venv/.calibsql-requirements"
  echo "venv ready in $((SECONDS - start)) s"
fi

py="$venv/bin/python"
log="$(mktemp -d)"
trap 'rm -rf "$log"' EXIT
failed=()
ran=0
for entry in "${generators[@]}"; do
  script="${entry%%|*}"
  what="${entry#*|}"
  if [ $# -gt 0 ]; then
    keep=no
    for a in "$@"; do [[ "$script" == *"$a"* ]] && keep=yes; done
    [ "$keep" = yes ] || continue
  fi
  ran=$((ran + 1))
  out="$log/$(echo "$script" | tr / _).log"
  start=$SECONDS
  # each script runs from its own folder, as its header says (the slt ones import common.py)
  if (cd "$(dirname "$script")" && "$py" "$(basename "$script")" --check) >"$out" 2>&1; then
    echo "ok   $script ($((SECONDS - start)) s): $(tail -n 1 "$out")"
  else
    echo "FAIL $script ($((SECONDS - start)) s), checks $what:"
    sed 's/^/     /' "$out"
    failed+=("$script")
  fi
done
if [ "$ran" -eq 0 ]; then
  echo "tests/gen/check.sh: no generator matches $*" >&2
  exit 1
fi
if [ ${#failed[@]} -gt 0 ]; then
  echo "tests/gen/check.sh: ${#failed[@]} of $ran generator(s) disagree with the checked-in expected values: ${failed[*]}" >&2
  echo "Rerun one with \`$py SCRIPT --check\` from its folder; regenerate only with the reference changed." >&2
  exit 1
fi
echo "tests/gen/check.sh: all $ran generators reproduce the checked-in expected values"
