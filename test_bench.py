"""bench.py runs end to end in its quick mode and reports every variant (its figures are checked by reading them, not here)."""
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.abspath(__file__))


def test_quick_bench_reports_every_variant_with_identical_cached_sampling(tmp_path):
    out = tmp_path / "bench.json"
    cmd = [sys.executable, "bench.py", "--quick", "--configs=cpu", "--repeats=1", "--batch_size=2", f"--json={out}"]
    result = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert result.returncode == 0, result.stderr
    rows = json.loads(out.read_text())["rows"]
    assert [r["variant"] for r in rows] == ["baseline", "encdec", "parallel"]
    for r in rows:
        assert r["sample200_identical"], f"{r['variant']}: cached and uncached greedy samples differ"
        assert r["train_tokens_per_s"] > 0 and 0 < r["mfu"] and r["peak_mem_mib"] > 0
    assert "training tokens/s relative to the baseline" in result.stdout
