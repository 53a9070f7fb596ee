"""Starts a local pstrain cluster around a PyTorch script, as torchrun and
bpslaunch do for theirs:

    python3 -m pstrain.run --job JOB.pbtxt --servers 2 --workers 2 script.py [ARGS ...]

starts ps_scheduler with the job, the servers, and the script as every
worker (PSTRAIN_SCHEDULER set: the script's pst.init() finds the cluster),
waits for the workers to end and the daemons after them, and exits with
the first failing process's code (0 when every one succeeded). The
workers' output is this process's; the daemons' goes to --logs (a
temporary folder by default), whose paths are printed first.

Each process the launcher starts leads a session (and process group) of
its own, which is what is signalled, so that what it starts in turn (a
script's DataLoader workers) goes with it. SIGINT (Ctrl-C: the terminal
sends it to the launcher alone), SIGTERM (Slurm, Kubernetes, systemd,
timeout) and SIGHUP stop the launch alike: SIGTERM to every group, SIGKILL
after _STOP_GRACE_S to what is left, then the launcher exits 128 + the
signal's number (130, 143, 129), as a shell and torchrun report it. On
Linux every child is also sent SIGKILL if the launcher dies
(PR_SET_PDEATHSIG).

Exit codes besides the processes' own: 2 for bad arguments (a script that
does not exist: nothing is started), the scheduler's code when it exits
before it listens (2 for a job it refuses), 124 for a daemon still running
_END_SLACK_S past the scheduler's end grace after the last worker ended
(it is stopped).

The daemons are those of an installed wheel (beside this package), else
$PSTRAIN_BIN (a folder with scheduler/ps_scheduler and server/ps_server,
like bazel-bin or a bundle's bin), else the repository's bazel-bin.
"""

import argparse
import contextlib
import ctypes
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time

from ._capi import PstrainError
from ._port_file import read_address

_PACKAGE = pathlib.Path(__file__).resolve().parent
# How long the scheduler may take to write its port file.
_START_TIMEOUT_S = 30
# The signals that stop a launch.
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# From SIGTERM to SIGKILL when a launch is stopped.
_STOP_GRACE_S = 5
# Once every worker has ended, how long the daemons may take beyond the
# scheduler's --end_grace_ms and --linger_ms (for the servers to hear of
# the end and exit).
_END_SLACK_S = 10
# ps_scheduler's defaults for those two flags.
_SCHEDULER_END_MS = {"end_grace_ms": 5000, "linger_ms": 0}
_POLL_S = 0.05
_LOG_TAIL_LINES = 20
_PR_SET_PDEATHSIG = 1  # <linux/prctl.h>


class LaunchError(PstrainError):
    """The cluster could not be started: a daemon missing, or the
    scheduler exited (or hung) before it listened.

    Attributes:
      code: the launcher's exit code (the scheduler's own when it exited).
    """

    def __init__(self, message, code=1):
        super().__init__(message)
        self.code = code


class Interrupted(Exception):
    """A stop signal (SIGINT, SIGTERM, SIGHUP) reached the launcher.

    Attributes:
      signum: the signal's number.
    """

    def __init__(self, signum):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


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
    """The launcher's arguments; exits 2 (argparse's usage error) for bad
    ones, a script that does not exist included, before anything starts."""
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
    if not os.path.exists(args.script):
        p.error("the script %s does not exist" % args.script)
    return args


def _exit_code(returncode):
    """A Popen returncode as a shell reports it (128 + N for signal N)."""
    return 128 - returncode if returncode < 0 else returncode


def _die_with_launcher():
    """A preexec_fn that has the child sent SIGKILL when the launcher dies
    (Linux's PR_SET_PDEATHSIG, through ctypes); None elsewhere."""
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None).prctl
    launcher = os.getpid()

    def setup():  # in the child, between fork and exec
        prctl(_PR_SET_PDEATHSIG, ctypes.c_ulong(signal.SIGKILL))
        if os.getppid() != launcher:  # the launcher died before the prctl
            os.kill(os.getpid(), signal.SIGKILL)

    return setup


def _signal_group(process, signum):
    """Sends `signum` (0: none, a probe) to the process group `process`
    leads: whether a process of it is left. `process` is reaped first if
    it has exited, so that it does not count."""
    process.poll()
    try:
        os.killpg(process.pid, signum)
    except ProcessLookupError:
        return False
    return True


class _Cluster:
    """The processes of one launch, each the leader of a session of its
    own, stopped together. Not thread-safe; stop_signal is set by the
    signal handler (_stop_signals) and read between steps."""

    def __init__(self, logs):
        self.logs = pathlib.Path(logs)
        self.processes = {}      # name -> Popen, in the order started
        self.stop_signal = None  # the first stop signal received
        self._setup = _die_with_launcher()

    def start(self, name, argv, env, log=True):
        """Starts `argv` as process `name`, its output to LOGS/<name>.log
        (log=True) or the launcher's.

        Raises:
          Interrupted: a stop signal came before it was started.
        """
        self.check_signal()
        out = open(self.logs / (name + ".log"), "wb") if log else None
        try:
            self.processes[name] = subprocess.Popen(
                [str(a) for a in argv], env=env, stdout=out,
                stderr=subprocess.STDOUT if log else None,
                stdin=subprocess.DEVNULL if log else None,
                start_new_session=True, preexec_fn=self._setup)
        finally:
            if out is not None:
                out.close()  # (the child has its own copy)
        return self.processes[name]

    def check_signal(self):
        """Raises Interrupted once a stop signal has come."""
        if self.stop_signal is not None:
            raise Interrupted(self.stop_signal)

    def wait(self, names, timeout=None):
        """Waits for processes `names` to exit, at most `timeout` seconds
        (None: no limit).

        Returns:
          {name: exit code (128 + N for signal N)} of those that exited.

        Raises:
          Interrupted: a stop signal came.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            self.check_signal()
            ended = {n: self.processes[n].poll() for n in names}
            ended = {n: _exit_code(code) for n, code in ended.items() if code is not None}
            if len(ended) == len(names) or (deadline is not None and time.monotonic() >= deadline):
                return ended
            time.sleep(_POLL_S)

    def stop(self):
        """Stops every process of the launch and what each started: SIGTERM
        to each process group with a process left, SIGKILL to those with one
        left _STOP_GRACE_S later. Returns once the groups are empty or sent
        SIGKILL, and every process started is reaped."""
        started = list(self.processes.values())
        alive = [p for p in started if _signal_group(p, signal.SIGTERM)]
        deadline = time.monotonic() + _STOP_GRACE_S
        while alive and time.monotonic() < deadline:
            time.sleep(_POLL_S)
            alive = [p for p in alive if _signal_group(p, 0)]
        for process in alive:
            _signal_group(process, signal.SIGKILL)
        for process in started:
            process.wait()


@contextlib.contextmanager
def _stop_signals(cluster):
    """Within the block, SIGINT, SIGTERM and SIGHUP set cluster.stop_signal
    (the first one's number) instead of ending the launcher; one ignored
    here (SIGHUP under nohup) stays ignored."""
    def record(signum, frame):
        if cluster.stop_signal is None:
            cluster.stop_signal = signum

    previous = {s: signal.signal(s, record) for s in _STOP_SIGNALS
                if signal.getsignal(s) != signal.SIG_IGN}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _log_tail(path):
    """The last _LOG_TAIL_LINES lines of the log at `path`."""
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-_LOG_TAIL_LINES:]).rstrip()


def _scheduler_address(cluster, port_file):
    """The address the scheduler writes to `port_file` once it listens.

    Raises:
      LaunchError: it exited first (its exit code and its log's last
        lines: 2 for a job it refuses), or wrote none in _START_TIMEOUT_S.
      Interrupted: a stop signal came.
    """
    scheduler = cluster.processes["scheduler"]
    log = cluster.logs / "scheduler.log"
    deadline = time.monotonic() + _START_TIMEOUT_S
    while time.monotonic() < deadline:
        cluster.check_signal()
        address = read_address(port_file)
        if address is not None:
            return address
        if scheduler.poll() is not None:
            code = _exit_code(scheduler.returncode)
            raise LaunchError("pstrain.run: the scheduler exited (code %d) before it listened; "
                              "the end of %s:\n%s" % (code, log, _log_tail(log)), code)
        time.sleep(_POLL_S)
    raise LaunchError("pstrain.run: the scheduler wrote no address to %s in %d s; see %s"
                      % (port_file, _START_TIMEOUT_S, log))


def _start_daemons(cluster, args):
    """Starts the scheduler, then the servers: the scheduler's address.

    Raises:
      LaunchError: a daemon is not found (before anything starts), or the
        scheduler did not start (_scheduler_address).
      Interrupted: a stop signal came.
    """
    scheduler, server, env = daemon("scheduler"), daemon("server"), daemon_env()
    port_file = cluster.logs / "scheduler.port"
    cluster.start("scheduler", [scheduler, "--job=" + args.job, "--listen=127.0.0.1:0",
                                "--port_file=%s" % port_file,
                                "--status_file=%s" % (cluster.logs / "status.json"),
                                "--num_servers=%d" % args.servers,
                                "--num_workers=%d" % args.workers]
                  + args.scheduler_flags.split(), env)
    address = _scheduler_address(cluster, port_file)
    for i in range(args.servers):
        cluster.start("server%d" % i, [server, "--scheduler=" + address, "--listen=127.0.0.1:0"]
                      + args.server_flags.split(), env)
    return address


def _end_timeout_s(scheduler_flags):
    """How long the daemons may take to exit once every worker has: the
    scheduler's --end_grace_ms and --linger_ms (its defaults unless
    `scheduler_flags` sets them) and _END_SLACK_S."""
    ms = dict(_SCHEDULER_END_MS)
    for word in scheduler_flags.split():
        name, _, value = word.lstrip("-").partition("=")
        if name in ms and value.isdigit():
            ms[name] = int(value)
    return sum(ms.values()) / 1000 + _END_SLACK_S


def launch(args):
    """Runs the cluster of `args` to its end, or until a stop signal.

    Returns:
      The exit code: the first failing process's (workers first, then the
      scheduler and the servers; 124 for a daemon that outlived the bounded
      wait after the workers ended), 0 if none failed, 128 + N after stop
      signal N. Every process of the launch has ended by then.

    Raises:
      LaunchError: the cluster could not be started (its `code`).
    """
    logs = pathlib.Path(args.logs or tempfile.mkdtemp(prefix="pstrain-run-"))
    logs.mkdir(parents=True, exist_ok=True)
    print("pstrain.run: daemons' logs in %s" % logs, file=sys.stderr)
    cluster = _Cluster(logs)
    with _stop_signals(cluster):
        try:
            address = _start_daemons(cluster, args)
            worker_env = dict(os.environ, PSTRAIN_SCHEDULER=address,
                              PSTRAIN_FLAGS=" ".join(["--listen=127.0.0.1:0", args.worker_flags]))
            workers = ["worker%d" % i for i in range(args.workers)]
            for name in workers:
                cluster.start(name, [sys.executable, args.script] + args.script_args,
                              worker_env, log=False)
            codes = cluster.wait(workers)
            daemons = ["scheduler"] + ["server%d" % i for i in range(args.servers)]
            timeout = _end_timeout_s(args.scheduler_flags)
            ended = cluster.wait(daemons, timeout)
            for name in daemons:
                if name not in ended:
                    print("pstrain.run: %s still ran %.0f s after the last worker ended; "
                          "stopping it" % (name, timeout), file=sys.stderr)
                codes[name] = ended.get(name, 124)
            return next((c for c in codes.values() if c != 0), 0)
        except Interrupted as e:
            print("pstrain.run: %s; stopping every process" % e, file=sys.stderr)
            return 128 + e.signum
        finally:
            cluster.stop()


def main(argv=None):
    """Runs `python -m pstrain.run`: exits with launch()'s code, or with a
    LaunchError's (its message on stderr)."""
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        code = launch(args)
    except LaunchError as e:
        print(e, file=sys.stderr)
        code = e.code
    sys.exit(code)


if __name__ == "__main__":
    main()
