"""A local pstrain cluster for Python tests: the scheduler and the servers as
child processes on ports the OS chooses on 127.0.0.1, workers as any
command (a PyTorch script), each process logging to a file of its own.

    with LocalCluster(job, servers=2, workers=2, name="cnn") as cluster:
        cluster.start("worker0", [python, script], env=cluster.worker_env())
        codes = cluster.wait(["scheduler", "server0", "server1", "worker0"], 600)

Leaving the block kills whatever still runs; leaving it with an exception
(a failed assertion too) prints the tail of every log first.
"""

import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]  # the repository, run by hand


def runfile(relative):
    """A file of the workspace: in the test's runfiles under Bazel, else in
    the repository."""
    srcdir = os.environ.get("TEST_SRCDIR")
    if srcdir:
        return pathlib.Path(srcdir, os.environ.get("TEST_WORKSPACE", "pstrain"), relative)
    return ROOT / relative


# The package's one reader of a port file (pstrain._port_file).
if str(runfile("python")) not in sys.path:
    sys.path.insert(0, str(runfile("python")))
from pstrain._port_file import read_address  # noqa: E402


def binary(relative):
    """A built file, e.g. "scheduler/ps_scheduler": in the runfiles under
    Bazel, else in the repository's bazel-bin."""
    if os.environ.get("TEST_SRCDIR"):
        return runfile(relative)
    return ROOT / "bazel-bin" / relative


def python_with_torch():
    """An interpreter that imports torch: $PSTRAIN_PYTHON, this one, or
    /usr/bin/python3 (Debian's python3-torch); None if none does."""
    for python in (os.environ.get("PSTRAIN_PYTHON"), sys.executable, "/usr/bin/python3"):
        if python and subprocess.run([python, "-c", "import torch"],
                                     stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL).returncode == 0:
            return python
    return None


class LocalCluster:
    """One scheduler and `servers` servers started on entry, for `workers`
    workers that the caller starts."""

    def __init__(self, job, servers, workers, name="cluster", scheduler_flags=()):
        outputs = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
        if outputs:
            self.dir = pathlib.Path(tempfile.mkdtemp(prefix=name + "-", dir=outputs))
        else:
            self.dir = pathlib.Path(tempfile.mkdtemp(prefix="pstrain-%s-" % name))
        self.job = job
        self.servers = servers
        self.workers = workers
        self.scheduler_flags = list(scheduler_flags)
        self.address = None
        self.processes = {}  # name -> Popen

    def __enter__(self):
        try:
            self._start_scheduler()
            for i in range(self.servers):
                self.start("server%d" % i, [
                    str(binary("server/ps_server")), "--scheduler=" + self.address,
                    "--listen=127.0.0.1:0", "--heartbeat_interval_ms=200",
                    "--port_file=%s/server%d.port" % (self.dir, i)])
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, kind, value, tb):
        if kind is not None:
            self.print_logs()
        self.stop()

    def _start_scheduler(self):
        port_file = self.dir / "scheduler.port"
        self.start("scheduler", [
            str(binary("scheduler/ps_scheduler")), "--job=%s" % self.job,
            "--listen=127.0.0.1:0", "--port_file=%s" % port_file,
            "--num_servers=%d" % self.servers, "--num_workers=%d" % self.workers,
            "--end_grace_ms=3000", "--status_file=%s" % self.status_file,
        ] + self.scheduler_flags)
        self.address = self._wait_for_port(port_file, self.processes["scheduler"], 20)

    @property
    def status_file(self):
        return self.dir / "status.json"

    def log(self, name):
        return self.dir / (name + ".log")

    def start(self, name, argv, env=None):
        """Starts `argv` as process `name`, stdout and stderr to its log."""
        with open(self.log(name), "wb") as log:
            self.processes[name] = subprocess.Popen(
                [str(a) for a in argv], stdout=log, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, env=env)
        return self.processes[name]

    def worker_env(self, **extra):
        """The environment of a pstrain.torch worker of this cluster (its
        PSTRAIN_FLAGS end with $PSTRAIN_TEST_WORKER_FLAGS, a test's own)."""
        env = dict(os.environ)
        # pstrain from the runfiles (or the repository), as an installed one.
        path = [str(runfile("python"))] + [p for p in env.get("PYTHONPATH", "").split(":") if p]
        flags = " ".join(["--listen=127.0.0.1:0 --heartbeat_interval_ms=200",
                          os.environ.get("PSTRAIN_TEST_WORKER_FLAGS", "")]).strip()
        env.update(PSTRAIN_SCHEDULER=self.address, PYTHONPATH=":".join(path),
                   PSTRAIN_FLAGS=flags)
        env.update(extra)
        return env

    def wait(self, names, timeout):
        """Waits for processes `names` to exit: {name: exit code (128 +
        signal for a signal)}. TimeoutError naming those still running."""
        deadline = time.monotonic() + timeout
        while True:
            running = [n for n in names if self.processes[n].poll() is None]
            if not running:
                return {n: _exit_code(self.processes[n].returncode) for n in names}
            if time.monotonic() > deadline:
                raise TimeoutError("still running after %d s: %s (logs in %s)"
                                   % (timeout, ", ".join(running), self.dir))
            time.sleep(0.1)

    def final_status(self):
        """The scheduler's --status_file (its ClusterStatus as JSON, proto
        field names) as it ended the job."""
        with open(self.status_file) as f:
            return json.load(f)

    def stop(self):
        """SIGTERM to every process still running; SIGKILL after 5 s."""
        alive = [p for p in self.processes.values() if p.poll() is None]
        for p in alive:
            p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 5
        for p in alive:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def print_logs(self, lines=40):
        for name in self.processes:
            with open(self.log(name), errors="replace") as f:
                tail = f.readlines()[-lines:]
            sys.stderr.write("---- %s (last %d lines of %s)\n%s"
                             % (name, len(tail), self.log(name), "".join(tail)))

    @staticmethod
    def _wait_for_port(path, process, timeout):
        """The address a daemon writes to its port file (a full line)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            address = read_address(path)
            if address is not None:
                return address
            if process.poll() is not None:
                raise RuntimeError("%s exited (code %d) before writing %s"
                                   % (process.args[0], process.returncode, path))
            time.sleep(0.02)
        raise TimeoutError("no port file %s after %d s" % (path, timeout))


def _exit_code(returncode):
    return 128 - returncode if returncode < 0 else returncode


def main(test):
    """unittest.main() under a python3 that imports torch: re-runs the
    calling script under one if this interpreter does not (`test` names it
    in the message when there is none)."""
    python = python_with_torch()
    if python is None:
        sys.exit("%s: no python3 that imports torch (install Debian's python3-torch or set "
                 "PSTRAIN_PYTHON)" % test)
    if python != sys.executable:
        os.execv(python, [python] + sys.argv)
    unittest.main(module="__main__")
