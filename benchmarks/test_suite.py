"""Wall time of the whole test suite (what `make test` runs after set-up).

.venv/bin/python benchmarks/test_suite.py
"""

import subprocess
import sys
import time
from pathlib import Path

start = time.perf_counter()
root = Path(__file__).resolve().parent.parent
result = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"], cwd=root)
print(f"test suite wall time: {time.perf_counter() - start:.1f} s (exit code {result.returncode})")
sys.exit(result.returncode)
