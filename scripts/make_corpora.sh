#!/usr/bin/env bash
# The text corpora of the real-model pruning experiments (docs/accuracy.md), from Debian packages, one sentence
# (or passage) per line:
#   OUT/kjv-train.txt    King James Bible (bible-kjv), every book except the held-out ones: calibration, retraining
#   OUT/kjv-heldout.txt  the held-out books Ruth, Proverbs, Mark and Romans (2,111 verses): evaluation only
#   OUT/fortunes.txt     a non-biblical text for evaluation: the prose collections of the `fortunes` package
#                        (literature, wisdom, people, science, education, work, politics), one fortune per line,
#                        30-300 characters
# Verse references are stripped. Deterministic: the same packages give the same files.
set -euo pipefail
out=${1:?usage: make_corpora.sh OUT_DIR}
mkdir -p "$out"
heldout='^(Ruth|Prv|Mark|Rom)[0-9]+:[0-9]+ '
tmp=$(mktemp -d "$out/.corpora.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
bible -f Gen1:1-Rev22:21 > "$tmp/all.txt"
grep -Ev "$heldout" "$tmp/all.txt" | sed -E 's/^[^ ]+ //' > "$tmp/kjv-train.txt"
grep -E "$heldout" "$tmp/all.txt" | sed -E 's/^[^ ]+ //' > "$tmp/kjv-heldout.txt"
fdir=/usr/share/games/fortunes
for f in literature wisdom people science education work politics; do
  awk 'BEGIN { RS = "\n%\n" } { gsub(/[ \t\n]+/, " "); sub(/^ /, ""); sub(/ $/, ""); if (length($0) >= 30 && length($0) <= 300) print }' "$fdir/$f"
done > "$tmp/fortunes.txt"
n_heldout=$(wc -l < "$tmp/kjv-heldout.txt")
[ "$n_heldout" -eq 2111 ] || { echo "make_corpora: expected 2111 held-out verses, got $n_heldout" >&2; exit 1; }
mv "$tmp"/kjv-train.txt "$tmp"/kjv-heldout.txt "$tmp"/fortunes.txt "$out"/
