#!/bin/sh
# help2man.sh HELP2MAN KCAGE VERSION OUTDIR: one man page per subcommand (kcage-run.1,
# ...) and kcage.1, generated from their --help, with the EXAMPLES and SEE ALSO of
# man/NAME.h2m.  help2man runs a program by name, so each subcommand gets a two-line
# wrapper named kcage-SUB.
set -eu
help2man=$1 kcage=$2 version=$3 out=$4
here=$(cd "$(dirname "$0")" && pwd)
mkdir -p "$out/wrap"
gen() { # NAME DESCRIPTION PROGRAM
  "$help2man" --no-info --no-discard-stderr --version-string="$version" \
    --include="$here/$1.h2m" \
    --name="$2" --section=1 --source="kcage $version" --output="$out/$1.1" "$3"
}
gen kcage "sandboxed workers and measurement for untrusted compute kernels" "$kcage"
while read -r sub desc; do
  w=$out/wrap/kcage-$sub
  printf '#!/bin/sh\nexec "%s" %s "$@"\n' "$kcage" "$sub" >"$w"
  chmod +x "$w"
  gen "kcage-$sub" "$desc" "$w"
done <<'LIST'
run run one program in a fresh sandbox
bench build and time candidate kernels in sandboxes
policy check or show sandbox policies
tracker run a TVM-compatible RPC tracker
agent serve kcage sessions for a tracker (a device agent)
query print a tracker's queue status
LIST
