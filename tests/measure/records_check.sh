# Sourced by the measure case scripts: when a case ends, every JSON Lines record it made
# (each *.jsonl under $tmp) is validated against docs/record.schema.json, and a record
# that does not fit fails the case.  Without python's jsonschema the check is skipped
# (said once on stdout); the case's own result stands.
# records_check KCAGE TMP: the python of the build's venv (pinned jsonschema), else
# python3.
records_check() {
  local kcage=$1 dir=$2 rc=$? here py files
  here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
  py=$(dirname "$kcage")/venv/bin/python
  [[ -x $py ]] || py=python3
  mapfile -t files < <(find "$dir" -name '*.jsonl' -size +0 2>/dev/null)
  ((${#files[@]})) || return "$rc"
  "$py" "$here/validate_records.py" "$here/../../docs/record.schema.json" "${files[@]}"
  case $? in
  0 | 77) return "$rc" ;;
  *) echo "FAIL: a record does not fit docs/record.schema.json"; return 1 ;;
  esac
}
