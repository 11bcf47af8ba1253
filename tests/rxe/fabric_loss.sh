#!/usr/bin/env bash
# The verbs fabric under 1 % packet loss on the rxe link of the rdma-vm
# guest: pipelined rounds of READs, WRITEs and CASes with reused buffers
# must never complete with a wrong or missing result. Soft-RoCE completes a READ
# or atomic without its response now and then under loss; the backend must
# catch that and fail the queue pair (the test reconnects and goes on).
#
#   tests/rxe/fabric_loss.sh FABRIC_CONFORMANCE_TEST
set -euo pipefail
test_bin="${1:?usage: fabric_loss.sh FABRIC_CONFORMANCE_TEST}"
: "${RKV_RXE_SERVER_ADDR:?not in the rdma-vm guest (scripts/rdma-vm.sh sets RKV_RXE_*)}"
cleanup() {
  tc qdisc del dev veth0 root 2>/dev/null || true
  tc qdisc del dev veth1 root 2>/dev/null || true
}
trap cleanup EXIT
# No jitter: netem would reorder, and RoCE expects packets in order.
tc qdisc add dev veth0 root netem loss 1% delay 2ms
tc qdisc add dev veth1 root netem loss 1% delay 2ms
RKV_TEST_LOSSY_NETWORK=1 "$test_bin" --gtest_repeat=3 \
  --gtest_filter='*PipelinedRoundsWithReusedBuffersGetTheirOwnResults/verbs'
