"""Checks deploy/: the Kubernetes manifests parse and ask for what an RDMA
node needs, every flag the manifests and systemd units pass is one the
programs know (from their --help), every variable a unit uses is set in its
example environment file, and the Dockerfile installs packages only through
scripts/install-deps.sh.

    python3 tests/deploy/check.py BIN_DIR
"""
import pathlib
import re
import subprocess
import sys

import yaml

root = pathlib.Path(__file__).resolve().parents[2]
bin_dir = pathlib.Path(sys.argv[1])
errors = []


def check(ok, what):
    if not ok:
        errors.append(what)


def known_flags(program):
    out = subprocess.run([bin_dir / program, "--helpfull"], capture_output=True, text=True)
    return set(re.findall(r"--([a-z_]+)", out.stdout + out.stderr))


flags = {p: known_flags(p) for p in ("kvserver", "kvcoord")}


def check_args(program, args, where):
    for a in args:
        m = re.match(r"--([a-z_-]+)", a)
        if m:
            check(m.group(1).replace("-", "_") in flags[program],
                  f"{where}: {program} has no flag --{m.group(1)}")


# Kubernetes.
docs = list(yaml.safe_load_all((root / "deploy/k8s/rkv.yaml").read_text()))
by_kind = {}
for d in docs:
    check(d and "apiVersion" in d and "kind" in d and "metadata" in d, f"k8s: incomplete document {d}")
    by_kind.setdefault(d["kind"], []).append(d)
for kind in ("Namespace", "ConfigMap", "Deployment", "Service", "StatefulSet"):
    check(kind in by_kind, f"k8s: no {kind}")
config = by_kind["ConfigMap"][0]["data"]
coord = by_kind["Deployment"][0]
check(coord["metadata"]["name"] == "kvcoord", "k8s: the Deployment is not kvcoord")
c = coord["spec"]["template"]["spec"]["containers"][0]
check(c["command"] == ["kvcoord"], "k8s: kvcoord's command")
check_args("kvcoord", c["args"], "k8s kvcoord")
check(by_kind["Service"][0]["spec"]["ports"][0]["port"] == 7400, "k8s: kvcoord Service port")
check(config["coordinator"].startswith("kvcoord."), "k8s: ConfigMap coordinator is not the Service")

sts = by_kind["StatefulSet"][0]
pod = sts["spec"]["template"]["spec"]
s = pod["containers"][0]
check(pod.get("hostNetwork") is True, "k8s: kvserver needs hostNetwork")
check("IPC_LOCK" in s["securityContext"]["capabilities"]["add"], "k8s: kvserver needs IPC_LOCK")
req = s["resources"]["requests"]
check(any(k.startswith("hugepages-") for k in req), "k8s: kvserver requests no hugepages")
check(any(k.startswith("rdma/") for k in req), "k8s: kvserver requests no RDMA device")
check(sts["spec"].get("volumeClaimTemplates"), "k8s: kvserver has no persistent volume")
check_args("kvserver", s["args"], "k8s kvserver")
env = {e["name"] for e in s["env"]}
for a in s["args"]:
    for var in re.findall(r"\$\(([A-Z_]+)\)", a):
        check(var in env, f"k8s kvserver: $({var}) is not set")
mounts = {m["mountPath"] for m in s["volumeMounts"]}
check(config["region_dir"] in mounts, "k8s: region_dir is not a mounted volume")

# systemd units and their environment files.
for unit, program, env_file in (("kvcoord.service", "kvcoord", "kvcoord.env"),
                                ("kvserver@.service", "kvserver", "kvserver.env")):
    text = (root / "deploy/systemd" / unit).read_text()
    exec_start = re.search(r"^ExecStart=(\S+) (.*)$", text, re.M)
    check(exec_start and exec_start.group(1).endswith("/" + program), f"{unit}: ExecStart")
    check_args(program, exec_start.group(2).split(), unit)
    defined = set(re.findall(r"^([A-Z_]+)=", (root / "deploy/systemd" / env_file).read_text(), re.M))
    for var in re.findall(r"\$\{?([A-Z_]+)\}?", exec_start.group(2)):
        check(var in defined, f"{unit}: ${var} is not in {env_file}")
    check(re.search(r"^Restart=on-failure$", text, re.M), f"{unit}: no restart policy")
unit = (root / "deploy/systemd/kvserver@.service").read_text()
check("LimitMEMLOCK=infinity" in unit, "kvserver@.service: LimitMEMLOCK=infinity")

# The Dockerfile.
docker = (root / "deploy/docker/Dockerfile").read_text()
check(docker.count("FROM debian:12") == 2, "Dockerfile: two stages on debian:12")
check("apt-get" not in docker, "Dockerfile: packages come only through scripts/install-deps.sh")
check("install-deps.sh --runtime" in docker, "Dockerfile: the final stage installs the runtime set")

for e in errors:
    print("deploy check:", e)
print("deploy check:", "ok" if not errors else f"{len(errors)} problems")
sys.exit(1 if errors else 0)
