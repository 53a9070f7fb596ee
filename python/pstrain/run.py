"""Starts a local pstrain cluster around a PyTorch script, as torchrun and
bpslaunch do for theirs:

    python3 -m pstrain.run --job JOB.pbtxt --servers 2 --workers 2 script.py [ARGS ...]

starts ps_scheduler with the job, the servers, and the script as every
worker (PSTRAIN_SCHEDULER set: the script's pst.init() finds the cluster),
waits for the job to end and exits with the first failing process's code
(0 when every one succeeded). The workers' output is this process's; the
daemons' goes to --logs (a temporary folder by default), whose paths are
printed first. Ctrl-C stops everything.

The daemons are those of an installed wheel (beside this package), else
$PSTRAIN_BIN (a folder with scheduler/ps_scheduler and server/ps_server,
like bazel-bin or a bundle's bin), else the repository's bazel-bin.
"""

import argparse
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

_PACKAGE = pathlib.Path(__file__).resolve().parent
# How long the scheduler may take to write its port file.
_START_TIMEOUT_S = 30


class LaunchError(RuntimeError):
    """The cluster could not be started (a daemon missing or failing)."""


def daemon(role):
    """The path of ps_scheduler or ps_server ('scheduler', 'server').

    Raises:
      LaunchError: it is in none of the places looked in (named).
    """
    name = "ps_" + role
    tried = [_PACKAGE / "bin" / name]
    if os.environ.get("PSTRAIN_BIN"):
        tried.append(pathlib.Path(os.environ["PSTRAIN_BIN"]) / role / name)
    tried.append(_PACKAGE.parent.parent / "bazel-bin" / role / name)
    for path in tried:
        if path.is_file():
            return path
    raise LaunchError("pstrain.run: %s not found; tried %s (install the pstrain wheel, set "
                      "PSTRAIN_BIN, or build with bazel)" % (name, ", ".join(map(str, tried))))


def daemon_env():
    """The daemons' environment: the wheel's libraries on their path."""
    env = dict(os.environ)
    libs = _PACKAGE.parent / "pstrain.libs"
    if libs.is_dir():
        env["LD_LIBRARY_PATH"] = os.pathsep.join(
            p for p in (str(libs), env.get("LD_LIBRARY_PATH", "")) if p)
    return env


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python3 -m pstrain.run",
                                description=__doc__.split("\n\n")[0])
    p.add_argument("--job", required=True, help="the job spec (a .pbtxt; model EXTERNAL)")
    p.add_argument("--servers", type=int, default=1, help="parameter servers (default 1)")
    p.add_argument("--workers", type=int, default=1, help="workers running the script")
    p.add_argument("--scheduler_flags", default="", help="more ps_scheduler flags, one string")
    p.add_argument("--server_flags", default="", help="more ps_server flags, one string")
    p.add_argument("--worker_flags", default="",
                   help="more worker flags for pst.init ($PSTRAIN_FLAGS), one string")
    p.add_argument("--logs", help="folder of the daemons' logs (default: a new temporary one)")
    p.add_argument("script", help="the training script (python)")
    p.add_argument("script_args", nargs=argparse.REMAINDER, help="its arguments")
    args = p.parse_args(argv)
    if args.servers < 1 or args.workers < 1:
        p.error("--servers and --workers must be >= 1")
    return args


class _Cluster:
    """The processes of one launch, stopped together."""

    def __init__(self, logs):
        self.logs = pathlib.Path(logs)
        self.processes = {}

    def start(self, name, argv, env, log=True):
        out = open(self.logs / (name + ".log"), "wb") if log else None
        self.processes[name] = subprocess.Popen(argv, env=env, stdout=out, stderr=out)
        return self.processes[name]

    def stop(self):
        for proc in self.processes.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 10
        for proc in self.processes.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()


def _scheduler_address(cluster, port_file):
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        if port_file.exists() and port_file.read_text().strip():
            return port_file.read_text().strip()
        if cluster.processes["scheduler"].poll() is not None:
            break
        time.sleep(0.05)
    raise LaunchError("pstrain.run: the scheduler did not start; see %s"
                      % (cluster.logs / "scheduler.log"))


def launch(args):
    """Runs the cluster of `args` to its end: the exit code."""
    logs = pathlib.Path(args.logs or tempfile.mkdtemp(prefix="pstrain-run-"))
    logs.mkdir(parents=True, exist_ok=True)
    print("pstrain.run: daemons' logs in %s" % logs, file=sys.stderr)
    cluster = _Cluster(logs)
    env = daemon_env()
    port_file = logs / "scheduler.port"
    try:
        cluster.start("scheduler", [str(daemon("scheduler")), "--job=" + args.job,
                                    "--listen=127.0.0.1:0", "--port_file=%s" % port_file,
                                    "--status_file=%s" % (logs / "status.json"),
                                    "--num_servers=%d" % args.servers,
                                    "--num_workers=%d" % args.workers]
                      + args.scheduler_flags.split(), env)
        address = _scheduler_address(cluster, port_file)
        for i in range(args.servers):
            cluster.start("server%d" % i, [str(daemon("server")), "--scheduler=" + address,
                                           "--listen=127.0.0.1:0"] + args.server_flags.split(),
                          env)
        worker_env = dict(os.environ, PSTRAIN_SCHEDULER=address,
                          PSTRAIN_FLAGS=" ".join(["--listen=127.0.0.1:0", args.worker_flags]))
        workers = ["worker%d" % i for i in range(args.workers)]
        for name in workers:
            cluster.start(name, [sys.executable, args.script] + args.script_args, worker_env,
                          log=False)
        codes = [cluster.processes[name].wait() for name in workers]
        for name in ["scheduler"] + ["server%d" % i for i in range(args.servers)]:
            try:
                codes.append(cluster.processes[name].wait(60))
            except subprocess.TimeoutExpired:
                codes.append(124)
        return next((c for c in codes if c != 0), 0)
    except KeyboardInterrupt:
        return 130
    finally:
        cluster.stop()


def main(argv=None):
    try:
        sys.exit(launch(parse_args(sys.argv[1:] if argv is None else argv)))
    except LaunchError as e:
        sys.exit(str(e))


if __name__ == "__main__":
    main()
