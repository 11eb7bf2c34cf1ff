#!/usr/bin/env bash
# Shows, for a running process (the bot), what it hands the kernel in pwrite calls against what
# Linux counts in its write_bytes, and why the two differ: the kernel counts a page-cache folio
# whole each time it becomes dirty, and sled syncs every write, so the next write dirties the same
# folio again.
#
# Usage: scripts/count-folio-writes.sh PID [SECONDS]   (10 seconds by default)
# Needs perf and the right to read kernel tracepoints (root, or perf_event_paranoid <= -1).
set -euo pipefail

pid=${1:?usage: count-folio-writes.sh PID [SECONDS]}
seconds=${2:-10}
command -v perf > /dev/null || { echo "perf is not installed" >&2; exit 1; }
[ -r "/proc/$pid/io" ] || { echo "no readable /proc/$pid/io" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# write_bytes is read inside the traced command, so both counts cover the same span.
perf record -q -o "$work/perf.data" -p "$pid" \
    -e syscalls:sys_enter_pwrite64 -e syscalls:sys_enter_sync_file_range \
    -e writeback:writeback_dirty_folio \
    -- sh -c "grep '^write_bytes:' /proc/$pid/io > '$work/before'; sleep $seconds;
        grep '^write_bytes:' /proc/$pid/io > '$work/after'" 2> "$work/perf.err" || {
    cat "$work/perf.err" >&2
    exit 1
}
if [ ! -s "$work/before" ] || [ ! -s "$work/after" ]; then
    echo "process $pid ended during the trace" >&2
    exit 1
fi
counted=$(( $(awk '{print $2}' "$work/after") - $(awk '{print $2}' "$work/before") ))
perf script -i "$work/perf.data" > "$work/events.txt" 2> "$work/script.err" || {
    cat "$work/script.err" >&2
    exit 1
}

# The bot writes files only through sled's log, so every pwrite call is one of sled's writes. A
# folio dirtied again by the write right after the one that dirtied it was made clean in between
# by that write's sync_file_range (sled syncs each buffer it writes), so the kernel counted it
# twice.
awk -v counted="$counted" -v seconds="$seconds" '
    # perf prints the count in hex, and not every awk reads hex.
    function hex(text,    value, i) {
        value = 0
        for (i = 1; i <= length(text); i++)
            value = value * 16 + index("0123456789abcdef", substr(text, i, 1)) - 1
        return value
    }
    /sys_enter_pwrite64/ {
        if (!match($0, /count: 0x[0-9a-f]+/)) next
        handed += hex(substr($0, RSTART + 9, RLENGTH - 9))
        writes += 1
        for (folio in by_last) delete by_last[folio]
        for (folio in by_this) by_last[folio] = 1
        for (folio in by_this) delete by_this[folio]
    }
    /sys_enter_sync_file_range/ { syncs += 1 }
    /writeback_dirty_folio/ {
        if (!match($0, /ino=[0-9]+ index=[0-9]+/)) next
        folio = substr($0, RSTART, RLENGTH)
        dirtied += 1
        if (folio in by_last) again += 1
        by_this[folio] = 1
    }
    END {
        if (writes == 0 || handed == 0 || dirtied == 0) {
            print "no writes traced in " seconds " s"
            exit 1
        }
        printf "%d pwrite calls (%d sync_file_range) in %d s handed the kernel %.1f MB (%.1f KB each)\n", writes, syncs, seconds, handed / 1e6, handed / writes / 1e3
        printf "the kernel counted %.1f MB in write_bytes (%.2f times), for %d folios made dirty (%.1f KB each)\n", counted / 1e6, counted / handed, dirtied, counted / dirtied / 1e3
        printf "%d of those folios (%.0f%%) had been made dirty by the write just before\n", again, 100 * again / dirtied
    }' "$work/events.txt"
