"""Specifications of lab/gpu_check.py, on the CPU: its steps at a few thousand parameters (--device=cpu --tiny),
its table and exit status, a failing step, a step past its time limit, and how it reads the races' figures.

    python -m pytest -q tests/test_gpu_check.py
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ENV, ROOT, assert_interrupted, assert_one_line_error, kill_all, run, stops_at_their_defaults

sys.path.insert(0, os.path.join(ROOT, "lab"))
import gpu_check  # noqa: E402


def rows(stdout):
    """{step: (status, figure)} of the table."""
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in stdout.splitlines() if line.startswith("| ")]
    return {c[0]: (c[1], c[2]) for c in cells[1:]}


def test_without_a_gpu_it_says_so_in_one_line():
    result = run("lab/gpu_check.py", cwd=ROOT, env={"CUDA_VISIBLE_DEVICES": ""}, check=False)
    assert_one_line_error(result, "no CUDA GPU is visible here", "a machine with one")


def test_its_steps_run_on_the_cpu_and_a_failing_step_is_a_FAIL_row_and_exit_status_1(tmp_path):
    result = run("lab/gpu_check.py", "--device=cpu", "--tiny", f"--out={tmp_path / 'a'}", "--jobs=2",
                 "--only=resume|ddp", cwd=tmp_path, check=False, timeout=240)
    table = rows(result.stdout)
    assert result.returncode == 0 and set(table) == {"resume float16", "ddp torchrun"}, result.stdout
    assert table["resume float16"] == ("ok", "5 evaluations identical, to step 4")
    assert table["ddp torchrun"][0] == "ok" and "losses of one plain process" in table["ddp torchrun"][1]
    assert "2 steps in" in result.stdout and "2 ok, 0 short of a target, 0 failed" in result.stdout
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert {r["step"]: (r["status"], r["figure"]) for r in summary["steps"]} == table
    result = run("lab/gpu_check.py", "--device=cpu", "--tiny", f"--out={tmp_path / 'b'}",
                 "--only=baseline float16 eager", "--fail=train baseline float16 eager", cwd=tmp_path, check=False)
    assert result.returncode == 1 and rows(result.stdout) == {"train baseline float16 eager": (
        "FAIL", "error: unknown config key 'forced_failure' in the command line; see python train.py --help")}
    assert "0 ok, 0 short of a target, 1 failed" in result.stdout


def test_a_step_past_its_time_limit_is_ended_with_its_whole_process_group(tmp_path):
    pid_file = tmp_path / "grandchild.pid"
    code = ("import subprocess, sys, time\n"  # a worker process (as torch.compile starts them), then a hang
            f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
            f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
            "print('started', flush=True)\ntime.sleep(120)\n")
    status, seconds = gpu_check.run_command([sys.executable, "-c", code], str(tmp_path / "out.txt"), 3,
                                            str(tmp_path), os.environ)
    assert status is None and seconds < 30 and (tmp_path / "out.txt").read_text() == "started\n"
    pid = int(pid_file.read_text())
    try:  # gone, or a zombie whose parent was killed too: never still running
        with open(f"/proc/{pid}/stat") as f:
            assert f.read().split(") ")[1][0] in "ZX"
    except FileNotFoundError:
        pass


def test_checks_read_the_figures_and_fail_a_resume_whose_losses_differ(tmp_path):
    args = argparse.Namespace(device="cuda", tiny=False, out=str(tmp_path))
    side_by_side, alone = gpu_check.steps(args, sys.executable)
    steps = {s.name: s for s in side_by_side + alone}
    assert len([s for s in side_by_side if s.name.startswith("train ")]) == 12  # 3 variants x 2 dtypes x 2
    race = [dict(model="ours baseline", figure="vs_hf", value=1.31, target=1.2, met=True),
            dict(model="ours encdec", figure="vs_baseline", value=0.8, target=0.9, met=False),
            dict(model="ours parallel", figure="mfu", value=0.22, target=0.25, met=False)]
    (tmp_path / "race_train.json").write_text(json.dumps({"train": {"targets": race}}))
    assert steps["race train"].check([]) == (
        "short", "baseline 1.31x HF, encdec 0.80x ours (<0.90x), parallel MFU 22% (<25%)")
    decode = [dict(model=m, batch=b, vs_hf=v) for m, b, v in (("ours baseline", 1, 6.0), ("ours encdec", 8, 1.1))]
    (tmp_path / "race_decode.json").write_text(json.dumps({"decode": {"rows": decode}}))
    assert steps["race decode"].check([]) == ("ok", "batch 1: baseline 6.0x HF, batch 8: encdec 1.10x HF")
    for name, loss in (("resume_straight", 2.5), ("resume_half", 2.6)):
        os.makedirs(tmp_path / "runs" / name)
        (tmp_path / "runs" / name / "log.jsonl").write_text(
            json.dumps({"iter": 40, "train_loss": loss, "val_loss": 2.7}) + "\n")
    status, figure = steps["resume float16"].check([])
    assert status == "FAIL" and "resumed losses differ" in figure


def test_accumulation_check_fails_a_compiled_step_that_lost_a_micro_steps_gradient(tmp_path):
    args = argparse.Namespace(device="cuda", tiny=False, out=str(tmp_path))
    steps = {s.name: s for group in gpu_check.steps(args, sys.executable) for s in group}
    [eager, graphs, accumulated] = steps["accumulation compiled"].commands
    assert "--compile=False" in eager and "--batch_size=32" in eager and "--gradient_accumulation_steps=1" in eager
    assert "--compile=True" in graphs and "--batch_size=32" in graphs
    assert "--compile=True" in accumulated and "--batch_size=8" in accumulated
    assert "--gradient_accumulation_steps=4" in accumulated

    def write(name, grad_norms):
        os.makedirs(tmp_path / "runs" / name, exist_ok=True)
        records = [dict(iter=0, train_loss=2.5, val_loss=2.6, grad_norm=None)] + [
            dict(iter=2 * (i + 1), train_loss=2.4 - i / 10, val_loss=2.5 - i / 10, grad_norm=g)
            for i, g in enumerate(grad_norms)]
        (tmp_path / "runs" / name / "log.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    write("eager_1x32", [1.0, 0.8])
    write("compiled_1x32", [1.0005, 0.8])  # float32 summed in another order
    write("compiled_4x8", [1.0, 0.8 * 1.002])
    assert steps["accumulation compiled"].check([]) == (
        "ok", "compiled_1x32, compiled_4x8 as eager_1x32 (within 2.0e-03)")
    write("compiled_4x8", [1.0, 0.2])  # the gradients of one micro-step of four
    status, figure = steps["accumulation compiled"].check([])
    assert (status, figure) == ("FAIL", "compiled_4x8's gradient norms differ from eager_1x32's by 75.0%")


def gone(pid):
    """Whether process pid has ended: no such process, or a zombie whose parent has not reaped it yet."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] in "ZX"
    except FileNotFoundError:
        return True


@pytest.mark.parametrize("stop", ["SIGINT", "SIGTERM"])  # Ctrl-C; docker, Kubernetes, a cluster's scheduler
def test_a_stop_reaches_every_running_step_and_the_check_ends_within_seconds_in_one_line(tmp_path, stop):
    """Its steps run in sessions of their own, which the terminal's Ctrl-C does not reach: the check passes the stop on
    to each running step's whole process group (a worker process too), kills a step that goes on regardless after a
    few seconds, starts no other step, writes no summary, and says so in one line."""
    fifo = tmp_path / "started"
    os.mkfifo(fifo)
    step = ("import os, signal, subprocess, sys, time\n"  # a worker process (as torch.compile starts them), then a hang
            "if sys.argv[1] == 'stubborn':\n"  # a step that goes on after a stop, as compiled steps did for minutes
            "    for s in (signal.SIGINT, signal.SIGTERM):\n        signal.signal(s, signal.SIG_IGN)\n"
            "worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
            f"open({str(fifo)!r}, 'w').write(f'{{os.getpid()}} {{worker.pid}}\\n')\n"
            "time.sleep(120)\n")
    code = ("import sys\n"
            f"sys.path.insert(0, {os.path.join(ROOT, 'lab')!r})\n"
            "import gpu_check\n"
            "gpu_check.STOP_WAIT = 1\n"
            f"hang = lambda name: gpu_check.Step(name, [[sys.executable, '-c', {step!r}, name]], 600, "
            "lambda outputs: ('ok', ''))\n"
            "gpu_check.steps = lambda args, python: ([hang('stubborn'), hang('plain'), hang('third')],\n"
            "                                        [hang('race')])\n"
            f"sys.argv = ['gpu_check.py', '--device=cpu', '--tiny', '--jobs=2', '--out={tmp_path / 'out'}']\n"
            "gpu_check.main()\n")
    process = subprocess.Popen([sys.executable, "-c", code], cwd=tmp_path, env=ENV, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, preexec_fn=stops_at_their_defaults())
    pids = []
    try:
        while len(pids) < 4:  # both steps and their workers started: no waiting on a clock
            with open(fifo) as f:
                pids += [int(pid) for line in f.read().splitlines() for pid in line.split()]
        start = time.monotonic()
        process.send_signal(getattr(signal, stop))  # to the check alone, as the terminal's Ctrl-C reaches it
        stdout, stderr = process.communicate(timeout=60)
        seconds = time.monotonic() - start
    finally:
        kill_all(process.pid, *pids)
        process.wait()
    assert process.returncode == 130 and seconds < 20, (seconds, stderr)
    assert_interrupted(subprocess.CompletedProcess([], 130, "", stderr), "the check and its running steps were "
                       "stopped after 0 of 4 steps had ended", f"{tmp_path / 'out'}/logs/", "no summary.json")
    deadline = time.monotonic() + 10  # a worker killed with its group is reaped by init: at once, or nearly
    while not all(gone(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert all(gone(pid) for pid in pids), [pid for pid in pids if not gone(pid)]
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    assert os.read(reader, 100) == b""  # no other step was started
    os.close(reader)
    assert "| stubborn" not in stdout and not (tmp_path / "out" / "summary.json").exists()


def test_only_matching_no_step_is_one_line_naming_the_steps(tmp_path):
    result = run("lab/gpu_check.py", "--device=cpu", "--only=no such step", cwd=tmp_path, check=False)
    assert_one_line_error(result, "--only='no such step' matches none of the steps, which are: train baseline "
                          "bfloat16 compiled, ", "resume float16, ddp torchrun, ", "race train, race decode")
    assert os.listdir(tmp_path) == []  # nothing made


@pytest.mark.parametrize("where", ["itself", "a folder in it"])
def test_out_on_a_read_only_disk_is_one_line(small_disk, tmp_path, where):
    out = small_disk("read_only", 100, read_only=True) / ("" if where == "itself" else "gpu_check")
    result = run("lab/gpu_check.py", "--device=cpu", "--tiny", f"--out={out}", cwd=tmp_path, check=False)
    assert_one_line_error(result, f"cannot write in --out={str(out).rstrip('/')} (", "give --out a folder you can "
                          "write to")
