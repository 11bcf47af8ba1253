#include "client/kvctl/wait_condition.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace rkv::kvctl {
namespace {

absl::Status Invalid(absl::string_view condition, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("wait ", condition, ": ", what));
}

// --groups and --copies: a count from 1.
absl::StatusOr<int> ParseCount(absl::string_view condition, absl::string_view flag,
                               const std::string& text) {
  int n = 0;
  if (!absl::SimpleAtoi(text, &n) || n < 1) {
    return Invalid(condition, absl::StrCat("--", flag, " takes a count from 1, not '", text, "'"));
  }
  return n;
}

// A comma-separated list of words from `allowed`.
absl::StatusOr<std::set<std::string>> ParseWords(absl::string_view condition,
                                                 absl::string_view flag, const std::string& text,
                                                 const std::set<std::string>& allowed) {
  std::set<std::string> out;
  for (absl::string_view w : absl::StrSplit(text, ',')) {
    if (!allowed.contains(std::string(w))) {
      return Invalid(condition, absl::StrCat("--", flag, " takes ", absl::StrJoin(allowed, ", "),
                                             " (comma-separated), not '", text, "'"));
    }
    out.insert(std::string(w));
  }
  return out;
}

bool Names(const CoordinatorReading& c, const std::string& id) {
  return c.address == id ||
         (!c.status.address().empty() && (c.status.id() == id || c.status.address() == id));
}

// "c1 127.0.0.1:7400 leader (term 3)"; "- 127.0.0.1:7401 unreachable".
std::string Describe(const CoordinatorReading& c) {
  const std::string id = c.status.id().empty() ? "-" : c.status.id();
  std::string out = absl::StrCat(id, " ", c.address, " ", CoordinatorRole(c.status));
  if (c.status.leading()) absl::StrAppend(&out, " (term ", c.status.term(), ")");
  return out;
}

std::string DescribeAll(const ClusterStatus& status) {
  if (status.coordinators.empty()) return "no coordinator listed";
  std::vector<std::string> parts;
  for (const auto& c : status.coordinators) parts.push_back(Describe(c));
  return absl::StrJoin(parts, ", ");
}

std::string NoMap(const ClusterStatus& status) {
  return absl::StrCat("no cluster map (", status.map_read.message(),
                      "); coordinators: ", DescribeAll(status));
}

Verdict JudgeServing(const WaitCondition& c, const ClusterStatus& status) {
  if (!status.map_read.ok()) return {false, NoMap(status)};
  const proto::ClusterMap& map = status.map;
  const int copies = c.copies > 0 ? c.copies : static_cast<int>(MapReplicas(map));
  int full = 0;
  bool reconfiguring = false;
  std::vector<std::string> groups;
  for (const auto& g : map.groups()) {
    const bool serving = g.state() == proto::GROUP_STATE_SERVING;
    full += serving && g.members_size() >= copies;
    reconfiguring |= g.state() == proto::GROUP_STATE_RECONFIGURING;
    groups.push_back(absl::StrCat(g.id(), " ", GroupStateName(g.state()), " (",
                                  absl::StrJoin(g.members(), ","), ")"));
  }
  const int want = c.groups > 0 ? c.groups : std::max(1, map.groups_size());
  const std::string seen =
      absl::StrCat(full, " of ", map.groups_size(), " groups serve with ", copies,
                   copies == 1 ? " copy" : " copies", map.groups_size() == 0 ? "" : ": ",
                   absl::StrJoin(groups, ", "), " (epoch ", map.epoch(), ")");
  return {full >= want && !reconfiguring, seen};
}

Verdict JudgeServer(const WaitCondition& c, const ClusterStatus& status) {
  if (!status.map_read.ok()) return {false, NoMap(status)};
  std::vector<std::string> ids;
  for (const auto& s : status.map.servers()) {
    if (s.id() != c.id) {
      ids.push_back(s.id());
      continue;
    }
    const std::string state = ServerStateName(s.state());
    return {c.accepted.contains(state),
            absl::StrCat(s.id(), " ", state, " (last heard ", s.last_heard_ms(), " ms ago, epoch ",
                         status.map.epoch(), ")")};
  }
  return {false, absl::StrCat(c.id, " is not in the map (servers: ",
                              ids.empty() ? "none" : absl::StrJoin(ids, ", "), ")")};
}

Verdict JudgeLeader(const WaitCondition& c, const ClusterStatus& status) {
  for (const auto& r : status.coordinators) {
    if (r.status.leading() && (c.id.empty() || Names(r, c.id))) return {true, Describe(r)};
  }
  return {false, DescribeAll(status)};
}

Verdict JudgeCoordinator(const WaitCondition& c, const ClusterStatus& status) {
  for (const auto& r : status.coordinators) {
    if (Names(r, c.id)) return {c.accepted.contains(CoordinatorRole(r.status)), Describe(r)};
  }
  return {false, absl::StrCat("no coordinator ", c.id, " among ", DescribeAll(status))};
}

}  // namespace

absl::StatusOr<WaitCondition> ParseWaitCondition(const std::vector<std::string>& args,
                                                 const WaitFlags& flags) {
  if (args.empty()) {
    return absl::InvalidArgumentError(
        "wait needs a condition: serving, server, leader or coordinator");
  }
  WaitCondition c;
  const std::string& name = args[0];
  c.text = absl::StrJoin(args, " ");
  // Which flags the condition takes; any other one given is a mistake.
  std::set<std::string> takes;
  if (name == "serving") {
    c.kind = WaitCondition::Kind::kServing;
    takes = {"groups", "copies"};
    if (args.size() != 1) return Invalid(name, "takes no argument (--groups=N, --copies=R)");
    if (!flags.groups.empty()) {
      auto n = ParseCount(name, "groups", flags.groups);
      if (!n.ok()) return n.status();
      c.groups = *n;
      absl::StrAppend(&c.text, " --groups=", flags.groups);
    }
    if (!flags.copies.empty()) {
      auto n = ParseCount(name, "copies", flags.copies);
      if (!n.ok()) return n.status();
      c.copies = *n;
      absl::StrAppend(&c.text, " --copies=", flags.copies);
    }
  } else if (name == "server") {
    c.kind = WaitCondition::Kind::kServer;
    takes = {"state"};
    if (args.size() != 2)
      return Invalid(name, "needs one server id: wait server ID --state=up|down");
    c.id = args[1];
    if (flags.state.empty()) return Invalid(name, "needs --state=up or --state=down");
    auto states = ParseWords(name, "state", flags.state, {"up", "down"});
    if (!states.ok()) return states.status();
    c.accepted = *std::move(states);
    absl::StrAppend(&c.text, " --state=", flags.state);
  } else if (name == "leader") {
    c.kind = WaitCondition::Kind::kLeader;
    if (args.size() > 2) return Invalid(name, "takes one coordinator id at most");
    if (args.size() == 2) c.id = args[1];
  } else if (name == "coordinator") {
    c.kind = WaitCondition::Kind::kCoordinator;
    takes = {"role"};
    if (args.size() != 2) {
      return Invalid(name, "needs one coordinator id or address: wait coordinator ID --role=R");
    }
    c.id = args[1];
    const std::string roles = flags.role.empty() ? "leader,standby" : flags.role;
    auto accepted =
        ParseWords(name, "role", roles, {"leader", "standby", "starting", "unreachable"});
    if (!accepted.ok()) return accepted.status();
    c.accepted = *std::move(accepted);
    absl::StrAppend(&c.text, " --role=", roles);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("wait: unknown condition '", name,
                                                   "' (serving, server, leader or coordinator)"));
  }
  const std::pair<const char*, const std::string*> given[] = {{"groups", &flags.groups},
                                                              {"copies", &flags.copies},
                                                              {"state", &flags.state},
                                                              {"role", &flags.role}};
  for (const auto& [flag, value] : given) {
    if (!value->empty() && !takes.contains(flag)) {
      return Invalid(name, absl::StrCat("does not take --", flag));
    }
  }
  return c;
}

absl::StatusOr<absl::Duration> ParseWaitTimeout(absl::string_view text) {
  absl::Duration d;
  if (!absl::ParseDuration(text, &d) || d < absl::ZeroDuration() || d == absl::InfiniteDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--timeout takes a duration such as 30s, 500ms or 2m, not '", text, "'"));
  }
  return d;
}

Verdict Judge(const WaitCondition& condition, const ClusterStatus& status) {
  switch (condition.kind) {
    case WaitCondition::Kind::kServing:
      return JudgeServing(condition, status);
    case WaitCondition::Kind::kServer:
      return JudgeServer(condition, status);
    case WaitCondition::Kind::kLeader:
      return JudgeLeader(condition, status);
    case WaitCondition::Kind::kCoordinator:
      return JudgeCoordinator(condition, status);
  }
  return {};
}

}  // namespace rkv::kvctl
