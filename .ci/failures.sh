# Sourced by .ci/run: a failed run names its cause in its last lines (issue 28): every failed job or
# step, the first line of its log that reads like an error, and the log's path. Needs $logs (a folder
# that outlives the run when it fails) and $step_name (the step running when set -e ended the run).
# shellcheck shell=bash
failures=() # "job|log" of every failed job or step, for the summary in the last lines
failed() { # JOB [LOG]: remember a failure for the summary
  failures+=("$1|${2:-}")
}
first_error() { # LOG -> its first line that reads like an error (else its last line)
  local line
  # pytest's short summary names the failing test first
  line=$(grep -m1 -E '^(FAILED|ERROR) ' "$1" 2>/dev/null || true)
  [ -n "$line" ] || line=$(grep -m1 -E '(^|[^[:alnum:]_])(ERROR|Error|error|FAILED|failed|fatal|Traceback|cannot)([^[:alnum:]_]|$)' "$1" 2>/dev/null || true)
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
