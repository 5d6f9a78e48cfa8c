# Sourced by the GPU-machine scripts here: step NAME COMMAND... runs COMMAND with its output in
# $WORK/logs/NAME.txt and one line of exit status and time in $summary (the last 25 lines of a
# failed step's log there too).
step() {
  local name=$1 start rc
  shift
  start=$(date +%s)
  "$@" > "$WORK/logs/$name.txt" 2>&1
  rc=$?
  echo "$name: exit $rc in $(( $(date +%s) - start )) s" | tee -a "$summary"
  [ "$rc" -eq 0 ] || tail -n 25 "$WORK/logs/$name.txt" | tee -a "$summary"
  return "$rc"
}
