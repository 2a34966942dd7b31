# bash completion for kcage.  Options are read from `kcage SUBCOMMAND --help` and
# policy names from `kcage policy list` when completing, so they never fall behind the
# program or the policies installed (and $KCAGE_POLICY_DIR's).
_kcage() {
  local cur prev words cword
  if declare -F _init_completion >/dev/null; then
    _init_completion || return
  else
    cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD - 1]}
    words=("${COMP_WORDS[@]}") cword=$COMP_CWORD
  fi
  local subs="run bench policy tracker agent query"
  if ((cword == 1)); then
    mapfile -t COMPREPLY < <(compgen -W "$subs --help --version" -- "$cur")
    return
  fi
  local sub=${words[1]} i
  for ((i = 2; i < cword; i++)); do
    [[ ${words[i]} == -- ]] && { # kcage run ... -- PROGRAM: complete the program
      mapfile -t COMPREPLY < <(compgen -c -- "$cur")
      return
    }
  done
  case $prev in
  --policy)
    mapfile -t COMPREPLY < <(compgen -W "$("${words[0]}" policy list 2>/dev/null)" -f -- "$cur")
    return ;;
  --limits-fallback)
    mapfile -t COMPREPLY < <(compgen -W "rlimit none" -- "$cur")
    return ;;
  --abi)
    mapfile -t COMPREPLY < <(compgen -W "dlpack tvm-ffi" -- "$cur")
    return ;;
  --cgroup)
    mapfile -t COMPREPLY < <(compgen -W "auto v1 v2 hybrid none" -- "$cur")
    return ;;
  --json | --report | --reference | --cache-dir | --cwd | --ro-bind | --bind | --cc)
    mapfile -t COMPREPLY < <(compgen -f -- "$cur")
    return ;;
  esac
  if [[ $sub == policy && $cword == 2 ]]; then
    mapfile -t COMPREPLY < <(compgen -W "check show list --help --version" -- "$cur")
    return
  fi
  if [[ $sub == policy && (${words[2]} == show || ${words[2]} == check) && $cur != -* ]]; then
    mapfile -t COMPREPLY < <(compgen -W "$("${words[0]}" policy list 2>/dev/null)" -f -- "$cur")
    return
  fi
  if [[ $cur == -* ]]; then
    local opts
    opts=$("${words[0]}" "$sub" --help 2>/dev/null | grep -oE -- '--[a-z][a-z-]*' | sort -u)
    mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur")
    return
  fi
  mapfile -t COMPREPLY < <(compgen -f -- "$cur")
}
complete -F _kcage kcage
