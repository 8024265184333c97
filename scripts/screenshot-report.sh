#!/usr/bin/env bash
# Render a kvverify report page (default reports/index.html) or a timeline SVG to a PNG with
# headless Chromium (Debian package `chromium`). Nothing is fetched from the network: every
# host name resolves to nothing, and the page is read from disk.
#
#   scripts/screenshot-report.sh [INPUT] [OUTPUT.png] [WIDTHxHEIGHT]
#
# INPUT defaults to reports/index.html, OUTPUT to INPUT with .png, the size to 1280x2400
# for a page and to the SVG's own width and height for an .svg. $CHROMIUM overrides the
# browser. Exit 2: no such input; 3: no Chromium; otherwise Chromium's status.
set -euo pipefail
in=${1:-reports/index.html}
out=${2:-${in%.*}.png}
size=${3:-}
if [ ! -f "$in" ]; then
  echo "screenshot-report.sh: $in: no such file (run \`kvverify report\` first)" >&2
  exit 2
fi
browser=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)}
if [ -z "$browser" ]; then
  echo "screenshot-report.sh: no Chromium found (Debian: apt-get install chromium)" >&2
  exit 3
fi
if [ -z "$size" ]; then
  if [[ "$in" == *.svg ]]; then
    w=$(grep -o -m1 '<svg[^>]* width="[0-9]*"' "$in" | sed 's/.* width="\([0-9]*\)"/\1/')
    h=$(grep -o -m1 '<svg[^>]* height="[0-9]*"' "$in" | sed 's/.* height="\([0-9]*\)"/\1/')
    size="${w:-960}x${h:-600}"
  else
    size=1280x2400
  fi
fi
abs_in="$(cd "$(dirname "$in")" && pwd)/$(basename "$in")"
mkdir -p "$(dirname "$out")"
abs_out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
profile=$(mktemp -d)
trap 'rm -rf "$profile"' EXIT
# --no-sandbox: Chromium refuses to run as root (containers, CI) with its sandbox on
"$browser" --headless --no-sandbox --disable-gpu --hide-scrollbars --no-first-run \
  --disable-extensions --disable-background-networking --host-resolver-rules="MAP * ~NOTFOUND" \
  --user-data-dir="$profile" --window-size="${size/x/,}" --screenshot="$abs_out" "file://$abs_in" \
  >/dev/null 2>&1
test -s "$abs_out"
echo "$out ($size)"
