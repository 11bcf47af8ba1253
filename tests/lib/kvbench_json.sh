# Sourced by test scripts: reads kvbench's --json output.

# kvbench_field FILE PHASE KEY: a number from the phase's object ("load",
# "run" or "check"), its "verify" object included.
kvbench_field() {
  grep -o "\"$2\": {\"seconds\"[^}]*}[^}]*}" "$1" | head -1 | grep -o "\"$3\": [0-9]*" |
    head -1 | awk '{print $2}'
}
