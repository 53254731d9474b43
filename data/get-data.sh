#!/bin/sh
# Downloads the Sherlock Holmes canon and converts it to pure ASCII, the
# corpus `gpt train` reads by default (data/sherlock-ascii.txt).
# A copy already beside the repository (../shared/data/, as CI has) is used
# instead of the network.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
out="$here/sherlock-ascii.txt"
shared="$here/../../shared/data/sherlock-ascii.txt"
if [ -s "$out" ]; then
    echo "data: $out already present"
    exit 0
fi
if [ -s "$shared" ]; then
    cp "$shared" "$out.tmp" && mv "$out.tmp" "$out"
    echo "data: copied $shared"
    exit 0
fi
url=https://sherlock-holm.es/stories/plain-text/cano.txt
raw="$here/cano.txt"
if command -v curl >/dev/null 2>&1; then
    curl -fsSL "$url" -o "$raw.tmp"
else
    wget -q -O "$raw.tmp" "$url"
fi
mv "$raw.tmp" "$raw"
# Typographic quotes and dashes become their ASCII look-alikes; anything
# else outside ASCII is transliterated, and what cannot be is dropped.
iconv -f utf-8 -t ascii//TRANSLIT "$raw" | tr -d '\200-\377' > "$out.tmp"
mv "$out.tmp" "$out"
echo "data: wrote $out ($(wc -c < "$out") bytes)"
