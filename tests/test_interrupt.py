"""Ctrl-C (NOTE [interrupt]): exit 130, one line on stderr, no traceback, no partial file.

The subprocess tests send SIGINT to the command's whole process group, as a terminal does,
while the command is busy: in the MILP solver, in a sweep's worker processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import vdnnsim.cli as cli
from vdnnsim.yamlio import write_atomic

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGINT") or os.name != "posix",
                                reason="process groups and SIGINT are POSIX")


def _tree_cpu_s(pid: int) -> tuple[float, int] | None:
    """CPU seconds used so far by ``pid`` and its descendants, and how many descendants it
    has (from /proc; None where there is none)."""
    if not os.path.isdir("/proc/self"):
        return None
    stats: dict[int, tuple[int, float]] = {}  # pid -> (parent, cpu seconds)
    tick = os.sysconf("SC_CLK_TCK")
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                fields = Path(f"/proc/{d}/stat").read_text().rpartition(")")[2].split()
            except OSError:
                continue
            stats[int(d)] = (int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
    tree, grew = {pid}, True
    while grew:
        more = {q for q, (parent, _) in stats.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(stats[q][1] for q in tree if q in stats), len(tree) - 1


def _interrupt(argv: list[str], busy_cpu_s: float, cwd: Path,
               workers: bool = False) -> subprocess.CompletedProcess:
    """Run the command and Ctrl-C it once it is busy: once it (with its worker processes,
    which ``workers`` asks to have started) has used ``busy_cpu_s`` seconds of CPU, so
    that a loaded machine, slower to start it, does not interrupt it during its imports."""
    def child() -> None:  # a shell may start the tests with SIGINT ignored; a terminal does not
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    p = subprocess.Popen([sys.executable, "-m", "vdnnsim", *argv], cwd=cwd, text=True,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         preexec_fn=child, start_new_session=True)
    if _tree_cpu_s(p.pid) is None:  # no /proc: a wall-clock wait instead
        time.sleep(2 * busy_cpu_s)
    deadline = time.monotonic() + 600
    while p.poll() is None and time.monotonic() < deadline:
        used = _tree_cpu_s(p.pid)
        if used is None or (used[0] >= busy_cpu_s and (used[1] > 0 or not workers)):
            break
        time.sleep(0.05)
    if p.poll() is not None:
        out, err = p.communicate()
        pytest.fail(f"the command ended before it could be interrupted (rc {p.returncode}); "
                    f"give it more work: {err[-500:]}")
    os.killpg(p.pid, signal.SIGINT)
    try:
        out, err = p.communicate(timeout=600)
    except subprocess.TimeoutExpired:  # a hung teardown: end it, and say what it printed
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        pytest.fail(f"still running 600 s after Ctrl-C; stderr: {err[-1500:]!r}")
    return subprocess.CompletedProcess(argv, p.returncode, out, err)


def _no_partial_files(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir()]


def test_ctrl_c_in_the_milp_solver(tmp_path):
    # ResNet-50 (256) as profiled on the H200: its MILP takes many seconds on any machine
    trace = ROOT / "traces" / "h200_planner_12gib" / "resnet50_b256.yaml"
    out = tmp_path / "plan.yaml"
    proc = _interrupt(["plan", str(trace), "--budget", "12GiB", "--method", "milp",
                       "-o", str(out)], 4.0, tmp_path)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == "vdnnsim: interrupted\n"
    assert _no_partial_files(tmp_path) == []


def test_ctrl_c_in_a_sweep_with_worker_processes(tmp_path):
    study = tmp_path / "big.yaml"
    study.write_text("name: big\nsweep:\n  network: [vgg416, vgg316, vgg216, vgg116]\n"
                     "  batch_size: [32, 64, 128, 256, 512, 1024]\n"
                     "  gpu: [k40, titanx_maxwell, h200]\n"
                     "  policy: [vdnn_dyn, vdnn_all_m, vdnn_conv_p, vdnn_all_p, vdnn_conv_m]\n")
    proc = _interrupt(["sweep", str(study), "-o", str(tmp_path / "out.csv"), "--workers", "2",
                       "--no-progress"], 2.0, tmp_path, workers=True)
    assert proc.returncode == 130, proc.stderr
    assert proc.stderr == "vdnnsim: interrupted\n"
    assert _no_partial_files(tmp_path) == ["big.yaml"]


def test_main_turns_keyboard_interrupt_into_130(monkeypatch, capsys):
    def busy(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli.simulate, "cmd_list", busy)
    previous = signal.getsignal(signal.SIGINT)
    try:
        assert cli.main(["list"]) == 130
    finally:
        signal.signal(signal.SIGINT, previous)
    err = capsys.readouterr().err
    assert err == "vdnnsim: interrupted\n"


def test_an_interrupted_write_leaves_nothing(tmp_path):
    target = tmp_path / "x.yaml"

    def half_then_ctrl_c(f):
        f.write("a: 1\n")
        f.flush()
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_atomic(target, half_then_ctrl_c)
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_worker_that_dies_breaks_the_sweep_instead_of_hanging(tmp_path):
    # a worker killed from outside (the OOM killer, a crash) loses its job: the sweep must
    # end with an error, not wait for that job for ever
    script = tmp_path / "die.py"
    script.write_text(
        "import os\n"
        "import vdnnsim.study.run as run\n"
        "def die(items, base_dir, *rest):\n"
        "    os._exit(9)\n"
        "run._run_group = die  # forked workers inherit the patched module\n"
        "points = [{'network': 'alexnet', 'batch_size': b, 'gpu': 'k40'} for b in (8, 16, 32)]\n"
        "try:\n"
        "    run.run_points(points, workers=2)\n"
        "except Exception as exc:\n"
        "    print(type(exc).__name__)\n")
    proc = subprocess.run([sys.executable, str(script)], cwd=ROOT, text=True,
                          capture_output=True, timeout=600)
    assert proc.stdout.strip() == "BrokenProcessPool", proc.stderr[-800:]
