#!/usr/bin/env bash
# Vendor the web console's charting library (uPlot, MIT, from npm) into the package, so the
# gateway serves every asset itself (no CDN) and the wheel ships it. The copied files are
# committed; re-run after changing UPLOT_VERSION.
set -euo pipefail
cd "$(dirname "$0")/.."
UPLOT_VERSION=1.6.32
dest=lakesync/api/console/vendor
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && npm pack --silent "uplot@$UPLOT_VERSION" >/dev/null && tar xzf "uplot-$UPLOT_VERSION.tgz")
mkdir -p "$dest"
cp "$work/package/dist/uPlot.iife.min.js" "$dest/uplot.min.js"
cp "$work/package/dist/uPlot.min.css" "$dest/uplot.min.css"
cp "$work/package/LICENSE" "$dest/uplot.LICENSE.txt"
echo "uPlot $UPLOT_VERSION vendored into $dest"
