#!/bin/sh
# make python: BUILD/venv with the kcage package installed for development (editable)
# and its pinned test dependencies.  The interpreter is $PYTHON, else python3 on PATH;
# when kcage runs as root each sandbox runs as host ids of its own (a reserved range no
# account uses), so an interpreter under a directory others cannot enter (pyenv in
# /root) cannot run inside them: then the system's /usr/bin/python3 is used instead,
# and said so.
set -eu
build=${1:-build}
venv="$build/venv"
py=${PYTHON:-python3}
unreadable() {
  "$1" - <<'PY'
import os, stat, sys
p = os.path.realpath(sys.base_prefix)
while True:
    if not os.stat(p).st_mode & stat.S_IXOTH:
        sys.exit(0)
    if p == "/":
        sys.exit(1)
    p = os.path.dirname(p)
PY
}
if [ "$(id -u)" -eq 0 ] && unreadable "$py" && [ -x /usr/bin/python3 ]; then
  echo "kcage: $py lives where others (the sandboxes' host ids) cannot read; using /usr/bin/python3" >&2
  py=/usr/bin/python3
fi
stamp="$venv/.kcage-requirements"
if [ -x "$venv/bin/python" ] && [ -f "$stamp" ] && cmp -s "$stamp" python/requirements-test.txt; then
  exit 0
fi
rm -rf "$venv"
"$py" -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -r python/requirements-test.txt
"$venv/bin/pip" install -q --disable-pip-version-check -e python
cp python/requirements-test.txt "$stamp"
echo "kcage: $venv ready ($("$venv/bin/python" --version))"
