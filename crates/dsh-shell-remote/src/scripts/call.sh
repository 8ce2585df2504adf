# One call on the far side: bash -c <this> dsh-call <call id> <workdir> <command>, started
# with DSH_CALL_SCRIPT=<call id> in its environment (which the command does not get).
#
# The command runs as `bash -c <command>` in a process group of its own, with DSH_CALL=<call
# id> in its environment (and so in every descendant's, unless one scrubs it). Its parent is
# a `sleep` that never reaps it, so its wait status stays readable in /proc/<pid>/stat
# (field 52) once it exits: the call can tell an exit from a signal. Then what is left of
# the call (every process carrying the marker, sparing DSH_DETACH=1) is killed, and one last
# frame goes to stderr: \037dsh-status exit=<n>|signal=<n>|spawn=<ERRNO> oom=<0|1>. The first
# frame, before anything else, says the script runs (\037dsh-status started): the harness sends
# a kill only after it, so the kill finds this script (and waits for the command) or the command.
id=$1 dir=$2 cmd=$3
set -f
frame() { printf '\037dsh-status %s\n' "$1" >&2; }
frame started
if ! cd -- "$dir" 2>/dev/null; then
    if [ ! -e "$dir" ]; then frame 'spawn=ENOENT oom=0'
    elif [ ! -d "$dir" ]; then frame 'spawn=ENOTDIR oom=0'
    else frame 'spawn=EACCES oom=0'; fi
    exit 127
fi
# The out-of-memory kill counter of our own memory cgroup (v2 or v1), if one is readable.
oom_file=
while IFS=: read -r _ ctl path; do
    case ",$ctl," in
        ,,) c=/sys/fs/cgroup$path/memory.events ;;
        *,memory,*) c=/sys/fs/cgroup/memory$path/memory.oom_control ;;
        *) continue ;;
    esac
    if [ -r "$c" ]; then oom_file=$c; break; fi
done </proc/self/cgroup 2>/dev/null
if [ -z "$oom_file" ]; then
    for c in /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control; do
        if [ -r "$c" ]; then oom_file=$c; break; fi
    done
fi
oom_kills() {
    OOM=0
    [ -n "$oom_file" ] || return 0
    local k v
    while read -r k v; do [ "$k" = oom_kill ] && OOM=$v; done <"$oom_file"
}
leftovers() {
    PIDS=()
    local e p x mark detach entries
    set +f
    for e in /proc/[0-9]*/environ; do
        mapfile -d '' entries 2>/dev/null <"$e" || continue
        # One match over the whole environment rules most processes out; the entries of the
        # rest are looked at one by one (the marker and the opt-out count as whole entries).
        case "${entries[*]}" in *"DSH_CALL=$id"*) ;; *) continue ;; esac
        mark=0 detach=0
        for x in "${entries[@]}"; do
            case $x in "DSH_CALL=$id") mark=1 ;; DSH_DETACH=1) detach=1 ;; esac
        done
        p=${e#/proc/} p=${p%/environ}
        [ $mark = 1 ] && [ $detach = 0 ] && PIDS+=("$p")
    done
    set -f
}
oom_kills
before=$OOM
exec 4<&0 5>&1 6>&2
exec 7< <(
    unset DSH_CALL_SCRIPT
    set -m
    # The command starts once its parent is the `sleep`: a bash parent would reap it. Only
    # then does it take the marker, so a kill that comes sooner (which waits while this
    # script lives) finds the command itself, never the starter before its parent is set.
    bash -c 'n=0; while [ $n -lt 100000 ] && { ! read -r c </proc/$PPID/comm || [ "$c" != sleep ]; }
        do n=$((n + 1)); done 2>/dev/null; export DSH_CALL=$2; exec bash -c "$1"' dsh-cmd "$cmd" "$id" \
        <&4 >&5 2>&6 4<&- 5>&- 6>&- &
    printf '%s\n' "$!"
    exec sleep 2147483647 </dev/null 2>/dev/null 4<&- 5>&- 6>&-
)
keeper=$!
exec 0</dev/null 4<&- 5>&-
read -r pid <&7
status=
delay=0.0002
while [ -n "$pid" ]; do
    stat=
    read -r stat 2>/dev/null </proc/"$pid"/stat || break
    rest=${stat##*) }
    fields=($rest)
    if [ "${fields[0]}" = Z ]; then status=${fields[49]}; break; fi
    read -r -t "$delay" -u 7 _
    case $? in 0 | 1) break ;; esac
    case $delay in 0.0002) delay=0.0005 ;; 0.0005) delay=0.001 ;; 0.001) delay=0.002 ;; 0.002) delay=0.005 ;; 0.005) delay=0.01 ;; 0.01) delay=0.02 ;; *) delay=0.05 ;; esac
done
leftovers
[ ${#PIDS[@]} -gt 0 ] && kill -KILL "${PIDS[@]}" 2>/dev/null
kill -KILL "$keeper" 2>/dev/null
wait "$keeper" 2>/dev/null
oom_kills
oom=0
[ "$OOM" -gt "$before" ] 2>/dev/null && oom=1
if [ -z "$status" ]; then
    exit 255
elif [ $((status & 127)) -eq 0 ]; then
    frame "exit=$(((status >> 8) & 255)) oom=$oom"
    exit $(((status >> 8) & 255))
else
    frame "signal=$((status & 127)) oom=$oom"
    exit $((128 + (status & 127)))
fi
