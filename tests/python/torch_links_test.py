"""PyTorch workers on slow links: deploy/local_cluster.sh --torch with
--worker_links runs each worker script (examples/torch/cnn_fashion_mnist.py)
in a network namespace of its own behind a shaped link. Facts from the
scheduler's final status: the job ends, each worker is a PyTorch worker on
its own end of its own link, no payload went through shared memory, and
its clocks took at least as long as their bytes need on the link;
afterwards no namespace is left. Needs root (network namespaces) and a python3 with torch.
"""

import json
import os
import pathlib
import subprocess
import tempfile
import unittest

from local_cluster import binary, python_with_torch, runfile

MBIT = 16  # 2 MB/s each way
CLOCKS = 8
BURST = 256 * 1024  # the link's token bucket (deploy/netem.sh)


def namespaces():
    return subprocess.run(["/usr/sbin/ip", "netns", "list"], stdout=subprocess.PIPE, text=True,
                          check=True).stdout


def netns_unavailable():
    """Why network namespaces cannot be made here, or None (as
    tests/netns.cc's Netns::Unavailable): root is not enough in a chroot or
    a container where `ip netns add` cannot mount."""
    if os.geteuid() != 0:
        return "network namespaces need root"
    probe = "pstrain-probe-%d" % os.getpid()
    try:
        added = subprocess.run(["/usr/sbin/ip", "netns", "add", probe], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "ip netns add fails here: %s" % e
    if added.returncode != 0:
        return "ip netns add fails here: %s" % added.stdout.strip()
    subprocess.run(["/usr/sbin/ip", "netns", "del", probe], timeout=10, check=False)
    return None


class TorchLinksTest(unittest.TestCase):
    def setUp(self):
        why = netns_unavailable()
        if why:
            self.skipTest(why)

    def test_torch_workers_train_behind_links_no_faster_than_them(self):
        python = python_with_torch()
        if python is None:
            self.skipTest("no python3 with torch (Debian's python3-torch)")
        logs = pathlib.Path(os.environ.get("TEST_TMPDIR", tempfile.mkdtemp()), "links")
        bin_dir = binary("scheduler/ps_scheduler").parent.parent
        done = subprocess.run(
            ["/bin/bash", str(runfile("deploy/local_cluster.sh")),
             "--job=%s" % runfile("tests/python/jobs/cnn_external.pbtxt"),
             "--torch=%s" % runfile("examples/torch/cnn_fashion_mnist.py"),
             "--bin=%s" % bin_dir, "--logs=%s" % logs, "--worker_links=--rate=%d" % MBIT,
             "--", "--clocks=%d" % CLOCKS],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=300,
            check=False, env=dict(os.environ, PSTRAIN_PYTHON=python))
        self.assertEqual(done.returncode, 0, done.stdout[-3000:])

        members = json.loads((logs / "status.json").read_text())["members"]
        workers = [m for m in members if m["role"] == "WORKER"]
        self.assertEqual(len(workers), 2)
        links = set()
        for m in members:
            self.assertEqual(int(m.get("shm_bytes", 0)), 0, m["address"])
        for w in workers:
            self.assertEqual(w["worker"]["frontend"], "pytorch")
            host, _ = w["address"].rsplit(":", 1)
            self.assertTrue(host.startswith("10.213.") and host.endswith(".2"), w["address"])
            links.add(host.split(".")[2])
        self.assertEqual(len(links), 2, "a link of its own per worker")
        # Megabytes each way in 8 clocks of the CNN, which a 2 MB/s link
        # carries no faster than its rate: the seconds spent in clocks
        # (train_s, from the second clock on) are at least those of their
        # bytes, less two clocks' worth (the first pull and clock) and the
        # link's burst. Unshaped, those clocks take a fraction of a second.
        for w in workers:
            moved = max(int(w["bytes_in"]), int(w["bytes_out"]))
            self.assertGreater(moved, 4_000_000)
            floor = (moved * (CLOCKS - 2) / CLOCKS - BURST) / (MBIT * 1e6 / 8)
            self.assertGreaterEqual(float(w["worker"]["train_s"]), floor, w)
        left = namespaces().split()
        for n in links:
            self.assertNotIn("pstrain-netem-%s" % n, left)


if __name__ == "__main__":
    unittest.main()
