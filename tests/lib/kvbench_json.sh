# Sourced by test scripts: reads kvbench's --json output, as JSON.

# kvbench_field FILE PHASE KEY: a number from the phase's object ("load",
# "run" or "check"), its "verify" object included; empty when absent.
kvbench_field() {
  python3 - "$@" <<'EOF'
import json, sys
phase = json.load(open(sys.argv[1])).get(sys.argv[2], {})
value = phase.get(sys.argv[3], phase.get("verify", {}).get(sys.argv[3]))
print("" if value is None else value)
EOF
}
