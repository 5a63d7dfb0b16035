#!/bin/sh
# Re-download the dashboard's vendored libraries from the npm registry at the versions pinned in
# package.json and copy their built files (and licences) here. Run from anywhere; needs npm.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cp "$here/package.json" "$tmp/"
(cd "$tmp" && npm install --no-audit --no-fund --ignore-scripts >/dev/null)
m="$tmp/node_modules"
cp "$m/uplot/dist/uPlot.iife.min.js" "$m/uplot/dist/uPlot.min.css" "$here/"
cp "$m/uplot/LICENSE" "$here/uPlot.LICENSE"
cp "$m/marked/lib/marked.umd.js" "$here/"
cp "$m/marked/LICENSE" "$here/marked.LICENSE"
cp "$m/dompurify/dist/purify.min.js" "$here/"
cp "$m/dompurify/LICENSE" "$here/dompurify.LICENSE"
# the source maps are not shipped; their references would only make browsers ask for them
sed -i '/sourceMappingURL/d' "$here"/*.js
echo "vendored: $(cd "$m" && for p in uplot marked dompurify; do node -p "require('./$p/package.json').name + '@' + require('./$p/package.json').version"; done | tr '\n' ' ')"
