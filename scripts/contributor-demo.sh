#!/usr/bin/env bash
# A contributor's checkout, demonstrated (issue 27, item 2; docs/contributors.md has the transcript).
#
#   scripts/contributor-demo.sh [WORK_DIR] [--base-venvs DIR]
#
# 1. builds a git checkout of vLLM's Python sources from the 0.33.0 wheel (scripts/make_vllm_checkout.py;
#    a dev version, 0.33.1.devN+g<commit>) and installs it editable into a venv of its own
#    (scripts/install-vllm-target.sh --editable);
# 2. runs the suite on it: it passes;
# 3. reverts one seed fix in the checkout (#47272, the null-block reservation of the startup check),
#    commits it as a pull request would, and runs `kvverify diff --base <the commit before it>`
#    (a git worktree of the base commit, a vLLM source tree: what scripts/vllm-fork-workflow.yml
#    does on a fork's pull request): the new failures are listed, each named
#    `null_block_not_reserved`, exit 1;
# 4. reverts the revert (git revert): the suite passes again.
# Every step's exit status is checked; the last line says DEMO OK or what went wrong.
# WORK_DIR (default /tmp/kvverify-contributor-demo) keeps the checkout and its venv between runs.
# KVVERIFY_DEMO_BASE=0.33.0 compares step 3 against that installed release instead (--base-venvs).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT="$PWD"
WORK="${1:-/tmp/kvverify-contributor-demo}"
BASE_VENVS="${KVVERIFY_RELEASE_VENVS:-$ROOT/../venvs}"
[[ "${2:-}" == "--base-venvs" ]] && BASE_VENVS="$3"
CHECKOUT="$WORK/vllm"
VENV="$WORK/venv"
PY="$VENV/bin/python"
mkdir -p "$WORK"
say() { echo; echo "=== $* ($(date -u +%H:%M:%S))"; }
IGNORES=()
mapfile -t IGNORES < <(python3 -m kvverify.releases.suite 2>/dev/null || .venv/bin/python -m kvverify.releases.suite)
suite() {  # the release matrix's command, on the checkout's venv; must pass
  local log="$WORK/suite-$1.log" t=$SECONDS rc=0
  env VLLM_TARGET_DEVICE=cpu HF_HUB_OFFLINE=1 "$PY" -m pytest properties/ --target vllm -n 2 \
    --hypothesis-profile=ci -q -p no:cacheprovider -rN --tb=no --attribute-flaws "${IGNORES[@]}" > "$log" 2>&1 || rc=$?
  tail -n 1 "$log"
  echo "suite ($1): exit $rc in $((SECONDS - t)) s (log: $log)"
  [[ $rc -eq 0 ]] || { echo "DEMO FAILED: the suite should pass here"; exit 1; }
}

say "1. the checkout: vLLM's Python sources from the 0.33.0 wheel, a git repository, a dev version"
if [[ ! -d "$CHECKOUT/.git" ]]; then
  python3 scripts/make_vllm_checkout.py "$CHECKOUT" --release 0.33.0
fi
git -C "$CHECKOUT" log --oneline | cat
bash scripts/install-vllm-target.sh --editable "$CHECKOUT" "$VENV" | tail -n 3
"$PY" -c "import vllm, vllm.version; print('vllm', vllm.version.__version__, 'from', vllm.__file__)"

say "2. the suite on the checkout (expected: passes)"
suite checkout

say "3. revert #47272 (the null-block reservation) in the checkout, commit, and kvverify diff --base <its parent>"
git -C "$CHECKOUT" apply "$ROOT/scripts/contributor-demo/revert-47272-null-block.diff"
git -C "$CHECKOUT" -c user.name=contributor -c user.email=c@localhost commit -q -am "Revert the null-block reservation of #47272"
"$PY" scripts/make_vllm_checkout.py "$CHECKOUT" --stamp
git -C "$CHECKOUT" diff --stat HEAD~1 | cat
BASE_ARGS=()
if [[ -n "${KVVERIFY_DEMO_BASE:-}" ]]; then
  BASE_ARGS=(--base "$KVVERIFY_DEMO_BASE" --venvs "$BASE_VENVS")
else
  rm -rf "$WORK/base"; git -C "$CHECKOUT" worktree prune
  git -C "$CHECKOUT" worktree add -q --detach "$WORK/base" HEAD~1
  "$PY" scripts/make_vllm_checkout.py "$WORK/base" --stamp
  BASE_ARGS=(--base "$WORK/base")
fi
t=$SECONDS
set +e
"$VENV/bin/kvverify" diff "${BASE_ARGS[@]}" --reports-root "$WORK/diff" 2> "$WORK/diff.log" | tee "$WORK/diff.txt"
rc=${PIPESTATUS[0]}
set -e
if [[ -z "${KVVERIFY_DEMO_BASE:-}" ]]; then git -C "$CHECKOUT" worktree remove --force "$WORK/base"; fi
echo "kvverify diff: exit $rc in $((SECONDS - t)) s"
[[ $rc -eq 1 ]] || { echo "DEMO FAILED: kvverify diff should exit 1 on the reverted fix (got $rc)"; exit 1; }

say "4. restore the fix (git revert) and run the suite again (expected: passes)"
git -C "$CHECKOUT" -c user.name=contributor -c user.email=c@localhost revert --no-edit HEAD | cat
"$PY" scripts/make_vllm_checkout.py "$CHECKOUT" --stamp
suite restored
echo
echo "DEMO OK"
