#!/usr/bin/env bash
# The floor plan, checked on the sources: every include of the library is spelled <mixprec/...>, points at
# a file that exists, and goes down or sideways within its own folder, never up, so no two folders
# include each other; a public header never includes an internal one (detail/ is not installed).
# Levels, lowest first: autodiff/tensor/ (with detail/ and arch/), autodiff/, optim/, amp/, then
# models/layers/, models/data/, models/io/ and models/dist/ (which do not include one another), models/training/.
#
#   tests/include_graph.sh SOURCE_DIR
set -uo pipefail
cd "$1" || exit 1

level_of() { # level_of PATH: the folder's level, and its name for siblings of one level
    case "$1" in
    autodiff/tensor/*) echo "0 tensor" ;;
    autodiff/*) echo "1 autodiff" ;;
    optim/*) echo "2 optim" ;;
    amp/*) echo "3 amp" ;;
    models/layers/*) echo "4 layers" ;;
    models/data/*) echo "4 data" ;;
    models/io/*) echo "4 io" ;;
    models/dist/*) echo "4 dist" ;;
    models/training/*) echo "5 training" ;;
    mixprec.hpp) echo "9 umbrella" ;;
    *) echo "? ?" ;;
    esac
}

bad=0
complain() {
    echo "include_graph: $*" >&2
    bad=$((bad + 1))
}
while IFS= read -r file; do
    read -r level folder < <(level_of "$file")
    [ "$level" = "?" ] && complain "$file is in no folder of the floor plan"
    while IFS= read -r line; do
        case "$line" in
        *'#include "'*) complain "$file: $line (spell library includes <mixprec/...>)"; continue ;;
        esac
        target="${line#*<mixprec/}"
        target="${target%%>*}"
        [ "$target" = version.hpp ] && continue
        [ -e "$target" ] || { complain "$file: $line names no file"; continue; }
        read -r to_level to_folder < <(level_of "$target")
        if [ "$to_level" -gt "$level" ] || { [ "$to_level" = "$level" ] && [ "$to_folder" != "$folder" ]; }; then
            complain "$file ($folder) includes $target ($to_folder): up or sideways"
        fi
        if [[ "$target" == */detail/* && "$file" == *.hpp && "$file" != */detail/* ]]; then
            complain "$file is public but includes the internal $target"
        fi
    done < <(grep -E '^#include +("|<mixprec/)' "$file")
done < <(git ls-files -co --exclude-standard autodiff optim amp models mixprec.hpp 2>/dev/null | grep -E '\.(hpp|cpp)$' ||
         find autodiff optim amp models mixprec.hpp -name '*.[hc]pp')

if [ "$bad" -ne 0 ]; then
    echo "include_graph: FAILED: $bad includes break the floor plan" >&2
    exit 1
fi
echo "include_graph: every include points down"
