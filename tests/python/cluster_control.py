"""What the failure and bad-input tests of pstrain.torch need beyond
local_cluster.LocalCluster: servers and psctl with flags (a token), the
scheduler's live Status (psctl status --json), waiting on it, a scheduler
started again on its address and --state_dir, a server started in another's
place, and the tiny worker (tiny_worker.py) as a process with its result.

    with Cluster(TINY_JOB, servers=2, workers=2, name="shrink",
                 scheduler_flags=["--on_worker_failure=shrink"]) as cluster:
        w0 = cluster.start_tiny("worker0", "--sleep_ms=20")
        status = cluster.wait_status(lambda st: slowest_clock(st) >= 50, 120)
"""

import json
import signal
import socket
import subprocess
import sys
import time

from local_cluster import LocalCluster, binary, runfile
from pstrain._port_file import read_address

TINY_JOB = runfile("tests/python/jobs/tiny_external.pbtxt")
TINY_WORKER = runfile("tests/python/tiny_worker.py")


def closed_port():
    """A loopback port nothing listens on (bound, then closed)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def members(status, role):
    """The members of `role` ("WORKER", "SERVER") in a ClusterStatus dict."""
    return [m for m in status.get("members", []) if m.get("role") == role]


def member(status, role, member_id):
    """Member `member_id` of `role`, or None."""
    for m in members(status, role):
        if int(m.get("id", 0)) == member_id:
            return m
    return None


def worker_clocks(status):
    """The gate's clock table by worker id (-1: a worker the job went on
    without)."""
    return [int(c) for c in status.get("worker_clocks", [])]


def slowest_clock(status):
    """The slowest live worker's clock in the gate's table (-1: none yet)."""
    live = [c for c in worker_clocks(status) if c >= 0]
    return min(live) if live else -1


def read_json(path):
    """The JSON object in `path`, or None while it is absent."""
    try:
        with open(path) as f:
            return json.load(f)
    except FileNotFoundError:
        return None


class Cluster(LocalCluster):
    """LocalCluster with flags for the servers and psctl (e.g. a token),
    live Status, restarts and replacements."""

    def __init__(self, job, servers, workers, name="cluster", scheduler_flags=(),
                 server_flags=(), psctl_flags=()):
        super().__init__(job, servers, workers, name=name, scheduler_flags=scheduler_flags)
        self.server_flags = list(server_flags)
        self.psctl_flags = list(psctl_flags)
        self.scheduler_name = "scheduler"  # the process now serving as the scheduler
        self.server_names = {}             # server id -> the process name serving it

    def __enter__(self):
        try:
            self._start_scheduler()
            for i in range(self.servers):
                self.start_server("server%d" % i)
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    # ---- Servers.

    def start_server(self, name, server_id=None, join=False):
        """Starts a ps_server as process `name` (`server_id`: take over that
        id, ps_server --id; `join`: a server added to the running job,
        ps_server --join)."""
        argv = [binary("server/ps_server"), "--scheduler=" + self.address,
                "--listen=127.0.0.1:0", "--heartbeat_interval_ms=200",
                "--port_file=%s/%s.port" % (self.dir, name)] + self.server_flags
        if server_id is not None:
            argv.append("--id=%d" % server_id)
        if join:
            argv.append("--join")
        return self.start(name, argv)

    def psctl(self, *args, timeout=120):
        """Runs psctl `args` against the scheduler: (exit code, stdout, stderr)."""
        out = subprocess.run(
            [str(binary("tools/psctl"))] + list(args) + ["--scheduler=" + self.address]
            + self.psctl_flags, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            timeout=timeout)
        return out.returncode, out.stdout, out.stderr

    def server_process(self, server_id, timeout=30):
        """The name of the process serving as server `server_id`: the one
        whose port file holds the address Status gives that id."""
        status = self.wait_status(lambda st: member(st, "SERVER", server_id) is not None,
                                  timeout)
        address = member(status, "SERVER", server_id)["address"]
        for name in self.processes:
            if name.startswith("server") and read_address(self.dir / (name + ".port")) == address:
                return name
        raise AssertionError("no server process at %s (server %d)" % (address, server_id))

    # ---- The scheduler.

    def restart_scheduler(self, name):
        """Starts the scheduler again as process `name`, with the first one's
        flags on the address it had (for a takeover from --state_dir)."""
        argv = list(self.processes["scheduler"].args)
        argv = ["--listen=" + self.address if a.startswith("--listen=") else a for a in argv]
        port_file = self.dir / "scheduler.port"
        if port_file.exists():
            port_file.unlink()
        self.start(name, argv)
        self.scheduler_name = name
        address = self._wait_for_port(port_file, self.processes[name], 30)
        if address != self.address:
            raise AssertionError("the scheduler came back on %s, not %s" % (address, self.address))
        return self.processes[name]

    def status(self, timeout_s=3):
        """The scheduler's live Status (psctl status --json) as a dict, or
        None when it does not answer."""
        try:
            out = subprocess.run(
                [str(binary("tools/psctl")), "status", "--scheduler=" + self.address, "--json",
                 "--timeout_s=%d" % timeout_s] + self.psctl_flags,
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=timeout_s + 10)
        except subprocess.TimeoutExpired:
            return None
        if out.returncode != 0:
            return None
        try:
            return json.loads(out.stdout)
        except ValueError:
            return None

    def wait_status(self, predicate, timeout, interval=0.2):
        """Polls Status until predicate(status) holds; returns that status.
        TimeoutError (with the last status seen) otherwise."""
        deadline = time.monotonic() + timeout
        last = None
        while True:
            status = self.status()
            if status is not None:
                last = status
                if predicate(status):
                    return status
            if time.monotonic() > deadline:
                brief = None
                if last is not None:
                    brief = {"job_state": last.get("job_state"),
                             "worker_clocks": last.get("worker_clocks"),
                             "members": [(m.get("role"), m.get("id"), m.get("state"),
                                          m.get("clock")) for m in last.get("members", [])]}
                raise TimeoutError("Status did not get there in %d s; last: %s (logs in %s)"
                                   % (timeout, brief, self.dir))
            time.sleep(interval)

    # ---- Tiny workers.

    def start_tiny(self, name, *args, env=None):
        """Starts tests/python/tiny_worker.py as process `name`, its result
        in DIR/<name>.json (self.result(name)) and its rank in
        DIR/<name>.rank."""
        argv = [sys.executable, TINY_WORKER, "--result_json=%s" % self.result_path(name),
                "--rank_file=%s/%s.rank" % (self.dir, name)]
        return self.start(name, argv + list(args), env=env or self.worker_env())

    def result_path(self, name):
        return self.dir / (name + ".json")

    def result(self, name):
        """What tiny worker `name` wrote at its end (None: nothing)."""
        return read_json(self.result_path(name))

    def exit_times(self, names, timeout, since):
        """Waits for processes `names` to exit: {name: (exit code, seconds
        from `since`, a time.monotonic())}. TimeoutError naming those still
        running."""
        deadline = time.monotonic() + timeout
        out = {}
        while len(out) < len(names):
            for name in names:
                if name not in out and self.processes[name].poll() is not None:
                    code = self.processes[name].returncode
                    out[name] = (128 - code if code < 0 else code, time.monotonic() - since)
            if len(out) < len(names):
                if time.monotonic() > deadline:
                    raise TimeoutError("still running after %d s: %s (logs in %s)" % (
                        timeout, ", ".join(n for n in names if n not in out), self.dir))
                time.sleep(0.05)
        return out

    def kill(self, name, sig=signal.SIGKILL):
        """Sends `sig` to process `name` and waits for it to exit: its code."""
        process = self.processes[name]
        process.send_signal(sig)
        return self.wait([name], 30)[name]


def worker_rank(cluster, name, timeout=60):
    """The id the scheduler gave tiny worker `name` (pst.get_rank(), which
    it writes to DIR/<name>.rank at its first step)."""
    deadline = time.monotonic() + timeout
    path = cluster.dir / (name + ".rank")
    while time.monotonic() < deadline:
        if path.exists():
            text = path.read_text()
            if text.endswith("\n"):
                return int(text)
        if cluster.processes[name].poll() is not None:
            raise AssertionError("%s exited (code %s) before it had a rank"
                                 % (name, cluster.processes[name].returncode))
        time.sleep(0.05)
    raise TimeoutError("%s has no rank after %d s" % (name, timeout))

