"""The child processes of a benchmark: started so that they die with it,
killed at its exit, waited for with a deadline.

Used by bench/torch_bench.py and bench/gpu_shaped_bench.py (the
orchestrators start ps_scheduler, ps_server and the training processes of
each run).
"""
import ctypes
import os
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "python"))
from pstrain._port_file import read_address  # noqa: E402

_children = []  # every Popen started, to be killed at exit


def _die_with_parent():
    """preexec_fn: SIGKILL this child when the benchmark dies (Linux)."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # noqa: BLE001  (best effort; atexit kills them too)
        pass


def start(argv, log, env=None):
    with open(log, "wb") as out:
        p = subprocess.Popen([str(a) for a in argv], stdout=out, stderr=subprocess.STDOUT,
                             stdin=subprocess.DEVNULL, env=env, preexec_fn=_die_with_parent)
    _children.append(p)
    return p


def kill_all(processes=None, grace=3.0):
    """SIGTERM to every child still running, SIGKILL after `grace` s."""
    processes = _children if processes is None else processes
    alive = [p for p in processes if p.poll() is None]
    for p in alive:
        try:
            p.send_signal(signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace
    for p in alive:
        try:
            p.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    for p in processes:
        if p.poll() is not None and p in _children:
            _children.remove(p)


def on_signal(signum, _frame):
    """A signal handler: exits (so atexit's kill_all runs) with 128 + the signal."""
    raise SystemExit(128 + signum)


def wait_all(processes, timeout, what):
    """Waits for `processes` (name -> Popen) to exit; their exit codes.
    RuntimeError if one fails, TimeoutError after `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        for name, p in processes.items():
            code = p.poll()
            if code not in (None, 0):
                raise RuntimeError("%s: %s exited with code %d" % (what, name, code))
        if all(p.poll() is not None for p in processes.values()):
            return
        if time.monotonic() > deadline:
            running = [n for n, p in processes.items() if p.poll() is None]
            raise TimeoutError("%s: still running after %d s: %s"
                               % (what, timeout, ", ".join(running)))
        time.sleep(0.05)


def wait_port_file(path, process, timeout=30):
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


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def log_tails(directory, lines=25):
    text = []
    for name in sorted(os.listdir(directory)):
        if name.endswith(".log"):
            with open(os.path.join(directory, name), errors="replace") as f:
                tail = f.readlines()[-lines:]
            text.append("---- %s\n%s" % (name, "".join(tail)))
    return "".join(text)


def cpu_seconds(pid):
    """The CPU time (user + system) of running process `pid`, or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            fields = f.read().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def thread_cpu(pid):
    """{tid: CPU seconds} of process `pid`'s threads ({} once it is gone)."""
    out, tick = {}, os.sysconf("SC_CLK_TCK")
    try:
        tids = os.listdir("/proc/%d/task" % pid)
    except OSError:
        return out
    for tid in tids:
        try:
            with open("/proc/%d/task/%s/stat" % (pid, tid)) as f:
                fields = f.read().rpartition(")")[2].split()
            out[tid] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, ValueError, IndexError):
            pass
    return out


def torch_python(bench):
    """An interpreter that imports torch: this one or /usr/bin/python3;
    SystemExit naming `bench` when neither does."""
    for python in (sys.executable, "/usr/bin/python3"):
        if subprocess.run([python, "-c", "import torch"], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0:
            return python
    raise SystemExit("%s: no interpreter imports torch; pass --python=PATH" % bench)


def add_run_flags(parser, root):
    """The flags of the runs a PyTorch bench starts: --bin (the daemons and
    the library, under `root`/bazel-bin by default), --python, --timeout,
    --out, --keep."""
    parser.add_argument("--bin", default=os.path.join(root, "bazel-bin"),
                        help="where scheduler/ps_scheduler, server/ps_server and "
                        "worker/external/libpstrain_torch.so are")
    parser.add_argument("--python", default="",
                        help="the interpreter of the training processes")
    parser.add_argument("--timeout", type=int, default=600, help="seconds per run")
    parser.add_argument("--out", default="", help="write the JSON here too")
    parser.add_argument("--keep", action="store_true",
                        help="keep each run's logs (dirs in JSON)")
