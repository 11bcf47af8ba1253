"""Checks deploy/: the Kubernetes manifests parse and ask for what an RDMA
node needs; every flag the manifests and systemd units pass is one the
programs know (from their --help: kvserver, kvcoord, and etcd where it is
installed); every variable a unit uses is set in its example environment
file; etcd runs as an odd number of members that elect a leader within the
coordinators' tolerance, over TLS, and only the kvcoords are given etcd's
endpoints and a client certificate; the Dockerfiles install packages only
through scripts/install-deps.sh (rkv's) or by name from Debian (etcd's);
the Prometheus scrape config parses, and the Grafana dashboard shows every
metric kvserver and kvcoord export and no other.

    python3 tests/deploy/check.py BIN_DIR
"""
import json
import pathlib
import re
import shutil
import subprocess
import sys

import yaml

root = pathlib.Path(__file__).resolve().parents[2]
bin_dir = pathlib.Path(sys.argv[1])
errors = []
notes = []


def check(ok, what):
    if not ok:
        errors.append(what)


def known_flags(program):
    out = subprocess.run([bin_dir / program, "--helpfull"], capture_output=True, text=True)
    return set(re.findall(r"--([a-z_]+)", out.stdout + out.stderr))


flags = {p: known_flags(p) for p in ("kvserver", "kvcoord")}
etcd = shutil.which("etcd")
if etcd:
    out = subprocess.run([etcd, "--help"], capture_output=True, text=True)
    flags["etcd"] = set(re.findall(r"--([a-z0-9-]+)", out.stdout + out.stderr))
else:
    notes.append("no etcd here: etcd's flags and variables not checked against it")


def check_args(program, args, where):
    if program not in flags:
        return
    for a in args:
        m = re.match(r"--([a-z0-9_-]+)", a)
        if m:
            name = m.group(1) if program == "etcd" else m.group(1).replace("-", "_")
            check(name in flags[program], f"{where}: {program} has no flag --{m.group(1)}")


def arg_map(args):
    """--name=value pairs of an argument list (names with _ as -)."""
    out = {}
    for a in args:
        m = re.match(r"--([a-z0-9_-]+)=(.*)$", a)
        if m:
            out[m.group(1).replace("_", "-")] = m.group(2)
    return out


def check_etcd_timing(heartbeat, election, where):
    """etcd refuses an election timeout under 5 heartbeats; the coordinators
    need a new leader within about a second (docs/DEPLOY.md)."""
    try:
        h, e = int(heartbeat), int(election)
    except (TypeError, ValueError):
        check(False, f"{where}: no numeric heartbeat interval and election timeout")
        return
    check(e >= 5 * h, f"{where}: election timeout {e} ms under 5 heartbeats of {h} ms")
    check(e <= 1000, f"{where}: election timeout {e} ms: a lost etcd leader is replaced too late")


def check_pod_env(container, where):
    env = {e["name"] for e in container.get("env", [])}
    for a in container.get("args", []):
        for var in re.findall(r"\$\(([A-Z_]+)\)", a):
            check(var in env, f"{where}: $({var}) is not set")
    return env


# Kubernetes.
docs = list(yaml.safe_load_all((root / "deploy/k8s/rkv.yaml").read_text()))
objects = {}
for d in docs:
    check(d and "apiVersion" in d and "kind" in d and "metadata" in d, f"k8s: incomplete document {d}")
    objects[(d["kind"], d["metadata"]["name"])] = d
for key in (("Namespace", "rkv"), ("ConfigMap", "rkv"), ("Service", "etcd"), ("StatefulSet", "etcd"),
            ("Deployment", "kvcoord"), ("Service", "kvcoord"), ("StatefulSet", "kvserver")):
    check(key in objects, f"k8s: no {key[0]} {key[1]}")
config = objects[("ConfigMap", "rkv")]["data"]

# etcd: an odd number of members, all named in --initial-cluster, started
# together, found through a headless Service before they are ready, TLS for
# clients and peers, and the timing the coordinators need.
etcd_sts = objects[("StatefulSet", "etcd")]
members = etcd_sts["spec"]["replicas"]
check(members >= 3 and members % 2 == 1, f"k8s etcd: {members} members (3 or 5)")
check(etcd_sts["spec"].get("podManagementPolicy") == "Parallel",
      "k8s etcd: members must start together (podManagementPolicy: Parallel)")
check(etcd_sts["spec"].get("volumeClaimTemplates"), "k8s etcd: no persistent volume")
etcd_svc = objects[("Service", "etcd")]["spec"]
check(etcd_svc.get("clusterIP") == "None", "k8s etcd: the Service must be headless")
check(etcd_svc.get("publishNotReadyAddresses") is True,
      "k8s etcd: peers must resolve before they are ready (publishNotReadyAddresses)")
check(etcd_sts["spec"]["serviceName"] == "etcd", "k8s etcd: serviceName")
e = etcd_sts["spec"]["template"]["spec"]["containers"][0]
check_args("etcd", e["args"], "k8s etcd")
check_pod_env(e, "k8s etcd")
ea = arg_map(e["args"])
domain = "etcd.rkv.svc.cluster.local"
initial = ea.get("initial-cluster", "")
for i in range(members):
    check(f"etcd-{i}=https://etcd-{i}.{domain}:2380" in initial,
          f"k8s etcd: --initial-cluster lacks etcd-{i}")
check(initial.count("=https://") == members, "k8s etcd: --initial-cluster names other members")
for f in ("listen-client-urls", "advertise-client-urls", "listen-peer-urls", "initial-advertise-peer-urls"):
    check(ea.get(f, "").startswith("https://"), f"k8s etcd: --{f} is not TLS")
for f in ("client-cert-auth", "peer-client-cert-auth"):
    check(ea.get(f) == "true", f"k8s etcd: --{f}=true")
check_etcd_timing(ea.get("heartbeat-interval"), ea.get("election-timeout"), "k8s etcd")
check("auto-compaction-retention" in ea, "k8s etcd: no auto-compaction")
check(e.get("image"), "k8s etcd: no image")
pdb = objects.get(("PodDisruptionBudget", "etcd"))
check(pdb and pdb["spec"].get("minAvailable") == members // 2 + 1,
      "k8s etcd: a PodDisruptionBudget keeping the quorum")
endpoints = config.get("etcd_endpoints", "").split(",")
check(sorted(endpoints) == sorted(f"etcd-{i}.{domain}:2379" for i in range(members)),
      "k8s: ConfigMap etcd_endpoints is not every etcd member's client address")

# kvcoord: two or more, each advertising its pod IP, with etcd's endpoints
# and a client certificate; no state file (exclusive with --etcd).
coord = objects[("Deployment", "kvcoord")]
check(coord["spec"]["replicas"] >= 2, "k8s: kvcoord needs two replicas or more")
c = coord["spec"]["template"]["spec"]["containers"][0]
check(c["command"] == ["kvcoord"], "k8s: kvcoord's command")
check_args("kvcoord", c["args"], "k8s kvcoord")
env = check_pod_env(c, "k8s kvcoord")
ca = arg_map(c["args"])
check(ca.get("etcd") == "$(ETCD_ENDPOINTS)", "k8s kvcoord: --etcd is not the ConfigMap's etcd_endpoints")
check("state-file" not in ca, "k8s kvcoord: --state_file and --etcd exclude each other")
check(ca.get("advertise", "").startswith("$(POD_IP):"), "k8s kvcoord: --advertise is not its pod IP")
pod_ip = [x for x in c["env"] if x["name"] == "POD_IP"]
check(pod_ip and pod_ip[0]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP",
      "k8s kvcoord: POD_IP is not the downward API's status.podIP")
check("id" in ca, "k8s kvcoord: no --id")
for f in ("etcd-cacert", "etcd-cert", "etcd-key"):
    check(ca.get(f), f"k8s kvcoord: no --{f.replace('-', '_')}")
coord_svc = objects[("Service", "kvcoord")]["spec"]
check(coord_svc["ports"][0]["port"] == 7400, "k8s: kvcoord Service port")
check(coord_svc.get("clusterIP") == "None",
      "k8s: the kvcoord Service must be headless (its name resolves to every kvcoord)")
check(config["coordinator"].startswith("kvcoord."), "k8s: ConfigMap coordinator is not the Service")

sts = objects[("StatefulSet", "kvserver")]
pod = sts["spec"]["template"]["spec"]
s = pod["containers"][0]
check(pod.get("hostNetwork") is True, "k8s: kvserver needs hostNetwork")
check("IPC_LOCK" in s["securityContext"]["capabilities"]["add"], "k8s: kvserver needs IPC_LOCK")
req = s["resources"]["requests"]
check(any(k.startswith("hugepages-") for k in req), "k8s: kvserver requests no hugepages")
check(any(k.startswith("rdma/") for k in req), "k8s: kvserver requests no RDMA device")
check(sts["spec"].get("volumeClaimTemplates"), "k8s: kvserver has no persistent volume")
check_args("kvserver", s["args"], "k8s kvserver")
check_pod_env(s, "k8s kvserver")
mounts = {m["mountPath"] for m in s["volumeMounts"]}
check(config["region_dir"] in mounts, "k8s: region_dir is not a mounted volume")

# Only the kvcoords reach etcd: nothing else is given its endpoints or a
# certificate for it.
for (kind, name), d in objects.items():
    if kind not in ("Deployment", "StatefulSet") or name in ("kvcoord", "etcd"):
        continue
    text = yaml.safe_dump(d)
    check("etcd" not in text, f"k8s: {kind} {name} is given something of etcd's")

# systemd units and their environment files.
def env_file(name):
    text = (root / "deploy/systemd" / name).read_text()
    return dict(re.findall(r"^([A-Z_]+)=(.*)$", text, re.M))


for unit, program, env_name in (("kvcoord.service", "kvcoord", "kvcoord.env"),
                                ("kvserver@.service", "kvserver", "kvserver.env")):
    text = (root / "deploy/systemd" / unit).read_text()
    exec_start = re.search(r"^ExecStart=(\S+) (.*)$", text, re.M)
    check(exec_start and exec_start.group(1).endswith("/" + program), f"{unit}: ExecStart")
    check_args(program, exec_start.group(2).split(), unit)
    defined = env_file(env_name)
    for var in re.findall(r"\$\{?([A-Z_]+)\}?", exec_start.group(2)):
        check(var in defined, f"{unit}: ${var} is not in {env_name}")
    check(re.search(r"^Restart=on-failure$", text, re.M), f"{unit}: no restart policy")
unit = (root / "deploy/systemd/kvserver@.service").read_text()
check("LimitMEMLOCK=infinity" in unit, "kvserver@.service: LimitMEMLOCK=infinity")
unit = (root / "deploy/systemd/kvcoord.service").read_text()
ua = arg_map(re.search(r"^ExecStart=\S+ (.*)$", unit, re.M).group(1).split())
check("state-file" not in ua, "kvcoord.service: --state_file and --etcd exclude each other")
for f in ("etcd", "etcd-prefix", "etcd-cacert", "etcd-cert", "etcd-key", "advertise", "id"):
    check(f in ua, f"kvcoord.service: no --{f.replace('-', '_')}")
coord_env = env_file("kvcoord.env")
check(all(coord_env.get(v) for v in ("RKV_ETCD_CACERT", "RKV_ETCD_CERT", "RKV_ETCD_KEY")),
      "kvcoord.env: the example talks to etcd in plain text")
server_env = env_file("kvserver.env")
check(re.fullmatch(r"[^,\s]+:\d+(,[^,\s]+:\d+)+", server_env.get("RKV_COORDINATOR", "")),
      "kvserver.env: RKV_COORDINATOR is not the list of every kvcoord")
check(not any("ETCD" in k for k in server_env), "kvserver.env: servers never talk to etcd")

# /etc/default/etcd for Debian's etcd.service: every variable an etcd flag,
# this member in the initial cluster, TLS, the timing, compaction.
etcd_env = env_file("etcd.default")
if "etcd" in flags:
    for var in etcd_env:
        check(var.startswith("ETCD_") and var[5:].lower().replace("_", "-") in flags["etcd"],
              f"etcd.default: {var} is no etcd flag")
initial = etcd_env.get("ETCD_INITIAL_CLUSTER", "").split(",")
check(len(initial) >= 3 and len(initial) % 2 == 1, "etcd.default: 3 or 5 members")
check(f"{etcd_env.get('ETCD_NAME')}={etcd_env.get('ETCD_INITIAL_ADVERTISE_PEER_URLS')}" in initial,
      "etcd.default: this member is not in ETCD_INITIAL_CLUSTER as it advertises itself")
for var in ("ETCD_LISTEN_CLIENT_URLS", "ETCD_ADVERTISE_CLIENT_URLS", "ETCD_LISTEN_PEER_URLS",
            "ETCD_INITIAL_ADVERTISE_PEER_URLS"):
    check(etcd_env.get(var, "").startswith("https://"), f"etcd.default: {var} is not TLS")
for var in ("ETCD_CLIENT_CERT_AUTH", "ETCD_PEER_CLIENT_CERT_AUTH"):
    check(etcd_env.get(var) == "true", f"etcd.default: {var}=true")
check_etcd_timing(etcd_env.get("ETCD_HEARTBEAT_INTERVAL"), etcd_env.get("ETCD_ELECTION_TIMEOUT"),
                  "etcd.default")
check(etcd_env.get("ETCD_AUTO_COMPACTION_RETENTION"), "etcd.default: no auto-compaction")
client_urls = {u.split("://")[1] for u in etcd_env.get("ETCD_ADVERTISE_CLIENT_URLS", "").split(",")}
check(client_urls <= set(coord_env.get("RKV_ETCD", "").split(",")),
      "kvcoord.env: RKV_ETCD does not list the example member's client address")
check(len(coord_env.get("RKV_ETCD", "").split(",")) == len(initial),
      "kvcoord.env: RKV_ETCD does not list every member")

# The Dockerfiles.
docker = (root / "deploy/docker/Dockerfile").read_text()
check(docker.count("FROM debian:12") == 2, "Dockerfile: two stages on debian:12")
check("apt-get" not in docker, "Dockerfile: packages come only through scripts/install-deps.sh")
check("install-deps.sh --runtime" in docker, "Dockerfile: the final stage installs the runtime set")
build_stage = docker.split("FROM debian:12")[1]
deps_at = build_stage.find("bash scripts/install-deps.sh")
check(0 <= deps_at < build_stage.find("scripts/build.sh"),
      "Dockerfile: the build stage runs install-deps.sh (packages, etcd's .proto files) before building")
for src in re.findall(r"^COPY (?!--from)(\S+) ", docker, re.M):
    check(src == "." or (root / src).exists(), f"Dockerfile: COPY of {src}, which is not in the tree")
if (root / "scripts/lib/etcd_protos.sh").exists():
    check("COPY scripts/lib/etcd_protos.sh" in build_stage.split("RUN bash scripts/install-deps.sh")[0],
          "Dockerfile: install-deps.sh runs without scripts/lib/etcd_protos.sh beside it")
etcd_docker = (root / "deploy/docker/etcd.Dockerfile").read_text()
check(etcd_docker.count("FROM debian:12") == 1, "etcd.Dockerfile: one stage on debian:12")
installs = re.findall(r"apt-get install[^\n]*\n?[^\n]*", etcd_docker)
named = set(re.findall(r"\b(etcd-[a-z]+)\b", " ".join(installs)))
check(named == {"etcd-server", "etcd-client"}, "etcd.Dockerfile: installs Debian's etcd-server and etcd-client")

# Monitoring: the scrape config parses and scrapes kvcoord and kvserver;
# the dashboard asks only for metrics the programs export (the family
# names their /metrics renderers spell out).
prom = yaml.safe_load((root / "deploy/prometheus/prometheus.yml").read_text())
jobs = {c["job_name"]: c for c in prom["scrape_configs"]}
check(set(jobs) == {"rkv-kvcoord", "rkv-kvserver"},
      "prometheus.yml: one job for the kvcoords and one for the kvservers")
exported = set()
for src in ("server/kvserver/server_metrics.cc", "server/kvcoord/coordinator_metrics.cc"):
    exported |= set(re.findall(r'"(rkv_[a-z_]+)"', (root / src).read_text()))
dashboard = json.loads((root / "deploy/grafana/rkv.json").read_text())
asked = set()
for panel in dashboard["panels"]:
    for target in panel["targets"]:
        asked |= {re.sub(r"_(bucket|sum|count)$", "", m)
                  for m in re.findall(r"\brkv_[a-z_]+", target["expr"])}
check(asked and asked <= exported,
      f"grafana/rkv.json: asks for metrics nobody exports: {sorted(asked - exported)}")
check(exported <= asked, f"grafana/rkv.json: shows nothing of {sorted(exported - asked)}")

for n in notes:
    print("deploy check:", n)
for e in errors:
    print("deploy check:", e)
print("deploy check:", "ok" if not errors else f"{len(errors)} problems")
sys.exit(1 if errors else 0)
