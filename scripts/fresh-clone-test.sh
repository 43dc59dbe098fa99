#!/usr/bin/env bash
# Run `make test` the way a new user does: a clone of the current commit in an empty temporary
# folder, with nothing beside it (no ../shared), a virtualenv built from nothing.
# KUBERAY_CRDS_DIR passes through if set; without it the clone must find or download the CRDs.
# KEEP=1 keeps the folder for a look afterwards.
set -euo pipefail
repo=$(git rev-parse --show-toplevel)
commit=$(git -C "$repo" rev-parse HEAD)
if [ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]; then
  echo "fresh-clone-test: uncommitted changes are not in the clone; testing $commit as committed" >&2
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/trainctl-fresh.XXXXXX")
[ "${KEEP:-0}" = 1 ] || trap 'rm -rf "$work"' EXIT
git clone --quiet --no-local --no-checkout "$repo" "$work/trainctl"
git -C "$work/trainctl" checkout --quiet "$commit"
echo "fresh-clone-test: $commit in $work/trainctl (nothing beside it)"
start=$(date +%s)
set +e
(cd "$work/trainctl" && env -u VIRTUAL_ENV -u PYTHONPATH make test)
rc=$?
set -e
elapsed=$(( $(date +%s) - start ))
printf 'fresh-clone-test: make test exited %d after %dm%02ds\n' "$rc" $((elapsed / 60)) $((elapsed % 60))
exit "$rc"
