#!/usr/bin/env python3
"""Offline check of the deployment files: deploy/k8s, deploy/slurm, deploy/systemd
and deploy/Dockerfile. Nothing is deployed; the daemons are only asked for their
flags (--helpfull) and the scheduler for the ConfigMap's job spec.

  tests/deploy_check.py [ROOT]     ROOT: the repository (binaries in bazel-bin/)
                                   or a Bazel runfiles tree (binaries beside)

Prints what it checked and every problem; exits 1 if there is any.
"""
import glob, json, os, re, shutil, subprocess, sys, tempfile, time
import yaml

ROOT = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
BINARIES = {"ps_scheduler": "scheduler/ps_scheduler", "ps_server": "server/ps_server",
            "ps_worker": "worker/ps_worker", "psctl": "tools/psctl"}
DAEMONS = ("ps_scheduler", "ps_server", "ps_worker")
FILE_FLAGS = ("job", "auth_token_file", "tls_cert", "tls_key", "tls_ca", "checkpoint_dir")
problems, checked = [], []


def problem(where, msg):
    problems.append(f"{os.path.relpath(where, ROOT)}: {msg}")


def binary(name):
    for base in (ROOT, os.path.join(ROOT, "bazel-bin")):
        if os.access(os.path.join(base, BINARIES[name]), os.X_OK):
            return os.path.join(base, BINARIES[name])
    sys.exit(f"deploy_check: {BINARIES[name]} not found under {ROOT} (bazel build it first)")


def defined_flags(name):
    out = subprocess.run([binary(name), "--helpfull"], capture_output=True, text=True)
    # Abseil: "    --name (help); default: ...", continuation lines indented deeper.
    return set(re.findall(r"^    --(\w+) \(", out.stdout + out.stderr, re.M)) | {"help", "helpfull"}


FLAGS = {name: defined_flags(name) for name in BINARIES}
CMD_RE = re.compile(r"\b(ps_scheduler|ps_server|ps_worker|psctl)\b([^\n;&|]*)")
FLAG_RE = re.compile(r"(?<![\w-])--([A-Za-z][\w-]*)(?:=(\S*))?")


def code(text):
    """The text without comment lines, continued lines joined."""
    return "\n".join(l for l in text.split("\n") if not l.lstrip().startswith(("#", ";"))).replace("\\\n", " ")


def commands(text):
    """(binary, {flag: value}) for each command line naming a daemon."""
    for m in CMD_RE.finditer(code(text)):
        yield m.group(1), {k: v.strip("\"'") for k, v in FLAG_RE.findall(m.group(2))}


def check_flags(where, name, flags):
    for flag in flags:
        checked.append(flag)
        if flag not in FLAGS[name] and not (flag.startswith("no") and flag[2:] in FLAGS[name]):
            problem(where, f"{name} has no flag --{flag}")


def check_text_commands(where, text, want=1):
    found = list(commands(text))
    for name, flags in found:
        check_flags(where, name, flags)
    if len(found) < want:
        problem(where, f"names {len(found)} commands running {', '.join(BINARIES)}, wants {want}")
    return found


def port_of(value):
    return int(value.rsplit(":", 1)[-1]) if value and re.fullmatch(r"\d+", value.rsplit(":", 1)[-1]) else None


def check_k8s():
    kdir = os.path.join(ROOT, "deploy/k8s")
    docs = []
    for f in sorted(glob.glob(os.path.join(kdir, "*.yaml"))):
        try:
            docs += [(f, d) for d in yaml.safe_load_all(open(f)) if d]
        except yaml.YAMLError as e:
            problem(f, "YAML does not parse: " + " ".join(str(e).split()))
    kust = [(f, d) for f, d in docs if d.get("kind") == "Kustomization"]
    for f, d in kust:
        listed = set(d.get("resources", []))
        on_disk = {os.path.basename(x) for x in glob.glob(os.path.join(kdir, "*.yaml"))} - {"kustomization.yaml"}
        for r in listed ^ on_disk:
            problem(f, f"{r} is {'listed but missing' if r in listed else 'not listed in resources'}")
    objs = [(f, d) for f, d in docs if d.get("kind") != "Kustomization"]
    services, workloads, specs = {}, [], {}
    for f, d in objs:
        meta = d.get("metadata") or {}
        for key in ("apiVersion", "kind"):
            if not d.get(key):
                problem(f, f"a document without {key}")
        if not meta.get("name"):
            problem(f, f"a {d.get('kind')} without metadata.name")
        if d.get("kind") != "Namespace" and meta.get("namespace") != "pstrain":
            problem(f, f"{d.get('kind')} {meta.get('name')}: namespace is {meta.get('namespace')}, not pstrain")
        if d.get("kind") == "Service":
            services[meta.get("name")] = (f, d)
        elif d.get("kind") in ("Deployment", "StatefulSet", "Job"):
            workloads.append((f, d))
        elif d.get("kind") == "ConfigMap":
            specs.update({f"{f} ConfigMap {meta.get('name')} key {k}": v
                          for k, v in (d.get("data") or {}).items() if k.endswith(".pbtxt")})
    pods = {}  # binary -> (file, workload, pod labels, {port name: number})
    for f, w in workloads:
        where, spec = f"{f} {w['kind']} {w['metadata'].get('name')}", w.get("spec") or {}
        tpl = spec.get("template") or {}
        pod, labels = tpl.get("spec") or {}, (tpl.get("metadata") or {}).get("labels") or {}
        notes = (tpl.get("metadata") or {}).get("annotations") or {}
        sel = (spec.get("selector") or {}).get("matchLabels") or {}
        if any(labels.get(k) != v for k, v in sel.items()):
            problem(where, "selector.matchLabels do not match the pod template's labels")
        if w["kind"] == "StatefulSet":
            svc = services.get(spec.get("serviceName"))
            if not svc or svc[1]["spec"].get("clusterIP") != "None":
                problem(where, f"serviceName {spec.get('serviceName')} is not a headless Service (clusterIP: None)")
        volumes = {v.get("name") for v in pod.get("volumes") or []}
        if not pod.get("containers"):
            problem(where, "no spec.template.spec.containers")
        for c in pod.get("containers") or []:
            cw = f"{where} container {c.get('name')}"
            if not c.get("image") or not (c.get("command") or c.get("args")):
                problem(cw, "needs image and command/args")
            argv = [str(x) for x in (c.get("command") or []) + (c.get("args") or [])]
            text = " ".join(argv)  # exec form: one command line
            if argv[:2] in (["/bin/sh", "-c"], ["sh", "-c"], ["/bin/bash", "-c"]) and len(argv) > 2:
                text = argv[2]  # a shell script
                sh = subprocess.run([argv[0], "-n", "-c", text], capture_output=True, text=True)
                if sh.returncode:
                    problem(cw, f"shell script does not parse: {sh.stderr.strip()}")
            ports = {p.get("name"): p.get("containerPort") for p in c.get("ports") or []}
            for name, flags in check_text_commands(cw, text):
                pods[name] = (f, w, labels, ports)
                for flag in ("listen", "metrics_port"):
                    if flag in flags and port_of(flags[flag]) not in ports.values():
                        problem(cw, f"--{flag}={flags[flag]}: port not among containerPorts {sorted(ports.values())}")
                if "metrics_port" in flags:
                    want = {"prometheus.io/scrape": "true", "prometheus.io/port": str(port_of(flags["metrics_port"])),
                            "prometheus.io/path": "/metrics"}
                    for k, v in want.items():
                        if str(notes.get(k)) != v:
                            problem(cw, f"annotation {k} is {notes.get(k)}, want {v}")
                mounts = [m.get("mountPath", "").rstrip("/") for m in c.get("volumeMounts") or []]
                for flag in FILE_FLAGS:
                    if flag in flags and not any(flags[flag] == m or flags[flag].startswith(m + "/") for m in mounts):
                        problem(cw, f"--{flag}={flags[flag]} is on no volumeMount")
                if name == "ps_worker":
                    res = c.get("resources") or {}
                    if not any("nvidia.com/gpu" in (res.get(k) or {}) for k in ("limits", "requests")):
                        problem(cw, "a worker without an nvidia.com/gpu resource")
                    if not flags.get("device", "").startswith("cuda"):
                        problem(cw, "a GPU worker without --device=cuda")
                for kind in ("readinessProbe", "livenessProbe", "startupProbe"):
                    probe = c.get(kind) or {}
                    for how in ("tcpSocket", "httpGet", "grpc"):
                        if how in probe and probe[how].get("port") not in list(ports) + list(ports.values()):
                            problem(cw, f"{kind} port {probe[how].get('port')} is no containerPort")
                    if "httpGet" in probe and "auth_token_file" in flags:
                        problem(cw, f"{kind} is an HTTP probe, but HTTP needs the bearer token")
            for m in c.get("volumeMounts") or []:
                if m.get("name") not in volumes:
                    problem(cw, f"volumeMount {m.get('name')} names no volume")
    for name, (f, s) in services.items():
        sel = s["spec"].get("selector") or {}
        match = [p for p in pods.values() if all(p[2].get(k) == v for k, v in sel.items())]
        if not match:
            problem(f, f"Service {name}: selector {sel} matches no pod template")
        for p in s["spec"].get("ports") or []:
            t = p.get("targetPort", p.get("port"))
            if match and t not in list(match[0][3]) + list(match[0][3].values()):
                problem(f, f"Service {name}: targetPort {t} is no containerPort of {match[0][1]['metadata']['name']}")
    for where, text in specs.items():
        num = lambda field: int((re.search(rf"^\s*{field}:\s*(\d+)", text, re.M) or [0, -1])[1])
        if "ps_server" in pods and num("num_servers") != pods["ps_server"][1]["spec"].get("replicas"):
            problem(where, f"num_servers {num('num_servers')} != the servers' replicas")
        for field in ("completions", "parallelism"):
            if "ps_worker" in pods and num("num_workers") != pods["ps_worker"][1]["spec"].get(field):
                problem(where, f"num_workers {num('num_workers')} != the workers' {field}")
        check_job_spec(where, text)
    print(f"k8s: {len(docs)} documents, {len(workloads)} workloads, {len(services)} services, {len(specs)} job specs")


def check_job_spec(where, text):
    """The scheduler must accept the job spec: it starts listening (then is stopped) or exits 2."""
    with tempfile.TemporaryDirectory() as tmp:
        open(os.path.join(tmp, "job.pbtxt"), "w").write(text)
        port_file = os.path.join(tmp, "port")
        log = open(os.path.join(tmp, "log"), "w+")
        p = subprocess.Popen([binary("ps_scheduler"), f"--job={tmp}/job.pbtxt", "--listen=127.0.0.1:0",
                              f"--port_file={port_file}"], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while p.poll() is None and not os.path.exists(port_file) and time.time() < deadline:
            time.sleep(0.1)
        if p.poll() is None:
            p.terminate()
            p.wait()
            if not os.path.exists(port_file):
                problem(where, "ps_scheduler did not start on it within 20 s")
        else:
            log.seek(0)
            problem(where, f"ps_scheduler refused it (exit {p.returncode}): {log.read().strip()[-300:]}")


def check_slurm():
    for f in sorted(glob.glob(os.path.join(ROOT, "deploy/slurm/*.sbatch"))):
        text = open(f).read()
        sh = subprocess.run(["bash", "-n", f], capture_output=True, text=True)
        if sh.returncode:
            problem(f, f"bash -n: {sh.stderr.strip()}")
        comps = [[]]
        for line in re.findall(r"^#SBATCH\s+(.*)$", text, re.M):
            comps.append([]) if line.split()[0] in ("hetjob", "packjob") else comps[-1].append(line)
        if len(comps) < 2:
            problem(f, "no '#SBATCH hetjob' line: not a heterogeneous job")
        found = check_text_commands(f, text, want=3)
        roles = {}
        for chunk in re.split(r"\bsrun\b", code(text))[1:]:
            group, name = re.search(r"--het-group=(\d+)", chunk), CMD_RE.search(chunk)
            if group and name:
                roles[name.group(1)] = int(group.group(1))
        for name in DAEMONS:
            if name not in roles or roles[name] >= len(comps):
                problem(f, f"no srun --het-group=N (N < {len(comps)}) launches {name}")
                continue
            gpu = any("--gres=gpu" in line for line in comps[roles[name]])
            if gpu != (name == "ps_worker"):
                problem(f, f"{name} runs in component {roles[name]}, which {'has' if gpu else 'lacks'} --gres=gpu")
        print(f"slurm: {os.path.basename(f)}: {len(comps)} components, {len(found)} daemon commands, roles {roles}")


def check_systemd():
    sdir = os.path.join(ROOT, "deploy/systemd")
    env_text = open(os.path.join(sdir, "pstrain.env")).read()
    env = dict(re.findall(r"^(PSTRAIN_\w+)=(.*)$", env_text, re.M))
    for key, value in re.findall(r"^#?\s*PSTRAIN_(\w+?)_FLAGS=(.*)$", env_text, re.M):  # commented ones too
        for name in (DAEMONS if key == "SECURITY" else ["ps_" + key.lower()]):
            check_flags(os.path.join(sdir, "pstrain.env"), name, dict(FLAG_RE.findall(value)))
    units = sorted(glob.glob(os.path.join(sdir, "*.service")))
    for f in units:
        text = open(f).read()
        for section in ("Unit", "Service", "Install"):
            if f"[{section}]" not in text:
                problem(f, f"no [{section}] section")
        if not re.search(r"^Restart=on-failure$", text, re.M):
            problem(f, "no Restart=on-failure")
        if not re.search(r"^EnvironmentFile=/etc/pstrain/pstrain.env$", text, re.M):
            problem(f, "does not read EnvironmentFile=/etc/pstrain/pstrain.env")
        execs = re.findall(r"^ExecStart=(.*)$", text, re.M)
        if len(execs) != 1:
            problem(f, "wants exactly one ExecStart=")
        for line in execs:
            check_text_commands(f, line)
            for var in re.findall(r"\$\{?(\w+)", line):
                if var not in env:
                    problem(f, f"ExecStart uses ${var}, which pstrain.env does not set")
    verified = verify_units(units)
    print(f"systemd: {len(units)} units, {len(env)} settings in pstrain.env; "
          f"{verified} instances passed systemd-analyze verify")


def verify_units(units):
    """systemd's own parser on the units (systemd-analyze verify, which needs no
    running systemd): in a scratch root holding the system's units, the units
    and executables at the daemons' /opt/pstrain paths. Any remark (an unknown key, a
    bad value, a command that is not there) is a problem. Returns how many
    instances it verified (0 where systemd-analyze is missing)."""
    analyze, system = "/usr/bin/systemd-analyze", "/usr/lib/systemd/system"
    if not (os.access(analyze, os.X_OK) and os.path.isdir(system)):
        print("systemd: systemd-analyze not found; units checked by text only")
        return 0
    with tempfile.TemporaryDirectory() as root:
        shutil.copytree(system, root + system, symlinks=True)
        os.makedirs(root + "/etc/systemd/system")
        for f in units:
            shutil.copy(f, root + "/etc/systemd/system/")
        for path in BINARIES.values():  # executables there (check_paths matches them to the bundle)
            exe = f"{root}/opt/pstrain/bin/{path}"
            os.makedirs(os.path.dirname(exe), exist_ok=True)
            with open(exe, "w") as out:
                out.write("#!/bin/sh\n")
            os.chmod(exe, 0o755)
        names = [os.path.basename(f).replace("@.service", "@0.service") for f in units]
        for name in names:
            out = subprocess.run([analyze, f"--root={root}", "verify", name],
                                 capture_output=True, text=True)
            remarks = (out.stdout + out.stderr).strip()
            if out.returncode != 0 or remarks:
                problem(os.path.join(ROOT, "deploy/systemd", name.replace("@0", "@")),
                        f"systemd-analyze verify: {remarks or out.returncode}")
    return len(names)


def check_dockerfile():
    f = os.path.join(ROOT, "deploy/Dockerfile")
    text, stages, entry = open(f).read(), [], []
    if not re.search(r"^COPY dist/pstrain-bundle /opt/pstrain$", text, re.M):
        problem(f, "does not COPY dist/pstrain-bundle /opt/pstrain")
    for kw, rest in re.findall(r"^(FROM|ENTRYPOINT|CMD)\s+(.*)$", text, re.M):
        if kw == "FROM":
            stages.append((rest.split()[-1] if " AS " in rest.upper() else rest))
            entry = []
            continue
        try:
            argv = json.loads(rest)
        except ValueError:
            problem(f, f"{kw} is not in exec (JSON) form: {rest}")
            continue
        if kw == "ENTRYPOINT":
            entry = argv
            want = {"scheduler": "ps_scheduler", "server": "ps_server", "worker": "ps_worker", "psctl": "psctl"}.get(stages[-1])
            if want and not argv[0].endswith("/" + want):
                problem(f, f"stage {stages[-1]}: ENTRYPOINT {argv[0]} is not {want}")
        else:
            check_text_commands(f, " ".join(entry + argv))
    print(f"Dockerfile: stages {stages}")


def check_paths():
    """Every /opt/pstrain/{bin,jobs}/... path named anywhere is one the bundle has."""
    files = glob.glob(os.path.join(ROOT, "deploy/*/*")) + [os.path.join(ROOT, "deploy/Dockerfile")]
    jobs = {os.path.basename(j) for j in glob.glob(os.path.join(ROOT, "deploy/jobs/*.pbtxt"))}
    for f in files:
        if "/jobs/" in f:
            continue
        text = open(f).read()
        for path in re.findall(r"(?:/opt/pstrain/bin|\$BIN|\$PSTRAIN_HOME/bin)/(\w+/\w+)", text):
            if path not in BINARIES.values():
                problem(f, f"{path}: no such binary in the bundle")
        for job in re.findall(r"(?:/opt/pstrain|PSTRAIN_HOME)/jobs/([\w.-]+)", text):
            if job not in jobs:
                problem(f, f"jobs/{job}: no such job in deploy/jobs")


for check in (check_k8s, check_slurm, check_systemd, check_dockerfile, check_paths):
    check()
print(f"{len(checked)} flags checked against the binaries' --helpfull")
for p in problems:
    print("PROBLEM", p)
print(f"deploy_check: {len(problems)} problem(s)" if problems else "deploy_check: all good")
sys.exit(1 if problems else 0)
