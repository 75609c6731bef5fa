#!/usr/bin/env bash
# Set up (if needed) and run the whole test suite. Extra arguments go to pytest.
# Tests run on STINT_TEST_WORKERS xdist workers (default 3: most end-to-end tests wait on real
# processes, so more workers than the two cores pay); STINT_TEST_WORKERS=0 runs them in one process.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
exec .venv/bin/python -m pytest -n "${STINT_TEST_WORKERS:-3}" --dist loadgroup "$@"
