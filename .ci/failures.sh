# Sourced by .ci/run: a failed run names its cause in its last lines (issue 28): every failed job or
# step, the first line of its log that reads like an error, and the log's path. Needs $logs (a folder
# that outlives the run when it fails) and $step_name (the step running when set -e ended the run).
# shellcheck shell=bash
failures=() # "job|log" of every failed job or step, for the summary in the last lines
failed() { # JOB [LOG]: remember a failure for the summary
  failures+=("$1|${2:-}")
}
# The lines our scripts' die() writes: "<script>: <problem>" (images/*.sh), often "...; fix: <what>".
DIE_LINE='^(arm64-root|base\.sh|images/build\.sh|images/demo\.sh|prepare-host): |[^[:space:]].*; fix: '
first_error() { # LOG -> its first line that reads like an error (else its last line)
  local line pattern
  # best first: pytest's short summary (the failing test), our scripts' die lines, apt/debootstrap's
  # "E: " lines, Error/ERROR/FAILED words, then anything error-like (a setuptools warning that
  # mentions an error comes before the real cause in a pip log, so it only wins when nothing else does)
  for pattern in \
    '^(FAILED|ERROR) ' \
    "$DIE_LINE" \
    '^E: ' \
    '(^|[^[:alnum:]_])(ERROR|Error|FAILED)([^[:alnum:]_]|$)' \
    '(^|[^[:alnum:]_])(error|failed|fatal|Traceback|cannot)([^[:alnum:]_]|$)'; do
    line=$(grep -m1 -E "$pattern" "$1" 2>/dev/null || true)
    [ -z "$line" ] || break
  done
  [ -n "$line" ] || line=$(tail -n 1 "$1" 2>/dev/null || true)
  printf '%s' "${line:0:300}"
}
summary() { # the cause in the last lines: each failed job, its first error line and its log
  local rc=$1 entry job log
  if [ "$rc" = 0 ]; then
    rm -rf "$logs"
    return
  fi
  # a step that ended the run under set -e is the failure when nothing else was recorded
  [ "${#failures[@]}" -gt 0 ] || failed "step: ${step_name:-start} (exit $rc; its output is just above)"
  echo "== CI FAILED (exit $rc): ${#failures[@]} failed job(s)"
  for entry in "${failures[@]}"; do
    job=${entry%%|*}
    log=${entry#*|}
    echo "failed: $job"
    if [ -n "$log" ]; then
      echo "  first error: $(first_error "$log")"
      echo "  log: $log"
    fi
  done
}
