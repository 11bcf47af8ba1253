"""The mutations scripts/mutations.sh applies: each undoes one fix or one
safeguard, as a replacement of one exact piece of a source file.

  mutation.py list | describe NAME | apply NAME | restore
"""
import pathlib
import subprocess
import sys

# name: (file, what it undoes, the exact text, what replaces it)
MUTATIONS = {
    "takeover-after-a-write": (
        "server/kvcoord/etcd_state_store.cc",
        "a standby takes over after seeing a new write (TryLead no longer looks again)",
        "    if (!own && !seen_value_.empty() && clock_() < seen_at_ + takeover_after_) return;\n",
        "",
    ),
    "commit-of-an-earlier-term": (
        "server/kvcoord/etcd_state_store.cc",
        "a commit prepared under an earlier leadership is stored (Commit checks no term)",
        "if (!leading_ || state.term() != term_) {",
        "if (!leading_) {",
    ),
    "orders-after-a-refused-change": (
        "server/kvcoord/coordinator.cc",
        "the push is ordered although etcd refused the change that hands it to the pusher",
        "    if (!CommitLocked(std::move(before))) return absl::OkStatus();\n    views = ViewsLocked();",
        "    if (!CommitLocked(std::move(before))) groups_.BeginPush(req.id(), views);\n"
        "    views = ViewsLocked();",
    ),
    "no-self-fence": (
        "server/kvserver/agent_core.cc",
        "a replicated server no longer fences itself when its lease cannot be renewed in time",
        '  if (replicas_ > 1 && registered_ && now >= FenceBy()) Fence("the lease could not be renewed");\n',
        "",
    ),
    "cancelled-push-not-restarted": (
        "server/kvserver/agent_core.cc",
        "a push cancelled while it ran is taken for the order when the order comes back",
        "if (push_ != nullptr && !push_->cancelled() && push_->Carries(wanted)) return;",
        "if (push_ != nullptr && push_->Carries(wanted)) return;",
    ),
    "retry-unknown-writes": (
        "client/cluster/retry_policy.cc",
        "the cluster client retries a write whose outcome is unknown",
        "(op.type == OpType::kGet || !OutcomeUnknown(failure))",
        "true",
    ),
}

STATE = pathlib.Path("build/.mutation")


def main(argv):
    cmd = argv[1] if len(argv) > 1 else ""
    if cmd == "list":
        print("\n".join(MUTATIONS))
    elif cmd == "describe":
        print(MUTATIONS[argv[2]][1])
    elif cmd == "apply":
        path, _, old, new = MUTATIONS[argv[2]]
        if subprocess.run(["git", "diff", "--quiet", "--", path]).returncode != 0:
            sys.exit(f"mutation.py: {path} has uncommitted changes")
        text = pathlib.Path(path).read_text()
        if text.count(old) != 1:
            sys.exit(f"mutation.py: {argv[2]}: its text is not in {path} exactly once")
        STATE.write_text(path)
        pathlib.Path(path).write_text(text.replace(old, new))
    elif cmd == "restore":
        if STATE.exists():
            subprocess.run(["git", "checkout", "--", STATE.read_text()], check=True)
            STATE.unlink()
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
