#!/bin/sh
# Creates an empty stand-in for every build target Cargo.toml names (the library, each [[bin]],
# [[bench]], [[test]] and [[example]]), so that the Dockerfile's dependency layer can build the
# dependencies before the real sources are copied. The list comes from the manifest itself, so a
# target added later cannot be missed. The stand-ins are written beside the manifest, so a workspace
# member's manifest gets its own. Usage: stub-targets.sh [path/to/Cargo.toml]
set -eu
cd "$(dirname "${1:-Cargo.toml}")"
MANIFEST=Cargo.toml
# Prints "kind<TAB>name<TAB>path" for each target table; path is empty when cargo infers it.
awk '
  function flush() { if (kind != "") printf "%s\t%s\t%s\n", kind, name, path; kind = "" }
  /^\[\[(bin|bench|test|example)\]\][[:space:]]*$/ { flush(); kind = $0; gsub(/[][[:space:]]/, "", kind); name = ""; path = ""; next }
  /^\[/ { flush(); next }
  kind != "" && /^[[:space:]]*name[[:space:]]*=/ { v = $0; sub(/^[^=]*=[[:space:]]*"/, "", v); sub(/".*$/, "", v); name = v }
  kind != "" && /^[[:space:]]*path[[:space:]]*=/ { v = $0; sub(/^[^=]*=[[:space:]]*"/, "", v); sub(/".*$/, "", v); path = v }
  END { flush() }
' "$MANIFEST" | while IFS="$(printf '\t')" read -r kind name path; do
  if [ -z "$path" ]; then
    case "$kind" in
      bin) path="src/bin/$name.rs" ;;
      bench) path="benches/$name.rs" ;;
      test) path="tests/$name.rs" ;;
      example) path="examples/$name.rs" ;;
    esac
  fi
  mkdir -p "$(dirname "$path")"
  echo 'fn main() {}' > "$path"
  echo "stand-in: $kind $name at $path"
done
# The library (src/lib.rs unless [lib] says otherwise; a stand-in is harmless when there is none).
mkdir -p src
: > src/lib.rs
echo "stand-in: lib at src/lib.rs"
