"""pstrain's wheel as a new user meets it: deploy/wheel.py builds it from
the built library and daemons; a fresh venv (Debian's python3 with
--system-site-packages, for its python3-torch) installs it with pip, no
index; from a folder outside the repository, with no PYTHONPATH,
PSTRAIN_LIB or PSTRAIN_BIN, `python -m pstrain.run` starts 2 servers and
runs the CNN example (a copy, beside its data module) as 2 workers for 20
clocks:

- the launcher exits 0, the scheduler's final status is DONE, both workers
  FINISHED with a test accuracy;
- the package imports from the venv's site-packages, its library is the
  wheel's, and every gRPC and protobuf library mapped into the process is
  the wheel's copy (pstrain.libs), none the system's.

By hand: python3 tests/python/wheel_test.py (from bazel-bin).
"""

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

import local_cluster
from local_cluster import binary, python_with_torch, runfile

TIMEOUT_S = 600
WORKERS = 2
# What the venv's interpreter reports: where pstrain and its libraries are.
PROBE = """
import json, re
import pstrain, pstrain._capi as capi
capi.lib()
maps = open("/proc/self/maps").read()
print(json.dumps({"package": pstrain.__file__, "version": pstrain.__version__,
                  "library": capi.lib()._name,
                  "mapped": sorted(set(re.findall(r"(/\\S*lib(?:grpc|protobuf)\\S*)", maps)))}))
"""


def build_wheel(out):
    spec = importlib.util.spec_from_file_location("wheel", runfile("deploy/wheel.py"))
    wheel = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wheel)
    return wheel.build_wheel(out, runfile("python/pstrain"), binary(wheel.LIBRARY),
                             {name: binary(path) for name, path in wheel.BINARIES.items()})


def clean_env():
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "PSTRAIN_LIB", "PSTRAIN_BIN", "PSTRAIN_FLAGS",
                        "PSTRAIN_SCHEDULER")}
    env.update(PIP_NO_CACHE_DIR="1", PIP_DISABLE_PIP_VERSION_CHECK="1",
               OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    return env


class WheelTest(unittest.TestCase):
    def test_the_wheel_installs_in_a_venv_and_runs_an_example_from_elsewhere(self):
        base = tempfile.mkdtemp(prefix="pstrain-wheel-", dir=os.environ.get("TEST_TMPDIR"))
        wheel = build_wheel(__import__("pathlib").Path(base, "dist"))
        python = "/usr/bin/python3"
        if subprocess.run([python, "-c", "import torch"], capture_output=True).returncode:
            python = python_with_torch()
        venv = os.path.join(base, "venv")
        env = clean_env()
        subprocess.run([python, "-m", "venv", "--system-site-packages", venv], check=True,
                       env=env)
        vpython = os.path.join(venv, "bin", "python")
        install = subprocess.run([vpython, "-m", "pip", "install", "--no-index", str(wheel)],
                                 capture_output=True, text=True, env=env)
        self.assertEqual(install.returncode, 0, install.stdout + install.stderr)

        work = os.path.join(base, "elsewhere")
        os.makedirs(work)
        for name in ("cnn_fashion_mnist.py", "fashion_mnist.py"):
            shutil.copy(runfile("examples/torch/" + name), work)
        shutil.copy(runfile("tests/python/jobs/cnn_external.pbtxt"), work)
        probe = subprocess.run([vpython, "-c", PROBE], cwd=work, capture_output=True,
                               text=True, env=env)
        self.assertEqual(probe.returncode, 0, probe.stderr)
        where = json.loads(probe.stdout)
        site = os.path.realpath(venv)
        self.assertTrue(os.path.realpath(where["package"]).startswith(site), where)
        self.assertTrue(os.path.realpath(where["library"]).startswith(site), where)
        self.assertTrue(where["mapped"], where)
        for path in where["mapped"]:
            self.assertIn("/pstrain.libs/", path, where)

        logs = os.path.join(base, "logs")
        run = subprocess.run(
            [vpython, "-m", "pstrain.run", "--job=cnn_external.pbtxt", "--servers=2",
             "--workers=%d" % WORKERS, "--scheduler_flags=--clocks=20", "--logs=" + logs,
             "cnn_fashion_mnist.py", "--threads=1"],
            cwd=work, capture_output=True, text=True, env=env, timeout=TIMEOUT_S)
        self.assertEqual(run.returncode, 0, run.stdout[-3000:] + run.stderr[-3000:])
        with open(os.path.join(logs, "status.json")) as f:
            status = json.load(f)
        self.assertEqual(status["job_state"], "DONE")
        workers = [m for m in status["members"] if m["role"] == "WORKER"]
        self.assertEqual([m["state"] for m in workers], ["FINISHED"] * WORKERS)
        for m in workers:
            self.assertGreater(m["worker"]["test_accuracy"], 0.3, m)
        print("wheel %s (%.1f MB): pip install in a venv of %s; pstrain.run from %s: DONE, "
              "accuracy %s; gRPC and protobuf from the wheel (%d libraries mapped)"
              % (wheel.name, wheel.stat().st_size / 1e6, python, work,
                 [m["worker"]["test_accuracy"] for m in workers], len(where["mapped"])))


if __name__ == "__main__":
    local_cluster.main("wheel_test")
