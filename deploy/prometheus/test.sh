#!/usr/bin/env bash
# Checks the kopiur alerting rules with promtool: syntax (`check rules`) and the unit tests
# in tests/ (`test rules`). Exits non-zero on any failure, and with 127 when promtool is
# missing (Debian/Ubuntu: `apt-get install prometheus` ships it).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
PROMTOOL="${PROMTOOL:-promtool}"
if ! command -v "$PROMTOOL" >/dev/null 2>&1; then
  echo "promtool not found (install the Debian package 'prometheus', or set PROMTOOL=/path/to/promtool)" >&2
  exit 127
fi
cd "$HERE"
"$PROMTOOL" check rules kopiur-rules.yaml
shopt -s nullglob
tests=(tests/*.yaml)
if [ ${#tests[@]} -eq 0 ]; then
  echo "no promtool unit tests under $HERE/tests" >&2
  exit 1
fi
"$PROMTOOL" test rules "${tests[@]}"
