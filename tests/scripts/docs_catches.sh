#!/usr/bin/env bash
# tests/scripts/docs_catches.sh ROOT SCRATCH CASE: scripts/docs-check must
# fail on a copy of the documents with one defect planted, and name it.
# The copy is README.md, docs/ and results/ (records linked, not copied);
# each case plants one defect and greps the check's output for its rule.
#   figure          a measured figure with no results/ link, in docs/
#   figure_code     the same figure in a fenced block (pasted output)
#   hash            a commit hash in README.md
#   story           a before/after story in docs/
#   block           a hand-written block in generated markers
#   length          README.md past its line limit
#   record_name     a results/ folder that is not <date>-<machine>-<commit>
#   record_section  a record README without "## What it supersedes"
#   baseline        results/baseline a folder, not a link to a record
#   record_edit     (a scratch git repository) a record edited after its
#                   commit, and one edited in the working tree
set -u
root=$1 dir=$2 case=$3
fail() { echo "docs_catches/$case: $*" >&2; exit 1; }
rm -rf "$dir" && mkdir -p "$dir/r/results" || fail "no scratch folder"
r=$dir/r
cp "$root/README.md" "$r/" && cp -r "$root/docs" "$r/" || fail "copy"
cp "$root/results/README.md" "$r/results/"
for d in "$root"/results/20*; do ln -s "$d" "$r/results/$(basename "$d")"; done
cp -P "$root/results/baseline" "$r/results/baseline"
check() { /usr/bin/python3 "$root/scripts/docs-check" "$@" > "$dir/out" 2>&1; rc=$?; cat "$dir/out"; }
# the unplanted copy passes: each failure below is the planted defect's
check "$r"
[ "$rc" -eq 0 ] || fail "the copy fails before anything is planted"
expect() {  # RULE TEXT: exit 1, and a line naming the rule and the text
  check "$@"
  [ "$rc" -eq 1 ] || fail "exit $rc, not 1"
  grep -F -- ": $rule: " "$dir/out" | grep -qF -- "$what" || fail "no '$rule' line naming '$what'"
  echo "docs_catches/$case: caught ($rule)"
}
case $case in
figure)
  printf '\nThe wheel fires a burst at 17.6M fires/s on this machine.\n' >> "$r/docs/lockfree.md"
  rule=figure what="17.6M fires/s" expect "$r" ;;
figure_code)
  printf '\n```\nthroughput  wheel  seed  8.77 ns  9.21 ns  1.05x slower\n```\n' >> "$r/docs/harness.md"
  rule=figure what="8.77 ns" expect "$r" ;;
hash)
  printf '\nTried on a fresh clone of commit 5c1c0f2.\n' >> "$r/README.md"
  rule=hash what="5c1c0f2" expect "$r" ;;
story)
  printf '\nDestroy from a callback is refused; before the fix it crashed.\n' >> "$r/docs/testing.md"
  rule=story what="before the fix" expect "$r" ;;
block)
  printf '\n<!-- begin: numbers (by hand) -->\nwheel 9.7 ns\n<!-- end: numbers -->\n' >> "$r/README.md"
  rule=block what="'numbers' is no block a script writes" expect "$r" ;;
length)
  for i in $(seq 60); do printf 'A line of notebook.\n'; done >> "$r/README.md"
  rule=length what="more than 350" expect "$r" ;;
record_name)
  mkdir "$r/results/expiry-hog" && echo "# a run" > "$r/results/expiry-hog/README.md"
  rule=record what="results/expiry-hog" expect "$r" ;;
record_section)
  rec=$(readlink "$r/results/baseline")
  rm "$r/results/$rec" && mkdir "$r/results/$rec" && cp -r "$root/results/$rec/." "$r/results/$rec/"
  sed -i 's/^## What it supersedes$/## Older runs/' "$r/results/$rec/README.md"
  rule=record what="no section '## What it supersedes'" expect "$r" ;;
baseline)
  rm "$r/results/baseline" && mkdir "$r/results/baseline"
  rule=record what="results/baseline" expect "$r" ;;
record_edit)
  g=$dir/g && mkdir -p "$g/docs" "$g/results/2026-01-01-box-abc1234" || fail "scratch repo"
  printf '# x\n' > "$g/README.md"
  printf '# x\n' > "$g/results/README.md"
  printf '# r\n\n## What was run\n\n## What it found\n\nall clean\n\n## What it supersedes\n' \
    > "$g/results/2026-01-01-box-abc1234/README.md"
  ln -s 2026-01-01-box-abc1234 "$g/results/baseline"
  git -C "$g" init -q && git -C "$g" add -A &&
    git -C "$g" -c user.name=t -c user.email=t@t commit -qm "record" || fail "git"
  check --git "$g"
  [ "$rc" -eq 0 ] || fail "the fresh record fails"
  sed -i 's/all clean/all clean, one figure edited by hand/' "$g/results/2026-01-01-box-abc1234/README.md"
  rule=edited what="changed in the working tree" expect --git "$g"
  git -C "$g" -c user.name=t -c user.email=t@t commit -qam "edit the record" || fail "git"
  rule=edited what="after it was added" expect --git "$g" ;;
*) fail "unknown case" ;;
esac
