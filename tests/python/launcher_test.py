"""python -m pstrain.run as Slurm, Kubernetes, systemd, timeout(1) and a
terminal stop it, and as it meets bad input. A launch that is training --
2 servers and 2 tiny workers, each reading through a DataLoader with 2
worker processes, 9 processes under the launcher -- is stopped:

- by SIGTERM, SIGHUP, or a terminal's Ctrl-C (SIGINT to the launcher's
  process group, which its children are not in): no process of the launch
  is left within 10 s, the scripts' DataLoader workers included, and the
  launcher exits 128 + the signal (143, 129, 130);
- by SIGKILL to the launcher: its children die with it (PR_SET_PDEATHSIG)
  and the DataLoader workers after their scripts (torch's watchdog), no
  process left within 15 s.

And it ends fast, with the right code:

- a script that does not exist: exit 2 within seconds, nothing started;
- a job file the scheduler refuses: the scheduler's exit code (2), within
  seconds, nothing left running;
- scripts that all fail before the job can start: their exit code within
  the launcher's bounded wait for the daemons (seconds, not minutes);
- a short job: exit 0, DONE, the launcher out within seconds of its workers.

The processes of a launch are found in the process table: every process
whose chain of parents (/proc/PID/stat) leads to the launcher, recorded
while it runs, with its start time so that a pid used again does not count.
The facts come from exit codes, the process table and the scheduler's
status (psctl status --json, the final --status_file), never from logs.

By hand: python3 tests/python/launcher_test.py (the daemons from bazel-bin;
it re-runs itself under a python3 that imports torch).
"""

import collections
import json
import os
import pathlib
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import local_cluster
from local_cluster import binary, runfile

TINY_JOB = runfile("tests/python/jobs/tiny_external.pbtxt")
TINY_WORKER = runfile("tests/python/tiny_worker.py")
# The launch the signal tests stop: far from done when it is stopped.
TRAINING = ["--job=%s" % TINY_JOB, "--servers=2", "--workers=2",
            "--scheduler_flags=--clocks=100000", str(TINY_WORKER), "--loader", "--sleep_ms=50"]
# Its processes: the scheduler, 2 servers, 2 scripts, 2 DataLoader workers each.
TRAINING_PROCESSES = 9
# How long the launch may take to start training (torch loads in 2 scripts
# on a shared machine).
START_TIMEOUT_S = 180
# How long after the signal every process of a stopped launch must be gone.
STOP_TIMEOUT_S = 10


def process_table():
    """{pid: (parent pid, start time)} of the processes running now, from
    /proc/PID/stat (zombies left out: they have exited)."""
    table = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                stat = f.read()
        except OSError:  # (it ended meanwhile)
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # from field 3, the state
        if fields[0] != "Z":
            table[int(entry)] = (int(fields[1]), int(fields[19]))
    return table


def descendants(root, table):
    """The processes of `table` whose chain of parents leads to `root`:
    {pid: start time}."""
    children = collections.defaultdict(list)
    for pid, (parent, _) in table.items():
        children[parent].append(pid)
    found, todo = {}, [root]
    while todo:
        for child in children[todo.pop()]:
            found[child] = table[child][1]
            todo.append(child)
    return found


def still_running(processes):
    """Those of `processes` ({pid: start time}) that still run."""
    table = process_table()
    return {pid: start for pid, start in processes.items()
            if pid in table and table[pid][1] == start}


def launcher_env():
    """The launcher's environment: pstrain, its library and its daemons
    from the runfiles under Bazel (else the repository's bazel-bin), one
    BLAS thread a process."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("PSTRAIN_SCHEDULER", "PSTRAIN_FLAGS")}
    path = [str(runfile("python"))] + [p for p in env.get("PYTHONPATH", "").split(":") if p]
    env.update(PYTHONPATH=":".join(path),
               PSTRAIN_BIN=str(binary("scheduler/ps_scheduler").parents[1]),
               PSTRAIN_LIB=str(binary("worker/external/libpstrain_torch.so")),
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    return env


class Launch:
    """`python -m pstrain.run ARGS` as a terminal starts a job: the leader
    of a process group (a session) of its own. Its output goes to
    DIR/launcher.log, the daemons' logs to DIR/logs."""

    def __init__(self, name, *args):
        outputs = os.environ.get("TEST_UNDECLARED_OUTPUTS_DIR")
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="launcher-%s-" % name, dir=outputs))
        self.logs = self.dir / "logs"
        self.output = self.dir / "launcher.log"
        self.seen = {}  # pid -> start time: every process of the launch seen so far
        self.started = time.monotonic()
        with open(self.output, "wb") as out:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "pstrain.run", "--logs=%s" % self.logs] + list(args),
                env=launcher_env(), stdout=out, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True)

    def __enter__(self):
        return self

    def __exit__(self, kind, value, tb):
        if kind is not None:
            self.print_output()
        self.kill_all()

    def watch(self):
        """Records the processes under the launcher now; returns them."""
        now = descendants(self.process.pid, process_table())
        self.seen.update(now)
        return now

    def wait(self, timeout):
        """Waits for the launcher to exit, watching its processes: its exit
        code (128 + N for signal N), or None after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while self.process.poll() is None:
            if time.monotonic() > deadline:
                return None
            self.watch()
            time.sleep(0.05)
        code = self.process.returncode
        return 128 - code if code < 0 else code

    def status(self):
        """The scheduler's live Status (psctl status --json), or None."""
        port_file = self.logs / "scheduler.port"
        if not port_file.exists() or not port_file.read_text().endswith("\n"):
            return None
        out = subprocess.run(
            [str(binary("tools/psctl")), "status", "--json", "--timeout_s=3",
             "--scheduler=" + port_file.read_text().strip()],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=15)
        try:
            return json.loads(out.stdout) if out.returncode == 0 else None
        except ValueError:
            return None

    def wait_training(self, processes, timeout):
        """Waits until `processes` processes run under the launcher and
        every worker has finished a clock. AssertionError otherwise."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError("the launcher exited (%d) before training"
                                     % self.process.returncode)
            if len(self.watch()) >= processes:
                clocks = [int(c) for c in (self.status() or {}).get("worker_clocks", [])]
                if clocks and min(clocks) >= 1:
                    return
            time.sleep(0.2)
        raise AssertionError("no training launch of %d processes after %d s (seen %d)"
                             % (processes, timeout, len(self.watch())))

    def kill_all(self):
        """SIGKILL to the launcher and every process of it still running
        (what a failed test leaves)."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        for pid in still_running(self.seen):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def print_output(self, lines=30):
        with open(self.output, errors="replace") as f:
            tail = f.readlines()[-lines:]
        sys.stderr.write("---- the launcher's output (%s)\n%s" % (self.output, "".join(tail)))


def wait_gone(processes, timeout):
    """Waits up to `timeout` seconds for `processes` ({pid: start time}) to
    end: (those still running, the seconds it took)."""
    start = time.monotonic()
    while True:
        left = still_running(processes)
        if not left or time.monotonic() - start > timeout:
            return left, time.monotonic() - start
        time.sleep(0.05)


class LauncherTest(unittest.TestCase):
    def setUp(self):
        self.started = time.monotonic()

    def tearDown(self):
        sys.stderr.write("[%s: %.1f s] " % (self._testMethodName, time.monotonic() - self.started))

    def assertStoppedBy(self, sig, send):
        """A training launch that `send(launcher pid)` signals with `sig`
        exits 128 + sig, and no process of it is left STOP_TIMEOUT_S on."""
        with Launch(sig.name, *TRAINING) as launch:
            launch.wait_training(TRAINING_PROCESSES, START_TIMEOUT_S)
            processes = dict(launch.seen)
            signalled = time.monotonic()
            send(launch.process.pid)
            code = launch.wait(STOP_TIMEOUT_S)
            exited = time.monotonic() - signalled
            left, _ = wait_gone(processes, max(0.0, STOP_TIMEOUT_S - exited))
            self.assertEqual(left, {}, "%d of the launch's %d processes still run %.1f s after %s"
                             % (len(left), len(processes), time.monotonic() - signalled,
                                sig.name))
            gone = time.monotonic() - signalled
            self.assertEqual(code, 128 + sig, "the launcher's exit code after %s" % sig.name)
            print("%s: the launcher exited %d in %.1f s, 0 of %d processes left after %.1f s"
                  % (sig.name, code, exited, len(processes), gone))

    def test_sigterm_stops_every_process_of_the_launch(self):
        self.assertStoppedBy(signal.SIGTERM, lambda pid: os.kill(pid, signal.SIGTERM))

    def test_sighup_stops_every_process_of_the_launch(self):
        self.assertStoppedBy(signal.SIGHUP, lambda pid: os.kill(pid, signal.SIGHUP))

    def test_ctrl_c_in_a_terminal_stops_every_process_of_the_launch(self):
        # A terminal's Ctrl-C: SIGINT to its foreground process group.
        self.assertStoppedBy(signal.SIGINT, lambda pid: os.killpg(pid, signal.SIGINT))

    def test_a_killed_launcher_takes_its_processes_along(self):
        with Launch("sigkill", *TRAINING) as launch:
            launch.wait_training(TRAINING_PROCESSES, START_TIMEOUT_S)
            processes = dict(launch.seen)
            table = process_table()
            children = {pid: start for pid, start in processes.items()
                        if table.get(pid, (None,))[0] == launch.process.pid}
            self.assertEqual(len(children), 5, "the scheduler, 2 servers and 2 scripts")
            killed = time.monotonic()
            launch.process.kill()
            launch.process.wait()
            left, _ = wait_gone(children, 5)
            self.assertEqual(left, {}, "the launcher's children outlive it")
            children_gone = time.monotonic() - killed
            left, _ = wait_gone(processes, 15)
            self.assertEqual(left, {}, "%d of the launch's %d processes outlive the launcher"
                             % (len(left), len(processes)))
            print("SIGKILL: the launcher's 5 children gone after %.1f s, all %d processes after "
                  "%.1f s" % (children_gone, len(processes), time.monotonic() - killed))

    def assertEndsQuickly(self, launch, code, within_s, why):
        """The launch exits `code` (`why` that code) within `within_s`
        seconds of its start, nothing of it left running: the seconds."""
        got = launch.wait(within_s + 20)
        seconds = time.monotonic() - launch.started
        self.assertEqual(got, code, "%s (None: still running after %d s)" % (why, within_s + 20))
        self.assertLess(seconds, within_s)
        self.assertEqual(still_running(launch.seen), {})
        return seconds

    def test_a_missing_script_is_exit_2_before_anything_starts(self):
        missing = pathlib.Path(tempfile.mkdtemp(prefix="launcher-missing-"), "no_such_script.py")
        with Launch("missing", "--job=%s" % TINY_JOB, "--servers=2", "--workers=2",
                    str(missing)) as launch:
            seconds = self.assertEndsQuickly(launch, 2, 10, "the launcher's bad-argument code")
            self.assertFalse((launch.logs / "scheduler.log").exists(), "a scheduler was started")
            print("missing script: exit 2 in %.1f s, %d processes started"
                  % (seconds, len(launch.seen)))

    def test_a_job_the_scheduler_refuses_is_its_exit_code(self):
        job = pathlib.Path(tempfile.mkdtemp(prefix="launcher-job-"), "bad.pbtxt")
        job.write_text('name: "bad"\nmodel { kind: NO_SUCH_KIND }\nclocks: 10\n')
        with Launch("bad_job", "--job=%s" % job, "--servers=2", "--workers=2",
                    str(TINY_WORKER)) as launch:
            seconds = self.assertEndsQuickly(launch, 2, 10, "the scheduler's bad-input code")
            print("bad job: exit 2 in %.1f s" % seconds)

    def test_scripts_that_fail_before_the_job_starts_end_the_launch_in_seconds(self):
        script = pathlib.Path(tempfile.mkdtemp(prefix="launcher-script-"), "fails.py")
        script.write_text("raise SystemExit(3)\n")
        with Launch("fails", "--job=%s" % TINY_JOB, "--servers=2", "--workers=2",
                    str(script)) as launch:
            seconds = self.assertEndsQuickly(launch, 3, 40, "the scripts' exit code")
            print("scripts exit 3 at once: the launcher exited 3 in %.1f s, %d processes seen, "
                  "none left" % (seconds, len(launch.seen)))

    def test_a_short_job_ends_zero_and_done(self):
        with Launch("short", "--job=%s" % TINY_JOB, "--servers=2", "--workers=2",
                    "--scheduler_flags=--clocks=20", str(TINY_WORKER)) as launch:
            code = launch.wait(START_TIMEOUT_S)
            self.assertEqual(code, 0, "the launcher's exit code (None: still running)")
            with open(launch.logs / "status.json") as f:
                self.assertEqual(json.load(f)["job_state"], "DONE")
            self.assertEqual(still_running(launch.seen), {})
            print("short job: exit 0 in %.1f s, DONE, %d processes"
                  % (time.monotonic() - launch.started, len(launch.seen)))

if __name__ == "__main__":
    local_cluster.main("launcher_test")
